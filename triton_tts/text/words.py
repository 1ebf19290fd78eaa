"""Words as written, followed through normalisation and phonemisation to the voice's ids.

Word timestamps (docs/api.md, "Word timestamps") come from the acoustic model's durations
(frames per id). This module says which ids belong to which word, in two steps:

* **Written -> spoken.** Normalisation rewrites words ("$3.50" -> "three dollars and fifty
  cents"). :func:`written_groups` aligns the written words with the spoken ones (a
  difflib alignment of whitespace-separated tokens): a word left as it was is its own
  group; a word that became other words spans all of them, so "$3.50" is one word with
  one start and one end. A run of written words rewritten together ("6:05 a.m." said "six
  oh five a m.") is split back into its words by their share of what it became, found by
  normalising its words alone and a few together ("6:05" is "six oh five") or by their
  letters spelled out ("a.m." is "a m"), so each written word has its own entry. A run
  stays one entry where its words cannot be told apart in written order: a rewrite that
  reorders them ("25 Dec." said "December twenty-fifth"; "15 March 2024", whose "15"
  moved past a word said as written), or one said in fewer words than were written.
* **Spoken -> phonemes.** espeak-ng reads a whole clause at once, and it sometimes joins
  words ("of the" as one phoneme word). :func:`phoneme_owners` aligns the clause's phoneme
  words with each spoken word's phonemes read alone (a monotone alignment by length that
  allows joins and splits) and gives every phoneme letter the spoken word it belongs to;
  punctuation and spaces belong to none, so a pause is never part of a word.

Pure Python, no espeak here: the callers pass the phonemes (triton_tts/text/reader.py).
"""

from __future__ import annotations

import bisect
import difflib
import itertools
import re
import unicodedata
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from triton_tts.text.frontend import ENGLISH, normalizer
from triton_tts.text.marks import CLOSE, MARKS, OPEN, SPACE

NO_WORD = -1  # an id or letter that belongs to no word (framing, punctuation, spaces)
_PHONEME_WORD = re.compile(r"\S+")


def tokens(text: str) -> list[str]:
    """A text's words: what whitespace separates."""
    return text.split()


# Chinese text has no spaces between words: its units are characters, Latin words and
# numbers (each one unit), and marked pronunciations (triton_tts/text/pronounce.py).
_CHINESE_UNIT = re.compile(
    rf"{OPEN}[^{MARKS}]*(?:{SPACE}[^{MARKS}]*)*{CLOSE}|[A-Za-z0-9]+(?:['’.,:/-][A-Za-z0-9]+)*|[^\s{MARKS}]"
)


def unit_spans(text: str, chinese: bool) -> list[tuple[int, int]]:
    """The [start, end) of each of ``text``'s units: its words (:func:`tokens`) or, for
    Chinese, each character, Latin word, number and marked pronunciation."""
    pattern = _CHINESE_UNIT if chinese else _PHONEME_WORD
    return [m.span() for m in pattern.finditer(text)]


def units(text: str, chinese: bool = False) -> list[str]:
    """What word timestamps are followed through normalisation in (:func:`unit_spans`)."""
    return [text[a:b] for a, b in unit_spans(text, chinese)]


def word_groups(written: str, spoken: Sequence[str], chinese: bool) -> list[tuple[str, range]]:
    """The words of ``written`` with the range of ``spoken`` units each became: for most
    languages :func:`written_groups` of its whitespace words; for Chinese, jieba's words
    (triton_tts.text.chinese.segment), each spanning the units its characters became, so
    that "¥12.50" is one word said as "十二元五角" (a rewrite that crosses words joins them)."""
    if not chinese:
        # every language but Mandarin is normalised as English (frontend.normalizer)
        return written_groups(tokens(written), spoken, normalizer(ENGLISH))
    from triton_tts.text.chinese import segment

    spans = unit_spans(written, True)
    words = segment(written)
    ends = [end for _, end in words]

    def word_of(offset: int) -> int:
        return min(bisect.bisect_right(ends, offset), len(words) - 1)

    merged: list[tuple[int, int, range]] = []  # first word, last word, spoken units
    for said, span in aligned_ranges([written[a:b] for a, b in spans], spoken):
        first, last = word_of(spans[said.start][0]), word_of(spans[said.stop - 1][1] - 1)
        if merged and first <= merged[-1][1]:
            a, b, s = merged[-1]
            merged[-1] = (a, max(b, last), range(s.start, max(s.stop, span.stop)))
        else:
            merged.append((first, last, span))
    return [(written[words[a][0] : words[b][1]], span) for a, b, span in merged]


