"""The voice folder: the contract between export, repository building and serving.

A voice folder holds two ONNX files and ``voice.json``::

    voices/joe/
      acoustic.onnx   PHONEME_IDS[B,T] int64, PHONEME_LENGTH[B] int64, SCALES[B,3] fp32
                      -> LATENT[B,C,F] fp32, FRAME_COUNT[B] int64
      vocoder.onnx    LATENT[B,C,F] fp32 -> WAVEFORM[B,F*hop] fp32
      voice.json      this module's :class:`Voice`

``SCALES`` columns are (noise_scale, length_scale, noise_w), the order Piper uses.
Every export (Piper today, Coqui families later) writes this same folder, so the
repository builder and the Triton models never need to know where a voice came from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

VOICE_FILE = "voice.json"
ACOUSTIC_FILE = "acoustic.onnx"
VOCODER_FILE = "vocoder.onnx"

# Phoneme-id framing Piper VITS voices are trained with: BOS PAD, then each phoneme
# followed by PAD, then EOS.
PAD, BOS, EOS = "_", "^", "$"


@dataclass(frozen=True)
class Voice:
    name: str
    sample_rate: int
    hop_length: int
    latent_channels: int
    phonemizer_language: str
    # symbol -> list of ids (a symbol may map to several ids, as in Piper's tables)
    symbols: dict[str, list[int]]
    speakers: dict[str, int] = field(default_factory=dict)
    noise_scale: float = 0.667
    length_scale: float = 1.0
    noise_w: float = 0.8
    source: str = ""
    licence: str = ""
    # stage -> "fp32" | "fp16" | "int8"; stages not named are FP32
    precision: dict[str, str] = field(default_factory=dict)

    @property
    def num_speakers(self) -> int:
        return max(1, len(self.speakers))

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / VOICE_FILE
        path.write_text(json.dumps(asdict(self), indent=2, ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder_or_file: Path) -> Voice:
        path = Path(folder_or_file)
        if path.is_dir():
            path = path / VOICE_FILE
        data = json.loads(path.read_text(encoding="utf-8"))
        return cls(**data)

    def phonemes_to_ids(self, phonemes: str) -> list[int]:
        """Map a phoneme string to ids; symbols the voice does not know are dropped."""
        pad = self.symbols[PAD]
        ids = [*self.symbols[BOS], *pad]
        for symbol in phonemes:
            mapped = self.symbols.get(symbol)
            if mapped is None:
                continue
            ids.extend(mapped)
            ids.extend(pad)
        ids.extend(self.symbols[EOS])
        return ids
