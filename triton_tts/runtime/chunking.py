"""Long text -> chunks the voice can say one at a time, and joining their audio back.

Both the non-streaming ``tts`` model and the streaming ``tts_stream`` model use this,
each with its own plan: ``tts`` whole sentences, a stream a short first chunk and a ramp
(model_configs.BuildOptions).

Chunking: text (normalised, or as written with NORMALIZE false) is split into sentences,
then packed into chunks of up to ``max_chars``. The first chunk is kept short (the first
sentence, or its first clauses up to ``first_chars``) so the first audio arrives fast;
over-long sentences are split at clause punctuation, then at spaces, and a word longer
than a chunk at its safest point (:func:`cut_word`), so that every chunk fits its limit
whatever the text: no request fails on a long word. The rules, each pinned by
tests/test_chunking.py (and tests/test_long_tokens.py): a sentence ends at ". ! ? …" before whitespace and a
word that is not lower-case, but not after a title ("Dr."), an initial ("J.") or a list
number ("1."); at "。！？；" of CJK text; at a blank line; and before a list item's line.
Joining: each chunk gets a short raised-cosine fade in and out, so no click is
heard where two waveforms meet; the natural pause VITS puts at a sentence end remains.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from dataclasses import dataclass
from typing import NamedTuple

import numpy as np
import numpy.typing as npt

from triton_tts.text.english_data import LEADING_ABBREVIATIONS
from triton_tts.text.han import HAN

FIRST_CHUNK_CHARS = 160  # the first sentence, or its first clauses if longer (the server's: model_configs)
CHUNK_CHARS = 400
FADE_MS = 8.0
MIN_CHUNK_CHARS = 16  # scaled plans never pack below this

# Sentence ends. ". ! ? …" end a sentence only before whitespace, the end of the text or a
# CJK character (CJK text has no spaces; the normaliser turns "！？" into "!?"), so "3.14",
# "example.com" and "v1.2" stay whole; the full-width "。！？；" end one anywhere. Closing
# quotes and brackets after the end stay with their sentence.
_CJK = "\u2e80-\u9fff\uac00-\ud7af\uf900-\ufaff"  # CJK ideographs, kana, hangul
_CJK_CHARACTER = re.compile(f"[{_CJK}]")
_CLOSERS = "\"'”’»)]}」』）】〕〉》"
_CJK_ENDS = "。！？；"  # the full-width semicolon ends a clause a reader pauses at
_END = re.compile(rf"(?P<marks>[.!?…{_CJK_ENDS}]+)[{re.escape(_CLOSERS)}]*")
_WORD_BEFORE = re.compile(r"\S*\Z")
_OPENERS = "\"'“‘«([{「『（【"
# A period after these never ends a sentence: the normaliser's titles ("Mr."), which always
# introduce a name, and the ambiguous "Dr."/"St." and "e.g."/"i.e." it also reads. Missing a
# sentence end costs nothing (chunks are packed anyway); a false one cuts a sentence in two.
_NEVER_END = frozenset({*LEADING_ABBREVIATIONS, "Dr", "St", "e.g", "i.e", "E.g", "I.e", "cf"})
_INITIALS = re.compile(r"(?:[A-Za-z]\.)*[A-Z]")  # "J." in "J. Smith", "U.S" in "U.S. Army"
_LIST_NUMBER = re.compile(r"\d{1,3}")  # "1." of "1. Open the box"
_LIST_FOLLOWS = ("\n", ":", *".!?…", *_CJK_ENDS)  # what a list number comes after (or nothing)
# Line breaks that end a sentence: a blank line (a paragraph), or a break before a list
# item ("- milk", "• milk", "2. Pour", "2) Pour"). Any other line break is a space.
_LINE_BREAK = re.compile(r"\n[^\S\n]*\n\s*|\n\s*(?=(?:[-*•–]|\d{1,3}[.)])\s)")
_WHITESPACE = re.compile(r"\s+")
_NEXT_CHARACTER = re.compile(r"\s*(\S?)")
# Where a sentence may be cut when it is too long: after clause punctuation, then between words.
# The cut is at the "gap" group: the space after the mark (or nothing after a CJK mark).
_CLAUSE_BREAK = re.compile(rf"(?:[,;:—–](?=[ {_CJK}])|[，、；：])(?P<gap> ?)")
# A text still being written whose writer paused on a clause mark ("sixty,": an LLM's next
# token brings the space): the mark ends its clause, unless after a digit ("1," may be "1,000").
_CLAUSE_MARK_AT_END = re.compile(r"(?<![0-9])[,;:—–，、；：]\s*\Z")
_WORD_BREAK = re.compile(r"(?P<gap> )")
# Where a word longer than a chunk is cut (between two characters), safest first: after
# punctuation, before a letter or digit ("one,two", URLs and paths, base64's "+/",
# identifiers' "-_."); where the script or the case changes ("camelCase", "abc123", a Han
# character next to a Latin one); between two Han characters (a syllable each) or two
# Latin syllables (a vowel, then a consonant before a vowel: "ba|na|na"); else anywhere,
# never before a combining mark (an accent, a vowel sign). The cut is the latest of the
# safest kind in the last half of the piece, so pieces stay at least half a chunk long.
_HAN = re.compile(f"[{HAN}]")
_VOWELS = frozenset("aeiouyAEIOUYàáâäèéêëìíîïòóôöùúûüāēīōū")
_ANYWHERE = 3  # the rank of a cut of no safer kind


@dataclass(frozen=True)
class ChunkPlan:
    first_chars: int = FIRST_CHUNK_CHARS
    max_chars: int = CHUNK_CHARS
    # Ramp: a later chunk holds at most ``growth`` x the characters of the chunks before it
    # (never under first_chars, never over max_chars), so each chunk is ready before the
    # audio before it has played; 0: every later chunk up to max_chars.
    growth: float = 0.0

    def scaled(self, factor: float) -> ChunkPlan:
        """The same plan for chunks ``factor`` times as long (slow speech: shorter chunks)."""
        if factor >= 1.0:
            return self
        return ChunkPlan(
            max(MIN_CHUNK_CHARS, int(self.first_chars * factor)),
            max(MIN_CHUNK_CHARS, int(self.max_chars * factor)),
            self.growth,
        )

    def first_shorter(self, factor: float) -> ChunkPlan:
        """The same plan with a first chunk ``factor`` times as long (never under
        MIN_CHUNK_CHARS), the later ones as they were."""
        if factor >= 1.0:
            return self
        return ChunkPlan(max(MIN_CHUNK_CHARS, int(self.first_chars * factor)), self.max_chars, self.growth)

    def limit_after(self, said: int) -> int:
        """The longest a later chunk may be once ``said`` characters are in chunks before it."""
        if self.growth <= 0:
            return self.max_chars
        return min(self.max_chars, max(self.first_chars, int(self.growth * said)))


def halves(text: str) -> list[str]:
    """Two (or a few) pieces of about half the text, cut where split_text would cut (a
    long word inside it at its safest point); a text of one word is cut in its middle
    (two pieces of one word are two words either way). [] when there is nothing left to cut."""
    if len(text) < 2:
        return []
    half = (len(text) + 1) // 2
    if _WHITESPACE.search(text) is None:
        return [text[:half], text[half:]]
    pieces = split_text(text, ChunkPlan(half, half))
    if len(pieces) > 1:
        return pieces
    return [text[:half], text[half:]]


class _Piece(NamedTuple):
    """Text that is never cut further at this level; ``spaced``: whitespace separated it
    from the piece before (CJK sentences and clauses follow each other without)."""

    text: str
    spaced: bool = True


def _joined(pieces: list[_Piece]) -> str:
    return "".join((" " if p.spaced and i else "") + p.text for i, p in enumerate(pieces))


def _ends_sentence(text: str, end: re.Match[str]) -> bool:
    after = end.end()
    if any(mark in _CJK_ENDS for mark in end["marks"]):
        return True
    if after < len(text) and not text[after].isspace() and not _CJK_CHARACTER.match(text, after):
        return False  # "3.14", "example.com", 'said."Go'
    following = _NEXT_CHARACTER.match(text, after)
    if following is not None and following[1].islower():
        return False  # "e.g. apples", "Wait... what?", '"Stop!" she said.'
    if end["marks"] != ".":
        return True
    word_match = _WORD_BEFORE.search(text, max(0, end.start() - 64), end.start())
    word = word_match[0].lstrip(_OPENERS) if word_match else ""
    if word in _NEVER_END or _INITIALS.fullmatch(word):
        return False
    if _LIST_NUMBER.fullmatch(word) and word_match is not None:  # "1." of a list, or "I am 30."
        before = text[max(0, word_match.start() - 64) : word_match.start()].rstrip(" \t")
        return bool(before) and not before.endswith(_LIST_FOLLOWS)
    return True


def _sentences(text: str) -> list[_Piece]:
    """The text's sentences in order, whitespace collapsed to single spaces."""
    cuts = {end.end() for end in _END.finditer(text) if _ends_sentence(text, end)}
    cuts |= {brk.start() for brk in _LINE_BREAK.finditer(text)}
    sentences, start = [], 0
    for cut in [*sorted(cuts), len(text)]:
        raw = text[start:cut]
        sentence = _WHITESPACE.sub(" ", raw).strip()
        if sentence:
            sentences.append(_Piece(sentence, raw[:1].isspace()))
        start = cut
    return sentences