def aligned_ranges(written: Sequence[str], spoken: Sequence[str]) -> list[tuple[range, range]]:
    """The written words' groups, each as (its range of ``written``, the range of
    ``spoken`` it became). Written words that became nothing are left out; spoken words
    that came from nothing join the group before them (the first group, at the start)."""
    groups: list[tuple[range, range]] = []
    orphans = 0  # spoken words before the first group
    matcher = difflib.SequenceMatcher(a=list(written), b=list(spoken), autojunk=False)
    for tag, i1, i2, j1, j2 in matcher.get_opcodes():
        if tag == "equal":
            groups.extend((range(i1 + k, i1 + k + 1), range(j1 + k, j1 + k + 1)) for k in range(i2 - i1))
        elif tag == "replace":
            groups.append((range(i1, i2), range(j1, j2)))
        elif tag == "insert":
            if groups:
                said, span = groups[-1]
                groups[-1] = (said, range(span.start, j2))
            else:
                orphans = j2
        # "delete": written words that say nothing (a lone "*") have no time
    if orphans and groups:
        said, span = groups[0]
        groups[0] = (said, range(0, span.stop))
    return groups


def written_groups(
    written: Sequence[str], spoken: Sequence[str], normalize: Callable[[str], str] | None = None
) -> list[tuple[str, range]]:
    """Each written word with the range of ``spoken`` words it became (:func:`aligned_ranges`);
    a run rewritten together is split into its words (:func:`_split_run`, by ``normalize``:
    the normaliser that made ``spoken``; None: by letters spelled out, or evenly), or kept
    whole, its words joined by spaces, where it cannot be split in written order."""
    groups = []
    for w, s in _with_moved_words(written, spoken, aligned_ranges(written, spoken)):
        words = written[w.start : w.stop]
        spans = _split_run(words, spoken[s.start : s.stop], normalize) if len(words) > 1 else None
        if spans is None:
            groups.append((" ".join(words), s))
        else:
            groups.extend(
                (word, range(s.start + a, s.start + b)) for word, (a, b) in zip(words, spans, strict=True)
            )
    return groups


def _with_moved_words(
    written: Sequence[str], spoken: Sequence[str], groups: list[tuple[range, range]]
) -> list[tuple[range, range]]:
    """``groups`` with a written word that has letters or digits but was aligned with
    nothing joined to the rewrite after it (and a word left as it was between them): a
    rewrite moved it ("15 March 2024" said "March fifteenth, ...": "15" is not lost)."""

    def same(w: range, s: range) -> bool:
        return len(w) == len(s) == 1 and written[w.start] == spoken[s.start]

    out: list[tuple[range, range]] = []
    covered = 0  # written words before this are in a group or said nothing
    k = 0
    while k < len(groups):
        w, s = groups[k]
        moved = any(c.isalnum() for word in written[covered : w.start] for c in word)
        if moved and same(w, s) and k + 1 < len(groups) and not same(*groups[k + 1]):
            w, s = range(covered, groups[k + 1][0].stop), range(s.start, groups[k + 1][1].stop)
            k += 1
        elif moved and not same(w, s):
            w = range(covered, w.stop)
        out.append((w, s))
        covered, k = w.stop, k + 1
    return out


def _letters_of(word: str) -> str:
    return "".join(c for c in word.lower() if c.isalpha())


def _said_as(words: Sequence[str]) -> list[str]:
    return [w.lower().strip(".,;:!?\"'()") for w in words]


_CUT_REACH = 16  # spoken words a cut is looked for in, past the one before it
_CONTEXT_WORDS = 3  # written words normalised together to find a cut ("Jan. 5, 2024")


