"""How long one chunk may be: the bound every engine, chunk and request agrees on.

A TensorRT engine accepts only the shapes its optimisation profile covers, and a batch
with one item past the profile fails as a whole. So every chunk the API accepts must fit,
at the slowest SPEED and the noisiest NOISE_W: a 400-character chunk runs ~25 s at speed
1, four times that at SPEED 0.25, and NOISE_W 2 stretches durations further. Characters
cannot bound frames; phoneme ids with the voice's measured durations can:

- each voice has a budget per chunk: at most :data:`MAX_CHUNK_IDS` phoneme ids (the
  acoustic profile's max) and :data:`MAX_CHUNK_SECONDS` of audio (``max_frames``, a
  multiple of the latents' 64-frame padding: the vocoder profile's max);
- when a repository is built, the voice's acoustic model runs on
  :data:`CALIBRATION_TEXTS` at speed 1 and several NOISE_W; the worst frames per phoneme
  id (x :data:`MARGIN`) predicts a chunk's frames before any model runs;
- preprocess, which sees the ids, refuses a chunk over either budget (INVALID_ARG,
  :data:`TOO_LONG`); ``tts`` and ``tts_stream`` pack chunks shorter at slow speeds and
  split a refused chunk in two until the pieces fit, so long texts never fail on it.
"""

from __future__ import annotations

import contextlib
import itertools
import json
import math
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from triton_tts.contract.validation import MAX_BREAK_S, MAX_NOISE, InvalidRequest
from triton_tts.runtime.batching import FRAME_MULTIPLE  # acoustic graphs pad LATENT's frames to it

MAX_CHUNK_SECONDS = 48.0  # of audio per chunk; 400 characters of prose run ~25 s at speed 1
MAX_CHUNK_IDS = 2048  # phoneme ids per chunk (a bucket of batching.PHONEME_BUCKETS)
MARGIN = 1.25  # on the calibrated frames per id
NOISE_W_GRID = (0.0, 1.0, MAX_NOISE)  # calibrated points; linear in between
NOISY_DRAWS = 2  # runs per text where NOISE_W > 0 (the duration noise is random)
# The duration noise's draws come from this seed (onnxruntime's global one, set before the
# calibration's session): a voice calibrates the same on every machine and every build, so its
# bounds, and the configs that carry them, do not move with a lucky or unlucky draw.
CALIBRATION_SEED = 7
# Plain sentences and the slowest texts per id we know (interjections, spelled letters,
# numbers, one-word sentences), after normalisation.
CALIBRATION_TEXTS = (
    "The quick brown fox jumps over the lazy dog near the river bank.",
    "Please hold while I transfer your call to the next available agent.",
    "Hmm... uh, oh! Ah? Well; mm, okay.",
    "FBI, CIA, NASA, USA, UK, EU, NATO, UNESCO, IBM, BBC.",
    "a b c d e f g h i j k l m n o p q r s t u v w x y z",
    "1 2 3 4 5 6 7 8 9 10 11 12 13 14 15 16 17 18 19 20",
    "Yes. No. Maybe. Stop. Go. Wait. Now. Here. There.",
    "On 12/25/2024 at 3:45 PM, the total was $1,234.56, or 78% of the budget.",
)
# The same for Mandarin voices, before normalisation: prose, and the slowest per id we
# know (interjections, digits read one by one, numbers, short sentences).
CALIBRATION_TEXTS_CHINESE = (
    "今天天气很好，我们一起去公园散步，顺便买一些水果回家。",
    "请稍等，我马上为您转接到下一位有空的客服人员。",
    "嗯……啊，哦！唉？好吧；嗯，行。",
    "我的电话是13812345678，编号是00123。",
    "一二三四五六七八九十，甲乙丙丁。",
    "2024年3月15日下午3:45，总价是¥1234.56，占预算的78%。",
    "是。不。也许。停。走。等等。现在。这里。那里。",
)
# Everyday prose a voice's speaking rate is measured on (what admission predicts work
# from): the texts above are the slowest per id and read ~40 % slower per character than
# prose, so a rate from them would count ordinary sentences as that much more work.
RATE_TEXTS = (
    "Thank you for calling. Your order has shipped and will arrive on Tuesday.",
    "The museum opens at nine in the morning and closes at six in the evening.",
    "If you have questions about your bill, please stay on the line for an agent.",
    "Heavy rain is expected this afternoon, so remember to bring an umbrella with you.",
    "Our new library branch offers free workshops for children every Saturday morning.",
    "The train to the airport leaves from platform four every twenty minutes.",
)
RATE_TEXTS_CHINESE = (
    "感谢您的来电，您的订单已经发货，预计星期二送达。",
    "博物馆每天早上九点开门，晚上六点关门。",
    "如果您对账单有疑问，请不要挂机，客服人员马上为您服务。",
    "今天下午可能有大雨，出门的时候记得带伞。",
    "新开的图书馆每个星期六上午都有免费的儿童活动。",
    "去机场的火车每二十分钟从四号站台出发一次。",
)
RATE_DRAWS = 3  # runs of the rate texts at the voice's own NOISE_W (its durations are random)
# Seconds of audio per character of normalised text at speed 1, for a voice measured
# without it (a step-wise decoder): English prose runs about 15 characters a second.
DEFAULT_SECONDS_PER_CHAR = 0.067
TOO_LONG = "TEXT is too long for one chunk"

