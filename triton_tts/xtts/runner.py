"""XTTS on ONNX Runtime: a clip's conditioning, the GPT's generation over its key-value
cache, and the decoder; what the export's parity gate runs and what serving builds on.

Each generation keeps its cache in one buffer sized for its whole run (prompt + every code
it may generate), passed whole to the GPT with a mask of the positions filled so far: no
copy grows with the cache, and a batch of generations is the buffers stacked.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path

import numpy as np
import numpy.typing as npt
import onnxruntime as ort

from triton_tts.contract.validation import UNUSABLE_CLIP, InvalidRequest
from triton_tts.runtime.onnx_session import cpu_session
from triton_tts.xtts import defaults
from triton_tts.xtts.card import EMBEDDINGS_FILE, GPT_FILE, Sampling, XttsCard
from triton_tts.xtts.graphs import DECODER, SPEAKER, STYLE, Graphs, LocalGraphs
from triton_tts.xtts.sampling import choose, first_seen

FloatArray = npt.NDArray[np.float32]


def clip_refused(message: str) -> InvalidRequest:
    """A reference clip that cannot condition the voice (too short, silent, ...)."""
    return InvalidRequest(message, UNUSABLE_CLIP)


@dataclass(frozen=True)
class Conditioning:
    """A clip's conditioning: the GPT's latents and the decoder's speaker embedding."""

    style: FloatArray  # (rows, model_dim): the card's style_latents, or fewer without the perceiver
    speaker: FloatArray  # (speaker_dim,)


class PoolFull(RuntimeError):
    """Every slot of a cache pool holds a generation."""


@dataclass
class Generation:
    """One request's generation: its slot in a cache pool, what it has produced, how it
    chooses."""

    pool: CachePool
    sampling: Sampling
    rng: np.random.Generator
    seen: npt.NDArray[np.bool_]
    limit: int  # codes it may generate
    slot: int = -1
    codes: list[int] = field(default_factory=list)
    latents: list[FloatArray] = field(default_factory=list)
    done: bool = False


class CachePool:
    """Preallocated key-value cache for ``slots`` generations, batch first
    (slots, L, 2, H, capacity, hd), with a mask of the positions each slot holds.

    The live generations always sit in slots 0..n-1 (one that leaves is replaced by the
    last), so a decode step over them passes ``kv[:n]``, a view: nothing is copied per
    step and nothing grows. ``np.zeros`` leaves pages untouched until written, so memory
    follows the positions filled, up to ``slots * capacity`` positions."""

    def __init__(self, card: XttsCard, slots: int, capacity: int):
        if slots < 1 or capacity < 1:
            raise ValueError(f"a cache pool needs slots and capacity, got {slots} x {capacity}")
        shape = (slots, card.layers, 2, card.heads, capacity, card.head_dim)
        self.kv: FloatArray = np.zeros(shape, dtype=np.float32)
        self.mask: FloatArray = np.zeros((slots, capacity), dtype=np.float32)
        self.filled = np.zeros(slots, dtype=np.int64)
        self.owners: list[Generation] = []

    @property
    def slots(self) -> int:
        return int(self.kv.shape[0])

    @property
    def capacity(self) -> int:
        return int(self.kv.shape[4])

    @property
    def live(self) -> int:
        return len(self.owners)

    def bytes_per_position(self) -> int:
        return int(self.kv[0, :, :, :, 0].nbytes)

    def acquire(self, gen: Generation) -> None:
        if len(self.owners) >= self.slots:
            raise PoolFull(f"all {self.slots} cache slots are in use")
        gen.slot = len(self.owners)
        self.owners.append(gen)
        self.mask[gen.slot] = 0.0
        self.filled[gen.slot] = 0

    def release(self, gen: Generation) -> None:
        """Free ``gen``'s slot; the last slot's generation moves into it (its filled
        positions only are copied)."""
        slot = gen.slot
        if slot < 0 or slot >= len(self.owners) or self.owners[slot] is not gen:
            return
        last = self.owners.pop()
        if last is not gen:
            used = int(self.filled[last.slot])
            self.kv[slot, :, :, :, :used] = self.kv[last.slot, :, :, :, :used]
            self.mask[slot] = self.mask[last.slot]
            self.filled[slot] = used
            last.slot = slot
            self.owners[slot] = last
        gen.slot = -1

    def keep(self, slot: int, present: FloatArray) -> None:
        """Store a slot's new keys and values (L, 2, H, S, hd) after its filled positions."""
        start = int(self.filled[slot])
        count = present.shape[3]
        if start + count > self.capacity:
            raise PoolFull(f"slot {slot} holds {start} positions; {count} more exceed {self.capacity}")
        self.kv[slot, :, :, :, start : start + count] = present
        self.mask[slot, start : start + count] = 1.0
        self.filled[slot] = start + count


