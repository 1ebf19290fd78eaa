"""Readings that need the shape around a number, for the English normaliser
(triton_tts/text/normalize.py puts them in its rewrite order, after dates and clock times;
the patterns never match next to a letter or digit, so a reading needs no spacing):

- telephone numbers, read in their groups digit by digit: "555-0123" is "five five five,
  zero one two three", "(415) 555-0123" and "+44 20 7946 0958" likewise;
- fractions: "3/4" is "three quarters", "1 1/2" is "one and one half", "5/8" is "five
  eighths" (common denominators only, so that "24/7" or "50/50" are left to the rules after,
  but any before "of": "12/24 of them" is "twelve twenty-fourths of them"; a month and day
  without a year, "12/24", is a date, and normalize.py decides which it is before this);
- multipliers: "3.5x" is "three point five times", "10x" is "ten times";
- comparisons: "<", ">", "<=", ">=", "≤", "≥" before a number ("costs < 5 dollars", "x>3")
  or between words with a space each side ("a < b") are "less than", "greater than" ("or
  equal to"); markup ("<b>5"), arrows ("->") and shifts ("<<") are left;
- abbreviations said only before a number: "ext. 204" is "extension two zero four" (its
  digits one by one, as a telephone number's).
"""

from __future__ import annotations

import re

from triton_tts.text.english_data import (
    BEFORE_NUMBER_ABBREVIATIONS,
    COMPARISONS,
    CURRENCIES,
    FRACTION_DENOMINATORS,
)
from triton_tts.text.english_numbers import cardinal, decimal, ordinal, read_digits

# North American numbers: an area code never starts with 0 or 1, nor does the exchange of a
# number written without one, which keeps ranges ("100-1000") and scores out; nor is a bare
# pair of round numbers ("200-3000") a telephone number. International ones start with "+".
TELEPHONE = re.compile(
    r"(?<![\w.,/+-])"
    r"(?:(?P<intl>\+[0-9]{1,3}(?:[ .-][0-9]{1,4}){2,5})"
    r"|(?:\+?1[ .-])?(?:\((?P<area_paren>[2-9][0-9]{2})\) ?|(?P<area>[2-9][0-9]{2})[ .-])"
    r"(?P<exchange>[0-9]{3})[ .-](?P<line>[0-9]{4})"
    r"|(?P<bare>[2-9][0-9]{2})[ .-](?P<bare_line>[0-9]{4}))"
    r"(?![\w/-])(?![.,][0-9])"
)


def say_telephone(match: re.Match[str]) -> str:
    """Each group of digits read digit by digit, a comma (a pause) between groups."""
    bare, line = match.group("bare"), match.group("bare_line")
    if bare and bare.endswith("00") and line.endswith("00"):
        return match.group(0)  # a range of round numbers: the rules after read it
    groups = re.findall(r"[0-9]+", match.group(0))
    words = ", ".join(read_digits(group) for group in groups)
    return f"plus {words}" if match.group(0).startswith("+") else words


FRACTION_FOLLOWS = re.compile(r"\s+of\b")  # "12/24 of them": a fraction, whatever its denominator
FRACTION = re.compile(
    r"(?<![\w.,/])(?:(?P<whole>[0-9]{1,6}) (?=[0-9]{1,2}/))?"
    r"(?P<numerator>[0-9]{1,2})/(?P<denominator>[0-9]{1,3})"
    r"(?![\w/])(?![.,][0-9])"
)


def say_fraction(match: re.Match[str]) -> str:
    """The fraction's words, or the text as it is when it is not read as one."""
    numerator, denominator = int(match.group("numerator")), int(match.group("denominator"))
    common = denominator in FRACTION_DENOMINATORS or FRACTION_FOLLOWS.match(match.string, match.end())
    if not common or numerator == 0 or denominator < 2:
        return match.group(0)
    if denominator == 2:
        name = "half" if numerator == 1 else "halves"
    elif denominator == 4:
        name = "quarter" if numerator == 1 else "quarters"
    else:
        name = ordinal(str(denominator)) + ("" if numerator == 1 else "s")
    words = f"{cardinal(str(numerator))} {name}"
    whole = match.group("whole")
    return f"{cardinal(whole)} and {words}" if whole else words


MULTIPLIER = re.compile(r"(?<![\w.,])(?P<int>[0-9]+)(?:\.(?P<frac>[0-9]+))?x(?!\w)")


def say_multiplier(match: re.Match[str]) -> str:
    return f"{decimal(match.group('int'), match.group('frac'))} times"


_COMPARISON_SIGN = r"(?<![-=<>!])(?:<=|>=|[<>\u2264\u2265])(?![<>=])"
COMPARISON = re.compile(
    rf"{_COMPARISON_SIGN}(?=\s?[-+]?[{''.join(CURRENCIES)}]?[0-9])"  # before a number
    rf"|(?<=[\w)%]\s){_COMPARISON_SIGN}(?=\s+[\w(])"  # between words, spaced
)
_TAG_START = re.compile(r"<[/!?]?[A-Za-z]")


def say_comparison(match: re.Match[str]) -> str:
    """The sign's words, spaced; a ">" that closes markup ('<b>5', '<say-as ...>1') is left."""
    sign, text, start = match.group(0), match.string, match.start()
    if sign.startswith(">"):
        opened = text.rfind("<", 0, start)
        if opened > text.rfind(">", 0, start) and _TAG_START.match(text, opened):
            return sign
    return f" {COMPARISONS[sign]} "


BEFORE_NUMBER_ABBREVIATION = re.compile(
    r"(?<![\w.])(?P<abbreviation>(?i:"
    + "|".join(map(re.escape, BEFORE_NUMBER_ABBREVIATIONS))
    + r"))(?:\.\s?|\s)(?P<digits>[0-9]+)(?!\w)(?![.,][0-9])"
)


def say_before_number_abbreviation(match: re.Match[str]) -> str:
    words = BEFORE_NUMBER_ABBREVIATIONS[match.group("abbreviation").lower()]
    return f"{words} {read_digits(match.group('digits'))}"
