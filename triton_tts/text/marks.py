"""The private-use characters that mark a given pronunciation inside a chunk's text
(triton_tts/text/pronounce.py says how they travel): ``OPEN + phonemes + CLOSE``, its
spaces written ``SPACE``. In a module of their own so that every reader of text (the
pinyin front-end, the word splitter) knows them without importing the lexicons."""

from __future__ import annotations

import re

OPEN, CLOSE, SPACE = "\ue000", "\ue001", "\ue002"
MARKS = OPEN + CLOSE + SPACE
MARKED = re.compile(f"{OPEN}([^{MARKS}]*(?:{SPACE}[^{MARKS}]*)*){CLOSE}")