def settled_sentences(text: str) -> int:
    """For a text still being written (an LLM's, piece by piece): the offset up to which it
    is whole sentences that no later piece can change, 0 if none yet. A sentence end is
    settled once the next word has begun, since its case tells "e.g. apples" and "Go.
    Then" apart (and a digit "3." from "3.5"); a CJK end mark needs nothing after it; a
    paragraph break or a list item, text after it."""
    settled = 0
    for end in _END.finditer(text):
        cjk = any(mark in _CJK_ENDS for mark in end["marks"])
        if (cjk or text[end.end() :].strip()) and _ends_sentence(text, end):
            settled = end.end()
    for brk in _LINE_BREAK.finditer(text):
        if text[brk.end() :].strip():
            settled = max(settled, brk.start())
    return settled


def clause_cut(text: str, paused: bool = False) -> int:
    """The offset after the last clause break of ``text`` (",;:—–" before a space, or
    "，、；："), 0 if there is none: where a long clause may go before its sentence ends.
    ``paused``: the writer of a text still being written has paused, so a mark that ends
    the text is a break too, whichever side of the space its pieces carry (not after a
    digit: "1," may yet become "1,000")."""
    if paused and _CLAUSE_MARK_AT_END.search(text):
        return len(text)
    cut = 0
    for brk in _CLAUSE_BREAK.finditer(text):
        cut = brk.end()
    return cut


