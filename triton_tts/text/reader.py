"""A voice's text reader: text -> what the voice reads aloud -> its ids.

One place for what preprocess, the long-text models, the chunk-limit calibration and the
warm-up sample do with a voice's text, so that each voice is read by the front-end of its
language (triton_tts/text/frontend.py): English normalisation and espeak-ng phonemes for
phoneme and character voices; Chinese normalisation and pinyin for Mandarin voices, as
Baker-corpus symbols for ``pinyin-baker`` ones (triton_tts/text/chinese.py).
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass, replace
from functools import cached_property
from typing import TYPE_CHECKING

from triton_tts.contract.voice import PINYIN_BAKER
from triton_tts.text.frontend import frontend_for, is_chinese
from triton_tts.text.pronounce import check_pinyin, check_pronunciations, parts
from triton_tts.text.speaks import reading_speaks
from triton_tts.text.words import letter_owners, phoneme_owners, unit_spans, units, word_groups

if TYPE_CHECKING:
    from triton_tts.contract.voice import Voice
    from triton_tts.text.phonemize import EspeakPhonemizer


# A word espeak-ng reads the same way anywhere and that no text holds: it stands where a
# given pronunciation goes while the text around it is read.
STAND_IN = "blorpzag"


def _put_back(phonemes: str, stand_in: str, given: list[str]) -> str | None:
    """``phonemes`` with each stand-in word replaced by the next given pronunciation;
    None when the stand-in is not found as a word exactly once per pronunciation."""
    pattern = re.compile(rf"(?<![^\s.,;:!?]){re.escape(stand_in)}(?![^\s.,;:!?])")
    if len(pattern.findall(phonemes)) != len(given):
        return None
    queue = iter(given)
    return pattern.sub(lambda _: " ".join(next(queue).split()), phonemes)


def _with_stand_ins(pieces: list[tuple[bool, str]]) -> str:
    """The text with the stand-in word where each given pronunciation is: spaced from the
    words around it, but not from punctuation that follows (a voice that keeps punctuation
    as symbols would otherwise keep the space before it too: one symbol more)."""
    out = []
    for index, (is_given, piece) in enumerate(pieces):
        if not is_given:
            out.append(piece)
            continue
        after = pieces[index + 1][1] if index + 1 < len(pieces) else ""
        out.append(f" {STAND_IN}" + ("" if after[:1] in ".,;:!?" and after else " "))
    return "".join(out)


@dataclass(frozen=True)
class Reading:
    ids: list[int]
    speaks: bool  # False: nothing the voice can pronounce (only framing, pauses)
    # When asked for (timestamps): for each id, the index of the text's unit it says (its
    # whitespace-separated words; Chinese: characters, triton_tts/text/words.py); -1 for none.
    owners: list[int] | None = None


class TextReader:
    """Reads texts for one voice; safe to share between threads once built."""

    def __init__(self, voice: Voice) -> None:
        self.voice = voice
        self.frontend = frontend_for(voice.phonemizer_language, voice.tokens)
        self.baker = voice.tokens == PINYIN_BAKER
        self.chinese = is_chinese(voice.phonemizer_language)
        if self.baker and not self.chinese:
            raise ValueError(f"voice '{voice.name}': {PINYIN_BAKER} tokens need a Chinese language")

    @cached_property
    def framing(self) -> int:
        """Ids of a text with nothing in it (BOS, EOS, blanks)."""
        return len(self.voice.symbols_to_ids([]) if self.baker else self.voice.phonemes_to_ids(""))

    def normalize(self, text: str) -> str:
        return self.frontend.normalize(text)

    def word_groups(self, written: str, spoken: str) -> list[tuple[str, range]]:
        """The words of ``written`` (before normalisation), each with the range of the units
        of ``spoken`` (after) it became: what the ids' owners (:class:`Reading`) index."""
        return word_groups(written, units(spoken, self.chinese), self.chinese)

    def read(self, texts: list[str], owned: Sequence[bool] = ()) -> list[Reading]:
        """Normalised texts -> their ids (in one espeak-ng call for phoneme voices);
        ``owned[i]``: also say which word each id of text i belongs to."""
        if self.baker:
            from triton_tts.text.chinese import baker_symbols_owned, pinyin_spans

            for text in texts:
                self.check(text)
            out = []
            for i, text in enumerate(texts):
                said = pinyin_spans(text)
                unit_of = self._unit_of(text) if i < len(owned) and owned[i] else None
                owners = [-1 if unit_of is None else unit_of[at] for _, at in said]
                symbols, symbol_owners = baker_symbols_owned(
                    [t for t, _ in said], owners, self.voice.syllables
                )
                reading = self._reading(" ".join(symbols), self.voice.symbols_to_ids(symbols))
                if unit_of is not None:
                    reading = replace(reading, owners=self.voice.symbol_owners(symbols, symbol_owners))
                out.append(reading)
            return out
        from triton_tts.text.phonemize import espeak  # libespeak-ng: loaded on first use

        phonemizer = espeak(self.voice.phonemizer_language)
        symbols = self._symbols(phonemizer, texts)
        readings = [self._reading(phonemes, self.voice.phonemes_to_ids(phonemes)) for phonemes in symbols]
        for i, wanted in enumerate(owned):
            if wanted:
                owners = self._letter_owners(phonemizer, texts[i], symbols[i])
                readings[i] = replace(readings[i], owners=self.voice.id_owners(symbols[i], owners))
        return readings

    def phonemes(self, text: str) -> str:
        """What an espeak-ng voice says for ``text`` (marked pronunciations put in)."""
        from triton_tts.text.phonemize import espeak

        return self._symbols(espeak(self.voice.phonemizer_language), [text])[0]

    def _unit_of(self, text: str) -> list[int]:
        """For each character of ``text``, the index of the unit it is in (-1: none)."""
        unit_of = [-1] * len(text)
        for number, (start, end) in enumerate(unit_spans(text, self.chinese)):
            unit_of[start:end] = [number] * (end - start)
        return unit_of

    def _letter_owners(self, phonemizer: EspeakPhonemizer, text: str, symbols: str) -> list[int]:
        if self.voice.tokens == "characters" and not self.chinese:
            return letter_owners(symbols)
        alone = self._symbols(phonemizer, units(text, self.chinese))
        return phoneme_owners(symbols, alone)

    def _symbols(self, phonemizer: EspeakPhonemizer, texts: list[str]) -> list[str]:
        """The texts' symbols, a marked pronunciation's phonemes as given
        (triton_tts/text/pronounce.py). espeak-ng reads each text whole with a stand-in
        word where a pronunciation is, so the words around it keep their context (a
        clause-final "a" is the letter, a mid-clause one the article), and the stand-in's
        phonemes are replaced; if espeak joined the stand-in with a neighbour, the pieces
        around each pronunciation are read apart instead."""
        split = [parts(text) for text in texts]
        if all(len(pieces) == 1 and not pieces[0][0] for pieces in split):
            return phonemizer.symbols(texts, self.voice.tokens)
        for text in texts:
            self.check(text)
        stand_ins = [_with_stand_ins(pieces) for pieces in split]
        said = phonemizer.symbols(stand_ins, self.voice.tokens)
        stand_in = phonemizer.symbols([STAND_IN], self.voice.tokens)[0].strip()
        out = []
        for pieces, phonemes in zip(split, said, strict=True):
            given = [piece for is_given, piece in pieces if is_given]
            put_back = _put_back(phonemes, stand_in, given)
            out.append(put_back if put_back is not None else self._apart(phonemizer, pieces))
        return out

    def _apart(self, phonemizer: EspeakPhonemizer, pieces: list[tuple[bool, str]]) -> str:
        plain = [piece for given, piece in pieces if not given]
        said = iter(phonemizer.symbols(plain, self.voice.tokens) if plain else [])
        read = [piece if given else next(said) for given, piece in pieces]
        return " ".join(r.strip() for r in read if r.strip())

    def check(self, text: str) -> None:
        """Refuse (InvalidRequest) a text whose marked pronunciations this voice cannot say:
        each request's own, before its batch is read (letter voices take none; pinyin
        voices take pinyin)."""
        if self.baker:
            check_pinyin(text, self.voice.syllables, self.voice.name)
            return
        takes_none = self.voice.tokens == "characters"
        check_pronunciations(text, "" if takes_none else self.voice.symbols, self.voice.name)

    def _reading(self, symbols: str, ids: list[int]) -> Reading:
        return Reading(ids, reading_speaks(symbols, len(ids), self.framing))