# The audio one ``tts`` or ``tts_stream`` request may make, speech and silence, refused
# (INVALID_ARG, :func:`check_audio`) before any chunk runs. Speech is bounded by the text
# (validation.MAX_LONG_TEXT_CHARS) over SPEED; silence, which SSML writes in a few
# characters (a 10 s break in 19), is bounded on its own.
#
# 16 hours: the longest text at the slowest SPEED is speech, and passes, in the slowest
# voice served: 50,000 characters of Mandarin (baker: 0.19 s a character) or of English at
# NOISE_W 2 at SPEED 0.25 are 10.5 to 13 h, and MAX_SILENCE_S on top. (joe's prediction at
# NOISE_W 2 comes from frames per id measured with the voice's noise: two exports drew
# 0.19 and 0.23 s a character, 10.5 and 12.8 h; 12 h refused the longer draw's.) Past it
# is only text whose reading grows (long numbers said in words) at the slowest settings;
# a request that large is sent in parts (or streamed: tts holds it all at once).
MAX_AUDIO_S = 16 * 3600.0
# Silence (SSML breaks, paragraph pauses, silence before the first word) per request:
# pacing for a long document (a strong pause after each of 500 paragraphs is 325 s), not
# audio of its own: 200 breaks of 10 s in 3.8 KB made 2,000 s (168 MiB) before this bound.
MAX_SILENCE_S = 600.0
# ... and per character of TEXT (markup included), or one longest break whatever the text:
# "Breathe in.<break time='5s'/>" is 0.17 s a character; only a document of little but
# breaks, which says nothing, reaches 0.5.
MAX_SILENCE_S_PER_CHAR = 0.5
CACHE_FILE = "chunk_limits.json"  # in the voice folder, next to the graph it was measured on


@dataclass(frozen=True)
class ChunkLimits:
    """One voice's chunk budget, measured at build and rendered into the configs."""

    max_ids: int
    max_frames: int
    # (NOISE_W, frames per phoneme id at speed 1), ascending NOISE_W, margin included
    frames_per_id: tuple[tuple[float, float], ...]
    # audio seconds per character of normalised prose (RATE_TEXTS) at speed 1 and the
    # voice's NOISE_W, all texts together (0: not measured): what admission predicts work from
    seconds_per_char: float = 0.0

    def audio_seconds(self, characters: int, speed: float | None, noise_w: float | None) -> float:
        """The audio a normalised text of ``characters`` is predicted to take: the voice's
        speaking rate, over SPEED, stretched as the calibrated frames per id are by a
        NOISE_W above the voice's own (None)."""
        rate = self.seconds_per_char or DEFAULT_SECONDS_PER_CHAR
        noisier = 1.0
        if noise_w is not None and noise_w > 1.0:
            noisier = self.frames_per_id_at(noise_w) / self.frames_per_id_at(1.0)
        return characters * rate * noisier / (speed or 1.0)

    def frames_per_id_at(self, noise_w: float) -> float:
        points = self.frames_per_id
        if noise_w <= points[0][0]:
            return points[0][1]
        for (w0, f0), (w1, f1) in itertools.pairwise(points):
            if noise_w <= w1:
                return f0 + (f1 - f0) * (noise_w - w0) / (w1 - w0)
        return points[-1][1]

    def predicted_frames(self, ids: int, speed: float, noise_w: float) -> int:
        """Calibrated at speed 1, where each id's duration was rounded up once; at another
        speed the model rounds up d / speed instead, up to one frame more per id."""
        rounding = 0.0 if speed == 1.0 else 1.0
        return math.ceil(ids * (self.frames_per_id_at(noise_w) / speed + rounding))

    def refusal(self, ids: int, speed: float, noise_w: float) -> str | None:
        """Why a chunk of ``ids`` phoneme ids is over budget, or None if it fits."""
        if ids > self.max_ids:
            return (
                f"{TOO_LONG}: {ids} phoneme ids, at most {self.max_ids} (send long text to tts or tts_stream)"
            )
        frames = self.predicted_frames(ids, speed, noise_w)
        if frames > self.max_frames:
            return (
                f"{TOO_LONG} at SPEED {speed:g}, NOISE_W {noise_w:g}: ~{frames} frames predicted, at most "
                f"{self.max_frames} (send long text to tts or tts_stream, which split it)"
            )
        return None

    def to_json(self) -> str:
        return json.dumps(
            {
                "max_ids": self.max_ids,
                "max_frames": self.max_frames,
                "frames_per_id": [list(p) for p in self.frames_per_id],
                "seconds_per_char": self.seconds_per_char,
            },
            sort_keys=True,
        )

    @classmethod
    def from_json(cls, text: str) -> ChunkLimits:
        data = json.loads(text)
        return cls(
            int(data["max_ids"]),
            int(data["max_frames"]),
            tuple((float(w), float(f)) for w, f in data["frames_per_id"]),
            float(data.get("seconds_per_char", 0.0)),
        )


