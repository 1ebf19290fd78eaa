"""The text front-end of a language: how a text is normalised and how it is pronounced.

Chosen by the voice's language (voice.json ``phonemizer_language``): Mandarin ("cmn",
"zh", "zh-CN"...) gets triton_tts/text/chinese.py (cn2an numbers, jieba words, pypinyin
with tone sandhi); every other language gets what the serving path uses today, the
English normaliser and espeak-ng in the voice's language. ``triton-tts frontend`` prints
both steps for a text, offline.

:func:`normalizer` is the one choice of a language's normaliser: preprocess (through
:class:`~triton_tts.text.reader.TextReader`) and the long-text models (``long_text``, which
normalise a whole text before they chunk it) must read a text the same way.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass

ENGLISH = "en-us"  # espeak's language for Latin words inside a Chinese sentence


@dataclass(frozen=True)
class Frontend:
    language: str
    normalize: Callable[[str], str]
    # normalised text -> its pronunciation, as text: pinyin syllables with tone numbers
    # (Chinese, Latin words as /espeak phonemes/) or espeak-ng phonemes
    pronounce: Callable[[str], str]


def _espeak_pronounce(language: str, tokens: str = "phonemes") -> Callable[[str], str]:
    """What the voice's ids are made of (its ``tokens``): espeak-ng phonemes in Coqui's or
    Piper's convention, or the lower-cased text of a character voice."""

    def pronounce(text: str) -> str:
        from triton_tts.text.phonemize import espeak  # libespeak-ng: loaded on first use

        return str(espeak(language).symbols([text], tokens)[0])

    return pronounce


# A Latin word as pinyin() keeps it; its syllables end in a tone number, so never match.
_LATIN_WORD = re.compile(r"[A-Za-z]+(?:['’-][A-Za-z]+)*")


def _chinese_pronounce(text: str) -> str:
    """Pinyin with tone numbers; a Latin word (kept as written by the Chinese front-end)
    read by the English path, normaliser and espeak-ng en-us, shown between slashes."""
    from triton_tts.text.chinese import pinyin

    tokens = pinyin(text)
    english, normalize = _espeak_pronounce(ENGLISH), normalizer(ENGLISH)
    return " ".join(f"/{english(normalize(t))}/" if _LATIN_WORD.fullmatch(t) else t for t in tokens)


def is_chinese(language: str) -> bool:
    """Whether a voice's language (espeak's "cmn", "zh", BCP 47 "zh-CN"...) is Mandarin."""
    return language.lower().replace("_", "-").split("-")[0] in {"zh", "cmn"}


def normalizer(language: str) -> Callable[[str], str]:
    """The normaliser of a voice's language: Chinese for Mandarin, English for every other
    language (there is no third normaliser yet)."""
    if is_chinese(language):
        from triton_tts.text.chinese import normalize_chinese

        return normalize_chinese
    from triton_tts.text.normalize import normalize_english

    return normalize_english


def frontend_for(language: str, tokens: str = "phonemes") -> Frontend:
    """The front-end for a voice's language and tokens (its voice.json
    ``phonemizer_language`` and ``tokens``; Mandarin's pronunciation is pinyin)."""
    pronounce = _chinese_pronounce if is_chinese(language) else _espeak_pronounce(language, tokens)
    return Frontend(language, normalizer(language), pronounce)
