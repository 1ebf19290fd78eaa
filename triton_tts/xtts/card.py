"""The XTTS voice card (``xtts.json``): what serving needs to know about an exported XTTS."""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

CARD_FILE = "xtts.json"
VOCAB_FILE = "vocab.json"
STYLE_FILE = "style.onnx"
SPEAKER_FILE = "speaker.onnx"
GPT_FILE = "gpt.onnx"
EMBEDDINGS_FILE = "embeddings.npz"
DECODER_FILE = "decoder.onnx"
GRAPH_FILES = (STYLE_FILE, SPEAKER_FILE, GPT_FILE, DECODER_FILE)

# The Coqui Public Model License 1.0.0 (non-commercial) covers Coqui's XTTS v2 weights.
CPML = "Coqui Public Model License 1.0.0 (non-commercial use only): https://coqui.ai/cpml"


@dataclass(frozen=True)
class Sampling:
    """How the next audio code is chosen; the card holds the checkpoint's defaults (Coqui's
    config.json inference settings). ``temperature`` 0 is greedy."""

    temperature: float = 0.75
    top_k: int = 50
    top_p: float = 0.85
    repetition_penalty: float = 5.0
    length_penalty: float = 1.0  # Coqui passes it to generate, where only beam search reads it
    speed: float = 1.0


@dataclass(frozen=True)
class XttsCard:
    name: str
    languages: list[str]
    # language -> the most characters of one segment (XTTS's tokenizer char_limits)
    char_limits: dict[str, int]
    # text tokens
    text_tokens: int
    text_start: int
    text_stop: int
    max_text_tokens: int  # a segment has fewer text ids than this (start and stop not counted)
    # audio codes
    audio_codes: int
    audio_start: int
    audio_stop: int
    max_audio_tokens: int  # generated codes per segment (Coqui's gpt max_gen_mel_tokens)
    # the GPT
    layers: int
    heads: int
    head_dim: int
    model_dim: int
    # The most conditioning latents one clip gives (the cache keeps room for them).
    style_latents: int = 32
    speaker_dim: int = 512
    # How a clip conditions the GPT (Coqui's gpt_use_perceiver_resampler): True (XTTS v2),
    # 32 latents per chunk of cond_chunk_seconds through the perceiver, averaged over the
    # chunks; False, one pass over the whole clip (up to cond_seconds) without it, a latent
    # per frame of the cloning spectrogram, so their number follows the clip's length.
    perceiver: bool = True
    # audio
    conditioning_rate: int = 22050  # the rate style.onnx and speaker.onnx take
    output_rate: int = 24000
    samples_per_code: int = 1024  # at the conditioning rate: each code is 1024 samples of 22.05 kHz
    # conditioning (seconds): Coqui's gpt_cond_len, gpt_cond_chunk_len, max_ref_len
    cond_seconds: float = 30.0
    cond_chunk_seconds: float = 4.0
    reference_seconds: float = 30.0
    min_chunk_seconds: float = 0.33  # shorter chunks do not condition (Coqui skips them)
    sampling: Sampling = field(default_factory=Sampling)
    source: str = ""
    licence: str = ""

    def takes_style(self, shape: tuple[int, ...]) -> bool:
        """Whether conditioning latents of ``shape`` (rows, model_dim) are this voice's."""
        if len(shape) != 2 or shape[1] != self.model_dim:
            return False
        return shape[0] == self.style_latents if self.perceiver else 1 <= shape[0] <= self.style_latents

    @property
    def output_samples_per_code(self) -> float:
        return self.samples_per_code * self.output_rate / self.conditioning_rate

    def save(self, folder: Path) -> Path:
        folder.mkdir(parents=True, exist_ok=True)
        path = folder / CARD_FILE
        path.write_text(json.dumps(asdict(self), indent=2, ensure_ascii=False), encoding="utf-8")
        return path

    @classmethod
    def load(cls, folder_or_file: Path) -> XttsCard:
        path = Path(folder_or_file)
        if path.is_dir():
            path = path / CARD_FILE
        data = json.loads(path.read_text(encoding="utf-8"))
        data["sampling"] = Sampling(**data.get("sampling", {}))
        return cls(**data)


def is_xtts_folder(folder: Path) -> bool:
    return (Path(folder) / CARD_FILE).is_file()
