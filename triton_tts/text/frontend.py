"""The text front-end of a language: how a text is normalised and how it is pronounced.

Chosen by the voice's language (voice.json ``phonemizer_language``): Mandarin ("cmn",
"zh", "zh-CN"...) gets triton_tts/text/chinese.py (cn2an numbers, jieba words, pypinyin
with tone sandhi); every other language gets what the serving path uses today, the
English normaliser and espeak-ng in the voice's language. ``triton-tts frontend`` prints
both steps for a text, offline.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from functools import cache
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from triton_tts.text.phonemize import EspeakPhonemizer

ENGLISH = "en-us"  # espeak's language for Latin words inside a Chinese sentence


@dataclass(frozen=True)
class Frontend:
    language: str
    normalise: Callable[[str], str]
    # normalised text -> its pronunciation, as text: pinyin syllables with tone numbers
    # (Chinese, Latin words as /espeak phonemes/) or espeak-ng phonemes
    pronounce: Callable[[str], str]


@cache
def _espeak(language: str) -> EspeakPhonemizer:
    from triton_tts.text.phonemize import EspeakPhonemizer  # libespeak-ng: loaded on first use

    return EspeakPhonemizer(language)


def _espeak_pronounce(language: str, tokens: str = "phonemes") -> Callable[[str], str]:
    """What the voice's ids are made of (its ``tokens``): espeak-ng phonemes in Coqui's or
    Piper's convention, or the lower-cased text of a character voice."""

    def pronounce(text: str) -> str:
        return str(_espeak(language).symbols([text], tokens)[0])

    return pronounce


# A Latin word as pinyin() keeps it; its syllables end in a tone number, so never match.
_LATIN_WORD = re.compile(r"[A-Za-z]+(?:['’-][A-Za-z]+)*")


def _chinese_pronounce(text: str) -> str:
    """Pinyin with tone numbers; a Latin word (kept as written by the Chinese front-end)
    read by the English path, normaliser and espeak-ng en-us, shown between slashes."""
    from triton_tts.text.chinese import pinyin
    from triton_tts.text.normalize import normalize_english

    tokens = pinyin(text)
    english = _espeak_pronounce(ENGLISH)
    return " ".join(f"/{english(normalize_english(t))}/" if _LATIN_WORD.fullmatch(t) else t for t in tokens)


def is_chinese(language: str) -> bool:
    """Whether a voice's language (espeak's "cmn", "zh", BCP 47 "zh-CN"...) is Mandarin."""
    return language.lower().replace("_", "-").split("-")[0] in {"zh", "cmn"}


def frontend_for(language: str, tokens: str = "phonemes") -> Frontend:
    """The front-end for a voice's language and tokens (its voice.json
    ``phonemizer_language`` and ``tokens``; Mandarin's pronunciation is pinyin)."""
    if is_chinese(language):
        from triton_tts.text.chinese import normalise_chinese

        return Frontend(language, normalise_chinese, _chinese_pronounce)
    from triton_tts.text.normalize import normalize_english

    return Frontend(language, normalize_english, _espeak_pronounce(language, tokens))
