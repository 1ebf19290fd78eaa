"""Chinese characters: the one definition of the range the Mandarin front-end reads, for
the modules that must not import the front-end itself (its dictionaries are large)."""

from __future__ import annotations

import re

# CJK ideographs, extension A and compatibility ideographs, as a character-class body.
HAN = "\u3400-\u4dbf\u4e00-\u9fff\uf900-\ufaff"
_HAN_CHARACTER = re.compile(f"[{HAN}]")


def han_characters(text: str) -> list[str]:
    """The Chinese characters of ``text``, in order."""
    return _HAN_CHARACTER.findall(text)


def has_han(text: str) -> bool:
    return _HAN_CHARACTER.search(text) is not None