def _split_run(
    words: Sequence[str], said: Sequence[str], normalize: Callable[[str], str] | None
) -> list[tuple[int, int]] | None:
    """[start, stop) of ``said`` for each of a run of written ``words`` rewritten together,
    in order, each at least one spoken word; None where the run stays whole (fewer spoken
    words than written, or reordered). The cuts are found left to right (:func:`_cut`),
    each near the one before it: a long run costs a few short normalisations a word."""
    k, m = len(words), len(said)
    if m < k:
        return None
    bounds = [0]
    for i in range(1, k):
        # at least one spoken word for each word before and after the cut
        lowest, highest = bounds[-1] + 1, m - (k - i)
        evenly = bounds[-1] + round((m - bounds[-1]) / (k - i + 1))
        found = _cut(words, i, said, bounds, normalize)
        bounds.append(min(max(evenly if found is None else found, lowest), highest))
    bounds.append(m)
    spans = list(itertools.pairwise(bounds))
    # A written word whose letters begin a spoken word near it but outside its own share
    # was moved by the rewrite ("25 Dec." said "December twenty-fifth"): its times are not
    # in written order.
    for word, (a, b) in zip(words, spans, strict=True):
        letters = _letters_of(word)
        near = range(max(0, a - _CUT_REACH), min(m, b + _CUT_REACH))
        seen = [j for j in near if letters and _letters_of(said[j]).startswith(letters)]
        if seen and not any(a <= j < b for j in seen):
            return None
    return spans


def _cut(
    words: Sequence[str],
    i: int,
    said: Sequence[str],
    bounds: Sequence[int],
    normalize: Callable[[str], str] | None,
) -> int | None:
    """Where ``said`` divides between ``words[i - 1]`` and ``words[i]`` of a run (``bounds``:
    the cuts before), first found of: after what the words up to the cut become normalised
    together ("Jan. 5," is "January fifth," in "January fifth, twenty twenty-four"); where
    what the words from it become begins ("< 5" is "less than five": "5" alone is "five");
    where ``words[i]``'s letters are spelled out ("10:00 am" is "ten a m": "am" alone stays
    "am"); after as many words as ``words[i - 1]`` becomes alone ("ext." said "extension");
    None (no normaliser, nothing found)."""
    last = bounds[-1]
    reach = range(last + 1, min(len(said), last + 1 + _CUT_REACH))
    alone: list[str] = []
    if normalize is not None:
        j = max(0, i - _CONTEXT_WORDS)
        head = _said_as(normalize(" ".join(words[j:i])).split())
        if (
            head
            and bounds[j] + len(head) > last
            and head == _said_as(said[bounds[j] : bounds[j] + len(head)])
        ):
            return bounds[j] + len(head)
        tail = _said_as(normalize(" ".join(words[i : i + _CONTEXT_WORDS])).split())
        for c in reach:
            if tail and tail == _said_as(said[c : c + len(tail)]):
                return c
        alone = normalize(words[i - 1]).split()
    letters = _letters_of(words[i])
    for c in reach:
        spelled = ""
        for s in said[c : c + len(letters)]:
            spelled += _letters_of(s)
            if letters and spelled == letters:
                return c
    return last + len(alone) if alone else None


def _size(phonemes: str) -> int:
    """Sounds in a phoneme word: its letters, less length and stress marks (modifier letters)."""
    return sum(1 for c in phonemes if c.isalpha() and unicodedata.category(c) != "Lm")


# (spoken words, phoneme words, penalty): 1:1, joins (several words read as one phoneme
# word), splits (one word read as several), a word with no phonemes, a phoneme word of none.
# Leaving out a word that has sounds costs most: espeak joins words, it does not drop them.
_MOVES = (
    (1, 1, 0.0),
    (2, 1, 1.0),
    (3, 1, 1.5),
    (4, 1, 2.0),
    (1, 2, 1.0),
    (1, 3, 1.5),
    (1, 0, 3.0),
    (0, 1, 3.0),
)


