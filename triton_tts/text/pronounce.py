"""Pronunciations under the caller's control: IPA given for a word (SSML ``phoneme``, a
lexicon entry) travels inside a chunk's text, marked, and the voice's reader says those
phonemes instead of espeak-ng's (triton_tts/text/reader.py).

A marked pronunciation is ``OPEN + phonemes + CLOSE`` (private-use characters, which no
caller's text keeps: triton_tts.contract.validation.decode_text removes them from every TEXT, and
only preprocess keeps these, in the chunks tts and tts_stream send it), its
spaces written as ``SPACE`` so that the whole pronunciation stays one word: chunking never
cuts it, and word timestamps time it as the word it replaces.

A lexicon file (``--lexicon [LANG=]FILE``) is UTF-8 text, one entry per line:
``word<TAB>phonemes`` (IPA, as espeak-ng writes it for the voice's language: stress marks
and lengths included); blank lines and lines starting with ``#`` are skipped. An entry
matches the word as the normaliser leaves it (numbers are words by then), whole, in any
case ("Nguyen", "NGUYEN"); an entry of several words ("New York") matches them with any
white space between; the longest entry wins. Other forms ("Nguyens") need entries of their
own.

A Mandarin lexicon (``--lexicon zh=FILE``, also ``cmn``) gives pinyin instead of IPA:
``银行<TAB>yin2 hang2`` (tone numbers, or tone marks "yín háng"; no tone is the neutral
tone). Chinese is written without spaces, so an entry of Chinese characters matches
wherever those characters stand (the longest entry first, left to right), before the
characters are read; its syllables are checked against the voice's when the server starts.

A request's own entries (the ``LEXICON`` input of ``tts`` and ``tts_stream``: a JSON
object ``{"word or words": "phonemes"}``, read by :func:`parse_request_lexicon`) are the
same entries, bounded (:data:`MAX_REQUEST_ENTRIES`...) and checked against the request's
voice before any chunk runs; they apply for that request only, before the voice's own
lexicon (:func:`apply_lexicons`), so a request's entry wins.
"""

from __future__ import annotations

import json
import re
import unicodedata
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path

from triton_tts.contract.validation import InvalidRequest
from triton_tts.text.frontend import is_chinese
from triton_tts.text.han import has_han
from triton_tts.text.marks import CLOSE, MARKED, MARKS, OPEN, SPACE

MAX_ENTRIES = 100_000
MAX_ENTRY_CHARS = 200
# A request's LEXICON: a few names and words for that request, not a dictionary (a voice's
# lexicon files are for those).
MAX_REQUEST_ENTRIES = 100
MAX_REQUEST_WORD_CHARS = 64
MAX_REQUEST_PHONEME_CHARS = 256
MAX_REQUEST_BYTES = 64 * 1024  # of the JSON, UTF-8: 100 entries of IPA at their bounds fit
REQUEST_SOURCE = "LEXICON"


def mark(phonemes: str) -> str:
    """``phonemes`` as one marked word (NFD, as the voices' phoneme maps are written)."""
    return OPEN + SPACE.join(unicodedata.normalize("NFD", phonemes).split()) + CLOSE


def parts(text: str) -> list[tuple[bool, str]]:
    """``text`` as (is_phonemes, piece) in order: marked phonemes (spaces restored) and the
    plain text around them; [(False, text)] when nothing is marked."""
    if OPEN not in text:
        return [(False, text)]
    out: list[tuple[bool, str]] = []
    at = 0
    for match in MARKED.finditer(text):
        if match.start() > at:
            out.append((False, text[at : match.start()]))
        out.append((True, match.group(1).replace(SPACE, " ")))
        at = match.end()
    if at < len(text):
        out.append((False, text[at:]))
    return out


def unknown_symbols(phonemes: str, known: Mapping[str, object] | str) -> list[str]:
    """The symbols of ``phonemes`` a voice has no id for (white space aside)."""
    return sorted({c for c in phonemes if not c.isspace() and c not in known})


def check_pronunciations(text: str, known: Mapping[str, object] | str, voice: str) -> None:
    """Refuse (InvalidRequest) ``text``'s marked pronunciations that voice ``voice`` cannot
    say: ``known`` its symbols ("" : it takes none)."""
    for given, piece in parts(text):
        if not given:
            continue
        if not known:
            raise InvalidRequest(f"voice '{voice}' takes no IPA pronunciations (it reads letters or pinyin)")
        unknown = unknown_symbols(piece, known)
        if unknown:
            raise InvalidRequest(
                f"the pronunciation {piece!r} has {', '.join(repr(c) for c in unknown)}: not among "
                f"voice '{voice}'s phonemes"
            )


