"""The English normaliser's shared pieces (triton_tts.text.normalize): regular
expressions for numbers, months, days, times and sentence ends, and the helpers that read
a signed number and fit inserted words into the text around them."""

from __future__ import annotations

import re
from collections.abc import Iterable

from triton_tts.text.english_data import (
    MONTH_ABBREVIATIONS,
    MONTH_NAMES,
    SIGN_WORDS,
)
from triton_tts.text.english_numbers import (
    decimal,
)

# --- shared regex pieces -----------------------------------------------------

# A number must not start inside another number ("1,234" must not yield
# "234") and must not stop before more digits of a dotted or grouped run.
NUMBER_START = r"(?<![0-9])(?<![0-9][.,])"
NUMBER_END = r"(?![0-9])(?![.,][0-9])"
# A sign only counts at the start of a token, never in "COVID-19" or "5-3".
SIGN = r"(?:(?<!\w)(?P<sign>[-+]))?"
INTEGER = r"(?P<int>[0-9]{1,3}(?:,[0-9]{3})+|[0-9]+)"
FRACTION = r"(?:\.(?P<frac>[0-9]+))?"
NUMBER = NUMBER_START + SIGN + INTEGER + FRACTION + NUMBER_END


def alternation(words: Iterable[str]) -> str:
    """Longest alternatives first so that "Mrs" is not cut short as "Mr"."""
    ordered = sorted(words, key=len, reverse=True)
    return "|".join(re.escape(word) for word in ordered)


FULL_MONTH = "|".join(MONTH_NAMES)
ABBREVIATED_MONTH = alternation(MONTH_ABBREVIATIONS)
# An abbreviation's period belongs to the month only when a number follows;
# otherwise it may be the end of the sentence.
MONTH = rf"(?P<month>(?:{FULL_MONTH})\b|(?:{ABBREVIATED_MONTH})\b(?:\.(?=\s+[0-9]))?)"
DATE_YEAR = r"(?:,?\s+(?P<year>[0-9]{4})(?![\w]|[.,][0-9]))"
DAY = r"(?P<day>[0-9]{1,2})(?:st|nd|rd|th)?"
MERIDIEM = r"(?P<meridiem>[aApP]\.[mM]\.|[aApP][mM])(?!\w)"
YEAR_NUMBER = r"(?:1[1-9][0-9]{2}|20[1-9][0-9])"

SENTENCE_END_FOLLOWS = re.compile(r"\s*$|\s+[\"'(\[]*[A-Z]")
CAPITALISED_WORD_FOLLOWS = re.compile(r"\s+[\"'(\[]*[A-Z]")
CAPITALISED_WORD_ENDS = re.compile(r"\b[A-Z][\w'-]*\s+$")
WHITESPACE = re.compile(r"\s+")
ASCII_DIGIT = re.compile(r"[0-9]")


# --- number reading ----------------------------------------------------------


def signed_number(match: re.Match[str]) -> str:
    """Reading of a match built from ``NUMBER``, sign included."""
    words = decimal(match.group("int"), match.group("frac"))
    sign = match.group("sign")
    return f"{SIGN_WORDS[sign]} {words}" if sign else words


def is_exactly_one(match: re.Match[str]) -> bool:
    """Singular units and currencies go with exactly "1", not "1.0" or "01"."""
    return match.group("int") == "1" and match.group("frac") is None


def pluralise_last_word(words: str) -> str:
    """Decades: "nineteen ninety" -> "nineteen nineties"."""
    if words.endswith("y"):
        return words[:-1] + "ies"
    return words + "s"


# --- replacement helpers -----------------------------------------------------


def fit(match: re.Match[str], words: str) -> str:
    """Keep inserted words from fusing with adjacent letters or digits
    ("x86" -> "x eighty-six", "Mr.Smith" -> "Mister Smith")."""
    text = match.string
    start, end = match.span()
    if start > 0 and text[start - 1].isalnum():
        words = " " + words
    if end < len(text) and text[end].isalnum():
        words += " "
    return words


def sentence_ends_after(match: re.Match[str]) -> bool:
    """True when the matched text is followed by the end of the input or by a
    capitalised word, i.e. its final period also closes a sentence."""
    return SENTENCE_END_FOLLOWS.match(match.string, match.end()) is not None


def keep_final_period(match: re.Match[str], words: str) -> str:
    """Give back the sentence period that an abbreviation's dot swallowed."""
    if match.group(0).endswith(".") and sentence_ends_after(match):
        return words + "."
    return words