def check_audio(speech_s: float, silence_s: float, characters: int) -> None:
    """Refuse a request over the audio it may make: ``speech_s`` predicted
    (:meth:`ChunkLimits.audio_seconds`), ``silence_s`` exact (its SSML), from a TEXT of
    ``characters``. The message names the bound and what the request would make."""
    allowed = min(MAX_SILENCE_S, max(MAX_BREAK_S, MAX_SILENCE_S_PER_CHAR * characters))
    if silence_s > allowed + 1e-6:
        per_char = (
            f"; {MAX_SILENCE_S_PER_CHAR:g} s per character of TEXT, {allowed:g} s for its {characters}"
            if allowed < MAX_SILENCE_S
            else ""
        )
        raise InvalidRequest(
            f"TEXT asks for {silence_s:,.1f} s of silence (SSML breaks and pauses); the limit is "
            f"{MAX_SILENCE_S:g} s per request{per_char}"
        )
    if speech_s + silence_s > MAX_AUDIO_S:
        raise InvalidRequest(
            f"TEXT would make about {(speech_s + silence_s) / 3600:,.1f} h of audio at this SPEED; the "
            f"limit is {MAX_AUDIO_S / 3600:g} h per request: send it in parts"
        )


def chunk_scale(limits: ChunkLimits, speed: float | None, noise_w: float | None) -> float:
    """How much shorter than at speed 1 a long text's chunks are packed, so that slow or
    noisy requests rarely need a refused chunk split (1.0 for the usual settings)."""
    slower = min(1.0, speed or 1.0)
    usual = limits.frames_per_id_at(1.0)
    noisier = min(1.0, usual / limits.frames_per_id_at(1.0 if noise_w is None else noise_w))
    return slower * noisier


def frame_budget(sample_rate: int, hop_length: int, seconds: float = MAX_CHUNK_SECONDS) -> int:
    frames = math.ceil(seconds * sample_rate / hop_length)
    return math.ceil(frames / FRAME_MULTIPLE) * FRAME_MULTIPLE


def from_measurements(
    max_frames: int,
    measured: Sequence[tuple[float, int, int]],
    margin: float = MARGIN,
    max_ids: int = MAX_CHUNK_IDS,
) -> ChunkLimits:
    """measured: (NOISE_W, phoneme ids, frames at speed 1) per run."""
    envelope: list[tuple[float, float]] = []
    for w in sorted({w for w, _, _ in measured}):
        worst = round(margin * max(frames / ids for ww, ids, frames in measured if ww == w), 3)
        # more duration noise never makes the worst case shorter
        envelope.append((w, max(worst, envelope[-1][1]) if envelope else worst))
    return ChunkLimits(max_ids, max_frames, tuple(envelope))