def _split_at(piece: _Piece, boundary: re.Pattern[str]) -> list[_Piece]:
    parts, start, spaced = [], 0, piece.spaced
    for brk in boundary.finditer(piece.text):
        parts.append(_Piece(piece.text[start : brk.start("gap")], spaced))
        start, spaced = brk.end("gap"), bool(brk["gap"])
    parts.append(_Piece(piece.text[start:], spaced))
    return [p for p in parts if p.text]


def _cut_rank(text: str, at: int) -> int:
    """How safe a cut of ``text`` before ``text[at]`` is: 0 safest, :data:`_ANYWHERE`
    for no safer kind, one more for a cut before a combining mark (the word's rules)."""
    before, after = text[at - 1], text[at]
    if unicodedata.category(after).startswith("M"):  # an accent, a vowel sign: its letter's
        return _ANYWHERE + 1
    if not after.isalnum():
        return _ANYWHERE
    if not before.isalnum() and not unicodedata.category(before).startswith("M"):
        return 0
    before_han, after_han = bool(_HAN.match(before)), bool(_HAN.match(after))
    if (
        before_han != after_han
        or before.isdigit() != after.isdigit()
        or (before.islower() and after.isupper())
    ):
        return 1
    if before_han or (
        before in _VOWELS
        and after.isalpha()
        and after not in _VOWELS
        and at + 1 < len(text)
        and text[at + 1] in _VOWELS
    ):
        return 2
    return _ANYWHERE


def _safest_cut(text: str, first: int, last: int) -> int:
    """The latest of the safest cuts at ``first..last`` (positions in ``text``)."""
    best, best_rank = last, _ANYWHERE + 2
    for at in range(last, first - 1, -1):
        rank = _cut_rank(text, at)
        if rank == 0:
            return at
        if rank < best_rank:
            best, best_rank = at, rank
    return best


def cut_word(word: str, limit: int) -> list[str]:
    """``word`` in pieces of at most ``limit`` characters that join to it, each cut at the
    safest point in the last half of its piece (_cut_rank's kinds, safest first)."""
    return [piece.text for piece in _cut(_Piece(word), limit)]