def phoneme_owners(phonemes: str, alone: Sequence[str]) -> list[int]:
    """For each character of ``phonemes`` (a text's phonemes, words separated by spaces),
    the index of the spoken word it says (:data:`NO_WORD` for spaces, punctuation and
    stress-less marks). ``alone``: each spoken word's phonemes read on its own, which tell
    how long each word's phonemes should be."""
    words = [(m.start(), m.end()) for m in _PHONEME_WORD.finditer(phonemes)]
    expected = [_size(a) for a in alone]
    actual = [_size(phonemes[a:b]) for a, b in words]
    n, m = len(expected), len(actual)
    inf = float("inf")
    cost = [[inf] * (m + 1) for _ in range(n + 1)]
    back: list[list[tuple[int, int] | None]] = [[None] * (m + 1) for _ in range(n + 1)]
    cost[0][0] = 0.0
    for i in range(n + 1):
        for j in range(m + 1):
            here = cost[i][j]
            if here == inf:
                continue
            for a, b, penalty in _MOVES:
                if i + a > n or j + b > m:
                    continue
                size = sum(expected[i : i + a])
                step = abs(size - sum(actual[j : j + b])) + (penalty if size or b else 0.5)
                if here + step < cost[i + a][j + b]:
                    cost[i + a][j + b] = here + step
                    back[i + a][j + b] = (a, b)
    owners = [NO_WORD] * len(phonemes)
    i, j = n, m
    while i or j:
        move = back[i][j]
        assert move is not None  # (n, m) is always reachable: 1:0 and 0:1 moves
        a, b = move
        i, j = i - a, j - b
        if a == 0 or b == 0:
            continue
        letters = [k for s, e in words[j : j + b] for k in range(s, e) if phonemes[k].isalpha()]
        sounds = "".join(phonemes[k] for k in letters)
        for w, (start, stop) in enumerate(_split(sounds, [_letters(x) for x in alone[i : i + a]])):
            for k in letters[start:stop]:
                owners[k] = i + w
    _spaces_to_next_word(phonemes, owners)
    return owners


def _spaces_to_next_word(symbols: str, owners: list[int]) -> None:
    """A space between two words (no punctuation, so no pause) belongs to the word after
    it: the voice starts that word's sound while it says the space. Measured against
    pocketsphinx's alignment, starts were 60 ms late without this (docs/api.md)."""
    for k, c in enumerate(symbols):
        between = c == " " and 0 < k < len(symbols) - 1 and min(owners[k - 1], owners[k + 1]) >= 0
        if between and owners[k + 1] != owners[k - 1]:
            owners[k] = owners[k + 1]


def _letters(phonemes: str) -> str:
    return "".join(c for c in phonemes if c.isalpha())


def _distance(a: str, b: str) -> int:
    """Levenshtein distance (short strings: one phoneme word)."""
    row = list(range(len(b) + 1))
    for i, x in enumerate(a, 1):
        previous, row[0] = row[0], i
        for j, y in enumerate(b, 1):
            previous, row[j] = row[j], min(row[j] + 1, row[j - 1] + 1, previous + (x != y))
    return row[-1]


def _split(sounds: str, alone: list[str]) -> list[tuple[int, int]]:
    """Cut a phoneme word that says several words (espeak joined them) where each piece
    is nearest its word read alone: [start, stop) letters per word."""
    if len(alone) == 1:
        return [(0, len(sounds))]
    best: tuple[int, list[tuple[int, int]]] | None = None
    for cut in range(len(sounds) + 1):
        rest = _split(sounds[cut:], alone[1:])
        cost = _distance(sounds[:cut], alone[0]) + sum(
            _distance(sounds[cut + s : cut + e], word) for (s, e), word in zip(rest, alone[1:], strict=True)
        )
        if best is None or cost < best[0]:
            best = (cost, [(0, cut), *((cut + s, cut + e) for s, e in rest)])
    assert best is not None
    return best[1]


def letter_owners(symbols: str) -> list[int]:
    """A character voice's symbols (its normalised text, words separated by single
    spaces): each letter or digit's word; spaces and punctuation belong to none."""
    owners, word, in_word = [], -1, False
    for c in symbols:
        if c.isspace():
            in_word = False
            owners.append(NO_WORD)
            continue
        if not in_word:
            word, in_word = word + 1, True
        owners.append(word if c.isalnum() else NO_WORD)
    _spaces_to_next_word(symbols, owners)
    return owners


@dataclass(frozen=True)
class Word:
    """A written word and when it is said, in seconds from the start of the audio."""

    text: str
    start: float
    end: float