def calibrate(voice_dir: Path) -> ChunkLimits:
    """Measure the voice (cached in its folder, keyed by the acoustic graph)."""
    from triton_tts.contract.voice import ACOUSTIC_FILE, Voice

    voice = Voice.load(voice_dir)
    budget = frame_budget(voice.sample_rate, voice.hop_length)
    if voice.max_frames:  # the graph's own bound (a position table, say)
        budget = min(budget, voice.max_frames // FRAME_MULTIPLE * FRAME_MULTIPLE)
    max_ids = min(MAX_CHUNK_IDS, voice.max_acoustic_ids or MAX_CHUNK_IDS)
    if voice.acoustic_kind != "single":
        return decoder_bound(voice, voice_dir, budget)
    graph = (voice_dir / ACOUSTIC_FILE).stat()
    texts = f"{len(CALIBRATION_TEXTS)}:prose-{len(RATE_TEXTS)}x{RATE_DRAWS}:seed-{CALIBRATION_SEED}"
    key = f"{graph.st_size}:{graph.st_mtime_ns}:{MARGIN}:{budget}:{max_ids}:{texts}"
    cache = voice_dir / CACHE_FILE
    try:
        cached = json.loads(cache.read_text(encoding="utf-8"))
        if cached["key"] == key:
            return ChunkLimits.from_json(json.dumps(cached["limits"]))
    except (OSError, ValueError, KeyError):
        pass
    measured, seconds_per_char = measure(voice, voice_dir)
    limits = replace(from_measurements(budget, measured, max_ids=max_ids), seconds_per_char=seconds_per_char)
    with contextlib.suppress(OSError):  # a read-only voice folder: measure again next time
        cache.write_text(json.dumps({"key": key, "limits": json.loads(limits.to_json())}), encoding="utf-8")
    return limits


def measure(voice: object, voice_dir: Path) -> tuple[list[tuple[float, int, int]], float]:
    """(NOISE_W, ids, frames) of the calibration texts through the voice's acoustic graph,
    and the voice's audio seconds per normalised character of prose (:data:`RATE_TEXTS`
    at speed 1 and the voice's own NOISE_W, as requests are served by default)."""
    import numpy as np
    import onnxruntime as ort

    from triton_tts.contract.voice import ACOUSTIC_FILE, Voice
    from triton_tts.runtime.stages import AcousticRunner, RunFailed
    from triton_tts.text.frontend import is_chinese
    from triton_tts.text.reader import TextReader

    assert isinstance(voice, Voice)
    ort.set_seed(CALIBRATION_SEED)  # before the session: its random ops draw from it
    reader = TextReader(voice)
    chinese = is_chinese(voice.phonemizer_language)
    runner = AcousticRunner(voice_dir / ACOUSTIC_FILE, 1, 1, 1 << 20)

    def read(texts: Sequence[str]) -> tuple[list[Any], int]:
        """The texts' ids (read once, whatever the runs) and their normalised characters."""
        spoken = [reader.normalize(t) for t in texts]
        return [np.array(r.ids, dtype=np.int64) for r in reader.read(spoken)], sum(map(len, spoken))

    def frames(ids: list[Any], noise_w: float) -> list[tuple[int, int]]:
        scales = np.array([voice.noise_scale, voice.length_scale, noise_w], dtype=np.float32)
        counted: list[tuple[int, int]] = []
        for row, result in zip(ids, runner.run(ids, [scales] * len(ids)), strict=True):
            if isinstance(result, RunFailed):
                raise RuntimeError(f"calibrating {voice_dir}: {result.message}")
            counted.append((len(row), result[1]))
        return counted

    written, _ = read(CALIBRATION_TEXTS_CHINESE if chinese else CALIBRATION_TEXTS)
    measured = [
        (noise_w, ids, count)
        for noise_w in NOISE_W_GRID
        for _ in range(NOISY_DRAWS if noise_w > 0 else 1)
        for ids, count in frames(written, noise_w)
    ]
    prose, characters = read(RATE_TEXTS_CHINESE if chinese else RATE_TEXTS)
    rate_frames = sum(count for _ in range(RATE_DRAWS) for _, count in frames(prose, voice.noise_w))
    seconds = rate_frames * voice.hop_length / voice.sample_rate
    return measured, round(seconds / (RATE_DRAWS * characters), 5)


def decoder_bound(voice: object, voice_dir: Path, budget: int) -> ChunkLimits:
    """Step-wise (Tacotron2) voices: the decoder loop stops at ``max_decoder_steps`` of r
    frames each whatever the text or SPEED, so that guard bounds frames (a longer mel is
    cut there, as in Coqui); ids stay bounded by preprocess."""
    import onnx

    from triton_tts.contract.voice import Voice
    from triton_tts.runtime.tacotron import DECODER_STEP_FILE

    assert isinstance(voice, Voice)
    step = onnx.load(str(voice_dir / DECODER_STEP_FILE), load_external_data=False).graph
    frames_out = next(o for o in step.output if o.name == "FRAMES")
    per_step = frames_out.type.tensor_type.shape.dim[1].dim_value or 1
    guard = voice.max_decoder_steps * per_step + 2 * voice.mel_edge_frames
    frames = math.ceil(max(budget, guard) / FRAME_MULTIPLE) * FRAME_MULTIPLE
    # frames per id at which no chunk of MAX_CHUNK_IDS ids is refused at any SPEED
    from triton_tts.contract.validation import MIN_SPEED

    return ChunkLimits(MAX_CHUNK_IDS, frames, ((0.0, frames * MIN_SPEED / MAX_CHUNK_IDS),))