def linear_stretch(latents: FloatArray, scale: float) -> FloatArray:
    """torch's ``F.interpolate(mode="linear", scale_factor=scale)`` along axis 0 (half-pixel
    centres, edges clamped), as Coqui stretches the latents for ``speed``."""
    length = latents.shape[0]
    out_length = int(np.floor(length * scale))
    source = (np.arange(out_length, dtype=np.float64) + 0.5) / scale - 0.5
    source = np.clip(source, 0.0, None)
    low = np.minimum(np.floor(source).astype(np.int64), length - 1)
    high = np.minimum(low + 1, length - 1)
    weight = (source - low).astype(np.float32)[:, None]
    stretched: FloatArray = (latents[low] * (1.0 - weight) + latents[high] * weight).astype(np.float32)
    return stretched


class XttsRunner:
    """The four graphs of an XTTS voice folder, with the loop between them: the GPT in
    this process, the conditioning encoders and the decoder through ``graphs`` (default:
    sessions in this process too; inside Triton, the voice's stage models)."""

    def __init__(self, folder: Path, threads: int = defaults.THREADS, graphs: Graphs | None = None):
        folder = Path(folder)
        self.card = XttsCard.load(folder)
        self.graphs: Graphs = graphs if graphs is not None else LocalGraphs(folder, threads)
        self.gpt_session = cpu_session(folder / GPT_FILE, threads)
        with np.load(folder / EMBEDDINGS_FILE) as tables:
            self.tables = {name: tables[name].astype(np.float32) for name in tables.files}

    # conditioning
    def conditioning(self, audio: FloatArray) -> Conditioning:
        """Coqui's ``get_conditioning_latents`` of one clip at the card's conditioning rate:
        the style latents (with the perceiver, averaged over the clip's chunks; without it,
        of the whole clip in one pass), the speaker embedding of the whole."""
        card, rate = self.card, self.card.conditioning_rate
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)[: int(rate * card.reference_seconds)]
        cond = audio[: int(rate * card.cond_seconds)]
        # Without the perceiver Coqui takes the clip whole: one piece, latents per frame.
        chunk = int(rate * card.cond_chunk_seconds) if card.perceiver else max(cond.shape[0], 1)
        pieces = [cond[i : i + chunk] for i in range(0, cond.shape[0], chunk)]
        pieces = [p for p in pieces if p.shape[0] >= rate * card.min_chunk_seconds]
        if not pieces:
            raise clip_refused(
                "REFERENCE_AUDIO: the reference clip is too short: "
                f"at least {card.min_chunk_seconds:.2f} s of audio is needed"
            )
        styles = [self.graphs.run(STYLE, {"AUDIO": p[None]})[0] for p in pieces]
        speaker = self.graphs.run(SPEAKER, {"AUDIO": audio[None]})[0]
        conditioning = Conditioning(
            np.mean(np.stack(styles), axis=0).astype(np.float32), speaker.astype(np.float32)
        )
        # Whatever the clip held, a voice conditioned to NaN or infinity would poison the
        # decode batch it joins: refused here, with the clip, before any generation.
        if not (np.all(np.isfinite(conditioning.style)) and np.all(np.isfinite(conditioning.speaker))):
            raise clip_refused("REFERENCE_AUDIO: the reference clip conditions the voice to NaN or infinity")
        return conditioning

    # the GPT
    def prompt(self, style: FloatArray, text_ids: list[int]) -> FloatArray:
        """The prompt's embeddings: conditioning latents, [start] + text + [stop] with their
        positions, the start code at audio position 0."""
        card, t = self.card, self.tables
        ids = np.array([card.text_start, *text_ids, card.text_stop], dtype=np.int64)
        text = t["text"][ids] + t["text_position"][: ids.shape[0]]
        start = t["audio"][card.audio_start] + t["audio_position"][0]
        prompt: FloatArray = np.concatenate([style, text, start[None]]).astype(np.float32)
        return prompt

    def capacity(self, limit: int | None = None) -> int:
        """Cache positions one generation may need: the longest prompt and its codes."""
        card = self.card
        codes = card.max_audio_tokens if limit is None else min(limit, card.max_audio_tokens)
        return card.style_latents + card.max_text_tokens + 3 + codes

    def pool(self, slots: int, limit: int | None = None) -> CachePool:
        return CachePool(self.card, slots, self.capacity(limit))

    def start(self, style: FloatArray, text_ids: list[int], sampling: Sampling, seed: int = 0,
              limit: int | None = None, pool: CachePool | None = None) -> Generation:  # fmt: skip
        """Prefill a generation in a free slot of ``pool`` (default: a pool of its own):
        its cache holds the prompt, its first code is chosen."""
        gen, logits, latent = self._prefill(style, text_ids, sampling, seed, limit, pool)
        try:
            self._choose(gen, logits, latent)
        except BaseException:  # a failed start holds no slot: a leaked one is never freed
            gen.pool.release(gen)
            raise
        return gen

    def _prefill(
        self,
        style: FloatArray,
        text_ids: list[int],
        sampling: Sampling,
        seed: int,
        limit: int | None,
        pool: CachePool | None,
    ) -> tuple[Generation, FloatArray, FloatArray]:
        card = self.card
        limit = card.max_audio_tokens if limit is None else min(limit, card.max_audio_tokens)
        emb = self.prompt(style, text_ids)
        if pool is None:
            pool = CachePool(card, 1, emb.shape[0] + limit)
        elif emb.shape[0] + limit - 1 > pool.capacity:
            raise ValueError(
                f"a prompt of {emb.shape[0]} positions and {limit} codes exceed the pool's {pool.capacity}"
            )
        gen = Generation(
            pool=pool, sampling=sampling, rng=np.random.default_rng(seed),
            seen=first_seen(card.audio_codes, card.audio_start), limit=limit,
        )  # fmt: skip
        pool.acquire(gen)
        try:
            logits, latent, present = self.gpt(pool, gen.slot, gen.slot + 1, emb[None])
            pool.keep(gen.slot, present[0])
        except BaseException:
            pool.release(gen)
            raise
        return gen, logits[0], latent[0]

    def teacher_forced(self, style: FloatArray, text_ids: list[int], codes: list[int]) -> FloatArray:
        """The cached loop fed ``codes`` whatever it would choose: row k is the logits that
        predict ``codes[k]`` (before any penalty or warping)."""
        gen, logits, _ = self._prefill(style, text_ids, Sampling(temperature=0.0), 0, len(codes), None)
        rows = [logits]
        t, pool = self.tables, gen.pool
        for k, code in enumerate(codes[:-1]):
            emb = (t["audio"][code] + t["audio_position"][k + 1]).astype(np.float32)[None, None]
            step_logits, _, present = self.gpt(pool, gen.slot, gen.slot + 1, emb)
            pool.keep(gen.slot, present[0])
            rows.append(step_logits[0])
        pool.release(gen)
        forced: FloatArray = np.stack(rows).astype(np.float32)
        return forced

    def gpt(
        self, pool: CachePool, first: int, end: int, embeddings: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """One GPT run over slots ``first``..``end``-1 of ``pool`` (a view of its buffer):
        their new positions' embeddings (B, S, D)."""
        new = np.ones((end - first, embeddings.shape[1]), dtype=np.float32)
        mask = np.concatenate([pool.mask[first:end], new], axis=1)
        outputs = self.gpt_session.run(
            None, {"EMBEDDINGS": embeddings, "PAST": pool.kv[first:end], "MASK": mask}
        )
        return outputs[0], outputs[1], outputs[2]

    def step(self, gens: list[Generation]) -> int:
        """One decode step of every unfinished generation in ``gens`` (of one pool), as one
        GPT run over the slots from the lowest to the highest of them; returns the batch
        size. Slots in that range that are not stepped are computed and their results
        dropped: step a pool's live generations together (they fill slots 0..n-1)."""
        live = [g for g in gens if not g.done]
        if not live:
            return 0
        pool = live[0].pool
        if any(g.pool is not pool for g in live):
            raise ValueError("a step batches generations of one pool")
        first = min(g.slot for g in live)
        end = max(g.slot for g in live) + 1
        t = self.tables
        d = self.card.model_dim
        emb = np.zeros((end - first, 1, d), dtype=np.float32)
        for g in live:
            emb[g.slot - first, 0] = t["audio"][g.codes[-1]] + t["audio_position"][len(g.codes)]
        logits, latent, present = self.gpt(pool, first, end, emb)
        for gen in live:
            row = gen.slot - first
            pool.keep(gen.slot, present[row])
            self._choose(gen, logits[row], latent[row])
        return end - first

    def _choose(self, gen: Generation, logits: FloatArray, latent: FloatArray) -> None:
        code = choose(logits, gen.seen, gen.sampling, gen.rng)
        gen.codes.append(code)
        gen.latents.append(latent.astype(np.float32))
        gen.done = code == self.card.audio_stop or len(gen.codes) >= gen.limit

    def generate(self, style: FloatArray, text_ids: list[int], sampling: Sampling, seed: int = 0,
                 limit: int | None = None) -> Generation:  # fmt: skip
        gen = self.start(style, text_ids, sampling, seed, limit)
        while not gen.done:
            self.step([gen])
        gen.pool.release(gen)
        return gen

    # the decoder
    def waveform(self, latents: FloatArray, speaker: FloatArray, speed: float = 1.0) -> FloatArray:
        """Latents (T, D) -> audio at the output rate; ``speed`` stretches the latents as
        Coqui does (by 1 / speed, linearly)."""
        if speed != 1.0:
            latents = linear_stretch(latents, 1.0 / max(speed, 0.05))
        out = self.graphs.run(DECODER, {"LATENTS": latents[None], "SPEAKER": speaker[None]})
        return np.asarray(out[0], dtype=np.float32)

    def synthesise(self, text_ids: list[int], conditioning: Conditioning, sampling: Sampling,
                   seed: int = 0, limit: int | None = None) -> FloatArray:  # fmt: skip
        gen = self.generate(conditioning.style, text_ids, sampling, seed, limit)
        return self.waveform(np.stack(gen.latents), conditioning.speaker, sampling.speed)


def session_inputs(session: ort.InferenceSession) -> list[str]:
    return [i.name for i in session.get_inputs()]