@dataclass
class Lexicon:
    """Word -> phonemes, for the voices of one language (``language``: a prefix, "en"
    serves en-us and en-gb)."""

    language: str
    entries: dict[str, str] = field(default_factory=dict)  # lower-case word(s) -> phonemes
    source: str = ""

    def __post_init__(self) -> None:
        self._pattern: re.Pattern[str] | None = None

    def serves(self, language: str) -> bool:
        if is_chinese(self.language):  # zh, cmn, zh-CN: one Mandarin
            return is_chinese(language)
        return language.lower() == self.language or language.lower().startswith(self.language + "-")

    @property
    def pattern(self) -> re.Pattern[str] | None:
        if self._pattern is None and self.entries:
            words = sorted(self.entries, key=len, reverse=True)  # the longest entry wins
            self._pattern = re.compile("|".join(_entry_pattern(w) for w in words), re.IGNORECASE)
        return self._pattern

    def apply(self, text: str) -> tuple[str, list[tuple[str, str]]]:
        """``text`` with each entry's words marked with its phonemes, and the entries that
        applied as (the words as they stood, phonemes), in order."""
        pattern = self.pattern
        if pattern is None:
            return text, []
        applied: list[tuple[str, str]] = []

        def replace(match: re.Match[str]) -> str:
            phonemes = self.entries[" ".join(match.group(0).lower().split())]
            applied.append((match.group(0), phonemes))
            return mark(phonemes)

        if OPEN not in text:
            return pattern.sub(replace, text), applied
        # Pronunciations marked already (an earlier lexicon's) stay as they are.
        said = [mark(piece) if given else pattern.sub(replace, piece) for given, piece in parts(text)]
        return "".join(said), applied

    def to_json(self) -> dict[str, object]:
        return {"language": self.language, "entries": self.entries, "source": self.source}

    @classmethod
    def from_json(cls, value: Mapping[str, object]) -> Lexicon:
        entries = value.get("entries", {})
        assert isinstance(entries, dict)
        return cls(
            str(value["language"]), {str(k): str(v) for k, v in entries.items()}, str(value.get("source", ""))
        )


def apply_lexicons(text: str, lexicons: list[Lexicon | None]) -> str:
    """``text`` with each lexicon's entries marked, the first lexicon's first: a word an
    earlier one marked is not looked up in a later one (a request's entries win)."""
    for lexicon in lexicons:
        if lexicon is not None:
            text = lexicon.apply(text)[0]
    return text


def _entry_pattern(word: str) -> str:
    """An entry's words with any white space between; whole words, except at an edge that
    is a Chinese character (Chinese has no spaces between words)."""
    body = r"\s+".join(re.escape(w) for w in word.split())
    before = "" if has_han(word[0]) else rf"(?<![\w'{MARKS}])"
    after = "" if has_han(word[-1]) else rf"(?![\w'{MARKS}])"
    return f"{before}(?:{body}){after}"


def check_pinyin(text: str, syllables: Mapping[str, object], voice: str) -> None:
    """Refuse (InvalidRequest) ``text``'s marked pronunciations that Mandarin voice
    ``voice`` cannot say: each must be pinyin syllables among ``syllables``."""
    from triton_tts.text.chinese import unknown_syllables

    for given, piece in parts(text):
        if not given:
            continue
        unknown = unknown_syllables(piece, dict(syllables))  # type: ignore[arg-type]
        if unknown:
            raise InvalidRequest(
                f"the pronunciation {piece!r} has {', '.join(repr(s) for s in unknown)}: not pinyin "
                f"syllables voice '{voice}' says (write 'yin2 hang2' or 'yín háng')"
            )


def check_lexicon(
    lexicon: Lexicon, voice: str, phonemes: str | None, syllables: Mapping[str, object] | None
) -> None:
    """ValueError naming the first entry of ``lexicon`` that voice ``voice`` cannot say:
    ``phonemes`` its symbols ("": it takes no pronunciations, and lexicons do not apply
    to it; None: not known), or ``syllables`` a pinyin voice's."""
    if syllables is None and not phonemes:
        return
    for word, said in lexicon.entries.items():
        try:
            if syllables is not None:
                check_pinyin(mark(said), syllables, voice)
            else:
                check_pronunciations(mark(said), phonemes or "", voice)
        except InvalidRequest as err:
            raise ValueError(f"{lexicon.source}: {word!r}: {err}") from None


def parse_lexicon(text: str, language: str, source: str = "lexicon") -> Lexicon:
    """A lexicon file's text -> its Lexicon; ValueError naming the line that is wrong."""
    entries: dict[str, str] = {}
    chinese = is_chinese(language)
    for number, line in enumerate(text.splitlines(), 1):
        if not line.strip() or line.lstrip().startswith("#"):
            continue
        where = f"{source} line {number}"
        if "\t" not in line:
            raise ValueError(f"{where}: expected 'word<TAB>phonemes', got {line[:60]!r}")
        word, _, phonemes = line.partition("\t")
        try:
            _add_entry(entries, word, phonemes, chinese, MAX_ENTRY_CHARS, MAX_ENTRY_CHARS)
        except ValueError as err:
            raise ValueError(f"{where}: {err}") from None
        if len(entries) > MAX_ENTRIES:
            raise ValueError(f"{source}: more than {MAX_ENTRIES:,} entries")
    return Lexicon(language.lower(), entries, source)


