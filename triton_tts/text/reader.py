"""A voice's text reader: text -> what the voice reads aloud -> its ids.

One place for what preprocess, the long-text models, the chunk-limit calibration and the
warm-up sample do with a voice's text, so that each voice is read by the front-end of its
language (triton_tts/text/frontend.py): English normalisation and espeak-ng phonemes for
phoneme and character voices; Chinese normalisation and pinyin for Mandarin voices, as
Baker-corpus symbols for ``pinyin-baker`` ones (triton_tts/text/chinese.py).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from triton_tts.text.frontend import frontend_for, is_chinese
from triton_tts.text.speaks import reading_speaks
from triton_tts.text.words import letter_owners, phoneme_owners, tokens
from triton_tts.voice import PINYIN_BAKER

if TYPE_CHECKING:
    from triton_tts.text.phonemize import EspeakPhonemizer
    from triton_tts.voice import Voice


@dataclass(frozen=True)
class Reading:
    ids: list[int]
    speaks: bool  # False: nothing the voice can pronounce (only framing, pauses)
    # When asked for (timestamps): for each id, the index of the text's word (whitespace
    # separated, triton_tts/text/words.py) it says; -1 for none.
    owners: list[int] | None = None


class TextReader:
    """Reads texts for one voice; safe to share between threads once built."""

    def __init__(self, voice: Voice) -> None:
        self.voice = voice
        self.frontend = frontend_for(voice.phonemizer_language, voice.tokens)
        self.baker = voice.tokens == PINYIN_BAKER
        if self.baker and not is_chinese(voice.phonemizer_language):
            raise ValueError(f"voice '{voice.name}': {PINYIN_BAKER} tokens need a Chinese language")

    @cached_property
    def framing(self) -> int:
        """Ids of a text with nothing in it (BOS, EOS, blanks)."""
        return len(self.voice.symbols_to_ids([]) if self.baker else self.voice.phonemes_to_ids(""))

    def normalize(self, text: str) -> str:
        return self.frontend.normalize(text)

    @property
    def timed(self) -> bool:
        """Whether this reader can say which ids belong to which word (not for pinyin
        voices yet: their symbols are syllables, not letters)."""
        return not self.baker

    def read(self, texts: list[str], owned: Sequence[bool] = ()) -> list[Reading]:
        """Normalised texts -> their ids (in one espeak-ng call for phoneme voices);
        ``owned[i]``: also say which word each id of text i belongs to."""
        if self.baker:
            from triton_tts.text.chinese import baker_symbols, pinyin

            said = [baker_symbols(pinyin(text), self.voice.syllables) for text in texts]
            return [self._reading(" ".join(s), self.voice.symbols_to_ids(s)) for s in said]
        from triton_tts.text.phonemize import espeak  # libespeak-ng: loaded on first use

        phonemizer = espeak(self.voice.phonemizer_language)
        symbols = phonemizer.symbols(texts, self.voice.tokens)
        readings = [self._reading(phonemes, self.voice.phonemes_to_ids(phonemes)) for phonemes in symbols]
        for i, wanted in enumerate(owned):
            if wanted:
                owners = self._letter_owners(phonemizer, texts[i], symbols[i])
                readings[i] = replace(readings[i], owners=self.voice.id_owners(symbols[i], owners))
        return readings

    def _letter_owners(self, phonemizer: EspeakPhonemizer, text: str, symbols: str) -> list[int]:
        if self.voice.tokens == "characters":
            return letter_owners(symbols)
        alone = phonemizer.symbols(tokens(text), self.voice.tokens)
        return phoneme_owners(symbols, alone)

    def _reading(self, symbols: str, ids: list[int]) -> Reading:
        return Reading(ids, reading_speaks(symbols, len(ids), self.framing))
