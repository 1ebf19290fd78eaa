"""A voice's text reader: text -> what the voice reads aloud -> its ids.

One place for what preprocess, the long-text models, the chunk-limit calibration and the
warm-up sample do with a voice's text, so that each voice is read by the front-end of its
language (triton_tts/text/frontend.py): English normalisation and espeak-ng phonemes for
phoneme and character voices; Chinese normalisation and pinyin for Mandarin voices, as
Baker-corpus symbols for ``pinyin-baker`` ones (triton_tts/text/chinese.py).
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from typing import TYPE_CHECKING

from triton_tts.text.frontend import frontend_for, is_chinese
from triton_tts.voice import PINYIN_BAKER

if TYPE_CHECKING:
    from triton_tts.text.phonemize import EspeakPhonemizer
    from triton_tts.voice import Voice


@dataclass(frozen=True)
class Reading:
    ids: list[int]
    speaks: bool  # False: nothing the voice can pronounce (only framing, pauses)


class TextReader:
    """Reads texts for one voice; safe to share between threads once built."""

    def __init__(self, voice: Voice) -> None:
        self.voice = voice
        self.frontend = frontend_for(voice.phonemizer_language, voice.tokens)
        self.baker = voice.tokens == PINYIN_BAKER
        if self.baker and not is_chinese(voice.phonemizer_language):
            raise ValueError(f"voice '{voice.name}': {PINYIN_BAKER} tokens need a Chinese language")

    @cached_property
    def _espeak(self) -> EspeakPhonemizer:
        from triton_tts.text.phonemize import EspeakPhonemizer  # libespeak-ng: loaded on first use

        return EspeakPhonemizer(self.voice.phonemizer_language)

    @cached_property
    def framing(self) -> int:
        """Ids of a text with nothing in it (BOS, EOS, blanks)."""
        return len(self.voice.symbols_to_ids([]) if self.baker else self.voice.phonemes_to_ids(""))

    def normalise(self, text: str) -> str:
        return self.frontend.normalise(text)

    def read(self, texts: list[str]) -> list[Reading]:
        """Normalised texts -> their ids (in one espeak-ng call for phoneme voices)."""
        if self.baker:
            from triton_tts.text.chinese import baker_symbols, pinyin

            said = [baker_symbols(pinyin(text), self.voice.syllables) for text in texts]
            return [Reading(self.voice.symbols_to_ids(s), bool(s)) for s in said]
        from triton_tts.text.phonemize import has_speech

        readings = []
        for phonemes in self._espeak.symbols(texts, self.voice.tokens):
            ids = self.voice.phonemes_to_ids(phonemes)
            readings.append(Reading(ids, len(ids) > self.framing and has_speech(phonemes)))
        return readings