def _cut(word: _Piece, limit: int) -> list[_Piece]:
    pieces, start, spaced = [], 0, word.spaced
    while len(word.text) - start > limit:
        cut = _safest_cut(word.text, start + max(1, limit // 2), start + limit)
        pieces.append(_Piece(word.text[start:cut], spaced))
        start, spaced = cut, False
    pieces.append(_Piece(word.text[start:], spaced))
    return pieces


def _units(sentence: _Piece, limit: int) -> list[_Piece]:
    """A sentence in pieces of at most ``limit``: whole if it fits, else its clauses that
    fit, the words of those that do not, and a word longer than ``limit`` cut (_cut)."""
    if len(sentence.text) <= limit:
        return [sentence]
    units: list[_Piece] = []
    for clause in _split_at(sentence, _CLAUSE_BREAK):
        if len(clause.text) <= limit:
            units.append(clause)
            continue
        for word in _split_at(clause, _WORD_BREAK):
            units += [word] if len(word.text) <= limit else _cut(word, limit)
    return units


class _Packer:
    """Greedy packing: each chunk takes the next units while they fit in its limit (at
    least one). The limit of a chunk is ``limit_after(characters in the chunks before it)``."""

    def __init__(self, limit_after: Callable[[int], int], said: int = 0) -> None:
        self._limit_after = limit_after
        self._said = said
        self.limit = limit_after(said)  # the chunk being filled
        self._chunks: list[list[_Piece]] = []
        self._current: list[_Piece] = []
        self._length = 0

    def add(self, unit: _Piece) -> None:
        grown = self._length + (1 if unit.spaced else 0) + len(unit.text) if self._current else len(unit.text)
        if grown > self.limit and self._current:
            self._chunks.append(self._current)
            self._said += self._length
            self.limit = self._limit_after(self._said)
            self._current, grown = [], len(unit.text)
        self._current.append(unit)
        self._length = grown

    def packed(self) -> list[list[_Piece]]:
        return [*self._chunks, self._current] if self._current else self._chunks


def _pack(units: list[_Piece], limit: int) -> list[list[_Piece]]:
    """Greedy: each chunk takes as many of the next units as fit in ``limit`` (at least one)."""
    packer = _Packer(lambda _: limit)
    for unit in units:
        packer.add(unit)
    return packer.packed()


def _ramped(sentences: list[_Piece], plan: ChunkPlan, said: int) -> list[list[_Piece]]:
    """Greedy packing under a limit that grows with what is said (ChunkPlan.limit_after):
    a sentence longer than the chunk's limit is cut after its clauses (not between words,
    unless it is longer than ``max_chars``), and a chunk takes at least one piece."""
    packer = _Packer(plan.limit_after, said)
    for sentence in sentences:
        if len(sentence.text) > plan.max_chars:
            units = _units(sentence, plan.max_chars)
        elif len(sentence.text) > packer.limit:
            units = _split_at(sentence, _CLAUSE_BREAK)
        else:
            units = [sentence]
        for unit in units:
            packer.add(unit)
    return packer.packed()


def split_text(text: str, plan: ChunkPlan = ChunkPlan()) -> list[str]:
    """Chunks in reading order. With the spaces taken out, they join to the text with
    its spaces taken out: nothing is dropped, added or moved.

    The first chunk is the first sentence alone, or as many of its first clauses (then
    words) as fit in ``plan.first_chars``. The rest are packed greedily: each chunk takes
    as many whole sentences as fit in ``plan.max_chars``; a longer sentence is cut after
    clause punctuation (",;:—–" and "，、；："), a clause that is still too long between
    words, and a word longer than the limit at its safest point (:func:`cut_word`): the
    first chunk is never longer than ``plan.first_chars``, nor any other than
    ``plan.max_chars``, whatever the text. With ``plan.growth`` (a ramp), a later
    chunk's limit is at most that many times the characters before it: the chunks after
    the first grow from short to ``max_chars``, and a sentence over a ramped limit (but
    within ``max_chars``) is cut after its clauses only."""
    sentences = _sentences(text)
    if not sentences:
        return []
    head, *rest_of_first = _pack(_units(sentences[0], plan.first_chars), plan.first_chars)
    rest = [_Piece(_joined([p for chunk in rest_of_first for p in chunk]))] if rest_of_first else []
    if plan.growth > 0:
        later = _ramped([*rest, *sentences[1:]], plan, len(_joined(head)))
        return [_joined(head)] + [_joined(chunk) for chunk in later]
    units = [unit for sentence in [*rest, *sentences[1:]] for unit in _units(sentence, plan.max_chars)]
    return [_joined(head)] + [_joined(chunk) for chunk in _pack(units, plan.max_chars)]


def fade(
    audio: npt.NDArray[np.float32],
    sample_rate: int,
    fade_in: bool = True,
    fade_out: bool = True,
    fade_ms: float = FADE_MS,
) -> npt.NDArray[np.float32]:
    """Raised-cosine fades: a faded edge starts or ends at exactly zero."""
    n = min(int(sample_rate * fade_ms / 1000), len(audio) // 2)
    out = audio.astype(np.float32, copy=True)
    if n == 0:
        return out
    ramp = (0.5 - 0.5 * np.cos(np.linspace(0.0, np.pi, n, dtype=np.float32))).astype(np.float32)
    if fade_in:
        out[:n] *= ramp
    if fade_out:
        out[-n:] *= ramp[::-1]
    return out


def join_edges(
    audio: npt.NDArray[np.float32], sample_rate: int, index: int, count: int
) -> npt.NDArray[np.float32]:
    """Fade only where two chunks meet: a one-chunk text keeps the pipeline's audio as is."""
    return fade(audio, sample_rate, fade_in=index > 0, fade_out=index < count - 1)