def _add_entry(
    entries: dict[str, str], word: str, phonemes: str, chinese: bool, word_chars: int, phoneme_chars: int
) -> None:
    """One entry, its white space tidied, into ``entries``; ValueError saying what is wrong."""
    word, phonemes = " ".join(word.split()), phonemes.strip()
    if not word or not phonemes:
        raise ValueError("the word and its phonemes must both be given")
    if len(word) > word_chars or len(phonemes) > phoneme_chars:
        if word_chars == phoneme_chars:
            raise ValueError(f"an entry is at most {word_chars} characters a side")
        raise ValueError(
            f"an entry is at most {word_chars} characters of words and {phoneme_chars} of phonemes"
        )
    if any(c in MARKS for c in word + phonemes) or "\t" in phonemes:
        raise ValueError("private-use characters and tabs are not allowed")
    if not any(c.isalnum() for c in word):
        raise ValueError(f"{word!r} has no letters or digits")
    if chinese:
        from triton_tts.text.chinese import given_pinyin

        if given_pinyin(phonemes) is None:
            raise ValueError(f"{phonemes!r} is not pinyin (tone numbers 'yin2 hang2' or marks 'yín háng')")
    key = word.lower()
    if key in entries and entries[key] != phonemes:
        raise ValueError(f"{word!r} is given twice, with different phonemes")
    entries[key] = phonemes


def parse_request_lexicon(
    raw: bytes | str,
    language: str,
    voice: str,
    phonemes: str | None,
    syllables: Mapping[str, object] | None,
) -> Lexicon:
    """A request's LEXICON (a JSON object ``{"word or words": "phonemes"}``, UTF-8) -> its
    Lexicon for voice ``voice`` of ``language``, each entry checked as a lexicon file's are
    and against what the voice says (``phonemes``/``syllables`` as :func:`check_lexicon`
    takes them); InvalidRequest naming the entry that is wrong, or the bound passed."""
    size = len(raw.encode("utf-8") if isinstance(raw, str) else raw)
    if size > MAX_REQUEST_BYTES:
        raise InvalidRequest(f"{REQUEST_SOURCE} is at most {MAX_REQUEST_BYTES:,} bytes of JSON, got {size:,}")
    if phonemes == "" and syllables is None:
        raise InvalidRequest(f"{REQUEST_SOURCE}: voice '{voice}' takes no pronunciations (it reads letters)")
    try:
        given = json.loads(raw)
    except (ValueError, RecursionError) as err:  # UnicodeDecodeError and JSONDecodeError are ValueErrors
        raise InvalidRequest(
            f'{REQUEST_SOURCE} must be a JSON object {{"word": "phonemes", ...}}: {err}'
        ) from None
    if not isinstance(given, dict):
        raise InvalidRequest(
            f'{REQUEST_SOURCE} must be a JSON object {{"word": "phonemes", ...}}, got {type(given).__name__}'
        )
    if len(given) > MAX_REQUEST_ENTRIES:
        raise InvalidRequest(
            f"{REQUEST_SOURCE} holds at most {MAX_REQUEST_ENTRIES} entries, got {len(given)}"
        )
    entries: dict[str, str] = {}
    for word, said in given.items():
        if not isinstance(said, str):
            raise InvalidRequest(
                f"{REQUEST_SOURCE} entry {word[:MAX_REQUEST_WORD_CHARS]!r}: its phonemes must be a "
                f"string, got {type(said).__name__}"
            )
        try:
            _add_entry(
                entries, word, said, is_chinese(language), MAX_REQUEST_WORD_CHARS, MAX_REQUEST_PHONEME_CHARS
            )
        except ValueError as err:
            raise InvalidRequest(f"{REQUEST_SOURCE} entry {word[:MAX_REQUEST_WORD_CHARS]!r}: {err}") from None
    lexicon = Lexicon(language.lower(), entries, REQUEST_SOURCE)
    try:
        check_lexicon(lexicon, voice, phonemes, syllables)
    except ValueError as err:
        raise InvalidRequest(str(err).replace(f"{REQUEST_SOURCE}: ", f"{REQUEST_SOURCE} entry ", 1)) from None
    return lexicon


def load_lexicon(spec: str) -> Lexicon:
    """``[LANG=]FILE`` (``--lexicon``) -> its Lexicon (LANG defaults to "en"); ValueError
    with the file and line when it cannot be read."""
    language, _, name = spec.partition("=") if "=" in spec else ("en", "", spec)
    if not re.fullmatch(r"[a-zA-Z]{2,3}(-[a-zA-Z0-9]{1,8})*", language):
        raise ValueError(f"--lexicon {spec}: {language!r} is not a language tag (en, en-us, cmn)")
    path = Path(name)
    try:
        text = path.read_text(encoding="utf-8")
    except UnicodeDecodeError as err:
        raise ValueError(f"lexicon {path}: not UTF-8 text ({err.reason} at byte {err.start})") from None
    except OSError as err:
        raise ValueError(f"lexicon {path}: {err.strerror or err}") from None
    return parse_lexicon(text, language, str(path))
