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

from triton_tts.onnx_session import cpu_session
from triton_tts.xtts.card import (
    DECODER_FILE,
    EMBEDDINGS_FILE,
    GPT_FILE,
    SPEAKER_FILE,
    STYLE_FILE,
    Sampling,
    XttsCard,
)
from triton_tts.xtts.sampling import choose, first_seen

FloatArray = npt.NDArray[np.float32]


class ClipRefused(ValueError):
    """A reference clip that cannot condition the voice (too short, silent, ...)."""


@dataclass(frozen=True)
class Conditioning:
    """A clip's conditioning: the GPT's latents and the decoder's speaker embedding."""

    style: FloatArray  # (style_latents, model_dim)
    speaker: FloatArray  # (speaker_dim,)


@dataclass
class Generation:
    """One request's generation: its cache, what it has produced, how it chooses."""

    cache: FloatArray  # (L, 2, 1, H, capacity, hd)
    mask: FloatArray  # (1, capacity): 1 where the cache holds one of its positions
    filled: int
    sampling: Sampling
    rng: np.random.Generator
    seen: npt.NDArray[np.bool_]
    limit: int  # codes it may generate
    codes: list[int] = field(default_factory=list)
    latents: list[FloatArray] = field(default_factory=list)
    done: bool = False


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
    """The four graphs of an XTTS voice folder, with the loop between them."""

    def __init__(self, folder: Path, threads: int = 1):
        folder = Path(folder)
        self.card = XttsCard.load(folder)
        self.style_session = cpu_session(folder / STYLE_FILE, threads)
        self.speaker_session = cpu_session(folder / SPEAKER_FILE, threads)
        self.gpt_session = cpu_session(folder / GPT_FILE, threads)
        self.decoder_session = cpu_session(folder / DECODER_FILE, threads)
        with np.load(folder / EMBEDDINGS_FILE) as tables:
            self.tables = {name: tables[name].astype(np.float32) for name in tables.files}

    # conditioning
    def conditioning(self, audio: FloatArray) -> Conditioning:
        """Coqui's ``get_conditioning_latents`` of one clip at the card's conditioning rate:
        the style latents averaged over its chunks, the speaker embedding of the whole."""
        card, rate = self.card, self.card.conditioning_rate
        audio = np.asarray(audio, dtype=np.float32).reshape(-1)[: int(rate * card.reference_seconds)]
        cond = audio[: int(rate * card.cond_seconds)]
        chunk = int(rate * card.cond_chunk_seconds)
        pieces = [cond[i : i + chunk] for i in range(0, cond.shape[0], chunk)]
        pieces = [p for p in pieces if p.shape[0] >= rate * card.min_chunk_seconds]
        if not pieces:
            raise ClipRefused(
                f"the reference clip is too short: at least {card.min_chunk_seconds:.2f} s of audio is needed"
            )
        styles = [self.style_session.run(None, {"AUDIO": p[None]})[0][0] for p in pieces]
        speaker = self.speaker_session.run(None, {"AUDIO": audio[None]})[0][0]
        return Conditioning(np.mean(np.stack(styles), axis=0).astype(np.float32), speaker.astype(np.float32))

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

    def start(self, style: FloatArray, text_ids: list[int], sampling: Sampling, seed: int = 0,
              limit: int | None = None) -> Generation:  # fmt: skip
        """Prefill a generation: its cache holds the prompt, its first code is chosen."""
        gen, logits, latent = self._prefill(style, text_ids, sampling, seed, limit)
        self._choose(gen, logits, latent)
        return gen

    def _prefill(self, style: FloatArray, text_ids: list[int], sampling: Sampling, seed: int,
                 limit: int | None) -> tuple[Generation, FloatArray, FloatArray]:  # fmt: skip
        card = self.card
        limit = card.max_audio_tokens if limit is None else min(limit, card.max_audio_tokens)
        emb = self.prompt(style, text_ids)
        capacity = emb.shape[0] + limit
        cache = np.zeros((card.layers, 2, 1, card.heads, capacity, card.head_dim), dtype=np.float32)
        gen = Generation(
            cache=cache, mask=np.zeros((1, capacity), dtype=np.float32), filled=0, sampling=sampling,
            rng=np.random.default_rng(seed), seen=first_seen(card.audio_codes, card.audio_start), limit=limit,
        )  # fmt: skip
        logits, latent, present = self.gpt([gen], emb[None])
        self._keep(gen, present[:, :, 0], emb.shape[0])
        return gen, logits[0], latent[0]

    def teacher_forced(self, style: FloatArray, text_ids: list[int], codes: list[int]) -> FloatArray:
        """The cached loop fed ``codes`` whatever it would choose: row k is the logits that
        predict ``codes[k]`` (before any penalty or warping)."""
        gen, logits, _ = self._prefill(style, text_ids, Sampling(temperature=0.0), 0, len(codes))
        rows = [logits]
        t = self.tables
        for k, code in enumerate(codes[:-1]):
            emb = (t["audio"][code] + t["audio_position"][k + 1]).astype(np.float32)[None, None]
            step_logits, _, present = self.gpt([gen], emb)
            self._keep(gen, present[:, :, 0], 1)
            rows.append(step_logits[0])
        forced: FloatArray = np.stack(rows).astype(np.float32)
        return forced

    def gpt(
        self, gens: list[Generation], embeddings: FloatArray
    ) -> tuple[FloatArray, FloatArray, FloatArray]:
        """One GPT run over ``gens`` stacked: their new positions' embeddings (B, S, D)."""
        cache = gens[0].cache if len(gens) == 1 else np.concatenate([g.cache for g in gens], axis=2)
        mask = np.concatenate([g.mask for g in gens])
        new = np.ones((len(gens), embeddings.shape[1]), dtype=np.float32)
        outputs = self.gpt_session.run(
            None, {"EMBEDDINGS": embeddings, "PAST": cache, "MASK": np.concatenate([mask, new], axis=1)}
        )
        return outputs[0], outputs[1], outputs[2]

    def step(self, gens: list[Generation]) -> None:
        """One decode step of every unfinished generation in ``gens``, as one batch (their
        buffers must have one capacity: :meth:`start` them with one ``limit`` and text length
        for that, or step them alone)."""
        live = [g for g in gens if not g.done]
        if not live:
            return
        t = self.tables
        emb = np.stack([t["audio"][g.codes[-1]] + t["audio_position"][len(g.codes)] for g in live])[:, None]
        logits, latent, present = self.gpt(live, emb.astype(np.float32))
        for i, gen in enumerate(live):
            self._keep(gen, present[:, :, i], 1)
            self._choose(gen, logits[i], latent[i])

    def _keep(self, gen: Generation, present: FloatArray, count: int) -> None:
        gen.cache[:, :, 0, :, gen.filled : gen.filled + count] = present
        gen.mask[0, gen.filled : gen.filled + count] = 1.0
        gen.filled += count

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
        return gen

    # the decoder
    def waveform(self, latents: FloatArray, speaker: FloatArray, speed: float = 1.0) -> FloatArray:
        """Latents (T, D) -> audio at the output rate; ``speed`` stretches the latents as
        Coqui does (by 1 / speed, linearly)."""
        if speed != 1.0:
            latents = linear_stretch(latents, 1.0 / max(speed, 0.05))
        out = self.decoder_session.run(None, {"LATENTS": latents[None], "SPEAKER": speaker[None]})
        return np.asarray(out[0][0], dtype=np.float32)

    def synthesise(self, text_ids: list[int], conditioning: Conditioning, sampling: Sampling,
                   seed: int = 0, limit: int | None = None) -> FloatArray:  # fmt: skip
        gen = self.generate(conditioning.style, text_ids, sampling, seed, limit)
        return self.waveform(np.stack(gen.latents), conditioning.speaker, sampling.speed)


def session_inputs(session: ort.InferenceSession) -> list[str]:
    return [i.name for i in session.get_inputs()]