def word_times(
    durations: npt.NDArray[np.floating[Any]], word_index: npt.NDArray[np.integer[Any]], frames: int
) -> npt.NDArray[np.float64]:
    """[words, 2] start and end frames from each id's frames (``durations``) and word
    (``word_index``, -1 for none; words numbered from 0, each said by some id); within the
    ``frames`` the audio has. Padded ids (beyond either array) count for nothing."""
    n = min(durations.size, word_index.size)
    owners = word_index[:n].astype(np.int64)
    ends = np.cumsum(np.maximum(durations[:n].astype(np.float64), 0.0))
    starts = ends - np.maximum(durations[:n].astype(np.float64), 0.0)
    count = int(owners.max()) + 1 if n and owners.max() >= 0 else 0
    times = np.zeros((count, 2))
    if count:
        said = owners >= 0
        times[:, 0] = np.inf
        np.minimum.at(times[:, 0], owners[said], starts[said])
        np.maximum.at(times[:, 1], owners[said], ends[said])
        times[np.isinf(times[:, 0]), 0] = 0.0
    return np.minimum(times, float(frames))


class WordClock:
    """A long text's word timestamps, chunk by chunk: the written words of the whole text,
    the chunks it was cut into (normalised), and for each chunk in order the words its
    ensemble timed (its own tokens, or pieces of them when a chunk was said in halves) with
    [start, end] seconds from the chunk's start. :meth:`add` returns the written words now
    complete, timed from the start of the whole audio; a word whose spoken words run into
    a later chunk waits for it.

    A chunk's Chinese words are cut from its normalised text, which jieba may cut
    differently from the text as written ("2024年" said "二零二四年", timed as "二零二", "四年"):
    written words that share one timed word are returned as one, never with a time that
    was not measured."""

    def __init__(self, written: str, chunks: Sequence[str], chinese: bool = False) -> None:
        self._chinese = chinese
        self._chunk_tokens = [units(c, chinese) for c in chunks]
        self._starts = np.cumsum([0, *(len(t) for t in self._chunk_tokens)])
        spoken = [t for chunk in self._chunk_tokens for t in chunk]
        self._groups = word_groups(written, spoken, chinese)
        self._times = np.full((len(spoken), 2), np.nan)
        self._word = np.full(len(spoken), -1, dtype=np.int64)  # each unit's timed word (numbered)
        self._timed_words = 0
        self._done = 0  # chunks added
        self._next = 0  # the first group not yet returned
        self._offset_s = 0.0

    def add(
        self, words: Sequence[str], times: npt.NDArray[np.floating[Any]], duration_s: float
    ) -> list[Word]:
        """The next chunk's timed ``words`` and ``times`` [len(words), 2]; ``duration_s``:
        its audio's length."""
        base = int(self._starts[self._done])
        chunk_tokens = self._chunk_tokens[self._done]
        times = np.asarray(times, dtype=np.float64).reshape(-1, 2)
        # Each timed word's units, with its time: they align with the chunk's units.
        pieces = [
            (u, row, self._timed_words + k)
            for k, (word, row) in enumerate(zip(words, times, strict=False))
            for u in units(word, self._chinese)
        ]
        times = np.array([row for _, row, _ in pieces]).reshape(-1, 2)
        for said, span in aligned_ranges(chunk_tokens, [u for u, _, _ in pieces]):
            rows = times[span.start : span.stop]
            if len(rows):
                row = (rows[:, 0].min() + self._offset_s, rows[:, 1].max() + self._offset_s)
                self._times[base + said.start : base + said.stop] = row
                self._word[base + said.start : base + said.stop] = pieces[span.start][2]
        self._timed_words += len(words)
        self._done += 1
        self._offset_s += duration_s
        return self._ready(int(self._starts[self._done]))

    def _shares_a_timed_word(self, first: range, then: range, known: int) -> bool:
        """Whether two neighbouring groups' units were timed as one word (a group that
        starts in a chunk not yet added shares none: a timed word is one chunk's)."""
        if not self._chinese or then.start >= known:
            return False
        word = self._word[first.stop - 1]
        return bool(word >= 0 and word == self._word[then.start])

    def _ready(self, known: int) -> list[Word]:
        ready = []
        groups = self._groups
        while self._next < len(groups):
            last = self._next
            while last + 1 < len(groups) and self._shares_a_timed_word(
                groups[last][1], groups[last + 1][1], known
            ):
                last += 1
            if groups[last][1].stop > known:
                break
            text = ("" if self._chinese else " ").join(t for t, _ in groups[self._next : last + 1])
            rows = self._times[groups[self._next][1].start : groups[last][1].stop]
            timed = rows[~np.isnan(rows[:, 0])]
            if len(timed):
                ready.append(Word(text, float(timed[:, 0].min()), float(timed[:, 1].max())))
            self._next = last + 1
        return ready
