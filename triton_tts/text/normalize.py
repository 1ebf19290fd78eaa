"""English text normalisation applied before espeak-ng phonemisation.

Why this exists: espeak-ng reads many written forms literally or
inconsistently ("$3.50", "3/15/2024", "Dr. Smith", "5 km", "10:00"), so the
voice would not say them the way a person reads them aloud.  This module
rewrites such forms into plain English words.  Sentence punctuation
(. , ! ? ; :) is left in place because the phonemiser derives pauses and
intonation from it.

Design rules, because this runs on the serving hot path:

* Pure and thread-safe: every regex is compiled at import time and every
  table is immutable (tuples, ``frozenset``, ``MappingProxyType``; they live
  in triton_tts/text/english_data.py).  num2words is only ever called with
  ``int`` values (triton_tts/text/english_numbers.py says why).
* Never raises: each num2words call goes through one guarded helper that
  falls back to reading the digits one by one, and numbers longer than
  ``MAX_SPOKEN_DIGITS`` digits are always read digit by digit (nobody says
  "ten duodecillion", and it keeps ``int()`` away from huge strings).
* The rewrites run in a fixed order, most specific first, so that for
  example a date claims "2024-03-15" before its parts could be read as a
  plain number and a minus sign.

Deliberate reading choices (the unit tests pin each of them):

* Commas that num2words puts inside number words are removed
  ("one thousand two hundred and thirty-four"), so the phonemiser does not
  pause in the middle of a number.
* Times are read as written, without converting 24-hour clocks:
  "14:45" -> "fourteen forty-five", "3:05 pm" -> "three oh five p m",
  "10:00" -> "ten o'clock", "14:00" -> "fourteen hundred", "10:00 am" ->
  "ten a m".
* Years: a four-digit number is read as a year ("nineteen ninety-nine")
  only inside dates, before an era (AD/BC), as a decade ("1990s"), or when
  it lies in 1100-1999 or 2010-2099 and directly follows a cue word such as
  "in", "since", "by", "from", "until", "to", "of", "during", "before",
  "after", "around", "between" or "year".  Everywhere else it is a cardinal
  ("4000 people").  2000-2009 read the same either way.
* Dates always come out month first: "2024-03-15", "March 15, 2024",
  "15 March 2024" and "3/15/2024" all become
  "March fifteenth, twenty twenty-four".  Numeric dates are read US style
  (month/day/year) unless the first number cannot be a month.
* A month and day without a year ("12/24", "3/15") is a date ("December
  twenty-fourth") when its day is not a fraction's denominator (2, 3, 4, 5,
  6, 8, 10, 12, 16, 32, 64, 100), or after a date cue ("on", "until",
  "since", "due", "through", a weekday...: "on 1/2" is "January second",
  "on 24/12" "December twenty-fourth"); before "of" it is always a fraction
  ("12/24 of them" -> "twelve twenty-fourths of them"), and otherwise a
  common fraction stays one ("3/4 cup" -> "three quarters cup").  What is
  neither ("24/7", "50/50") is left to the rules after.
* Money with cents: "$3.50" -> "three dollars and fifty cents".
* Units use US spelling ("kilometers", "liters") and are singular only
  for exactly "1" ("1 km" -> "one kilometer", "1.0 km" -> "one point zero
  kilometers").  "in" (inches) is not expanded because it is ambiguous.
* "Dr." is "Doctor" before a capitalised word, "Drive" after a capitalised
  word otherwise; "St." is "Saint" before a capitalised word, otherwise
  "Street".  A trailing abbreviation that ends a sentence keeps its period.
* "ext." (or "ext") before a number is "extension", its digits read one by
  one as in a telephone number: "ext. 204" -> "extension two zero four".
* "<" and ">" ("<=", ">=", "≤", "≥") are "less than", "greater than" (... "or
  equal to") before a number ("costs < 5 dollars", "x>3") or between words
  with a space each side ("a < b"); elsewhere (markup, arrows, "<<") they are
  left alone.
* Month abbreviations with a period ("Jan.") are always expanded, so the
  name "Jan." at the end of a sentence would be read as "January".
* Dotted number groups such as versions or addresses ("1.2.3") are read
  part by part joined by "dot".
* A comma between digits is a thousands separator only in a well-formed
  group ("1,250", "1,234,567"); anything else is a list ("1,2,3" -> "one,
  two, three"), whatever the length of the list.
"""

from __future__ import annotations

import re
import unicodedata
from collections.abc import Callable
from typing import NamedTuple

from triton_tts.text import english_context as context
from triton_tts.text.english_data import (
    AFTER_NFKC,
    BEFORE_NFKC,
    CURRENCIES,
    DATE_CUE_WORDS,
    DAYS_IN_MONTH,
    ERA_LETTERS,
    FRACTION_DENOMINATORS,
    LATIN_ABBREVIATIONS,
    LEADING_ABBREVIATIONS,
    MONTH_NAMES,
    MONTH_NUMBERS,
    SCALE_ABBREVIATIONS,
    SIGN_WORDS,
    TRAILING_ABBREVIATIONS,
    UNITS,
    WEEKDAY_ABBREVIATIONS,
    YEAR_CUE_WORDS,
)
from triton_tts.text.english_numbers import (
    MAX_SPOKEN_DIGITS,
    cardinal,
    decimal,
    ordinal,
    year_words,
)
from triton_tts.text.english_patterns import (
    ASCII_DIGIT,
    CAPITALISED_WORD_ENDS,
    CAPITALISED_WORD_FOLLOWS,
    DATE_YEAR,
    DAY,
    FRACTION,
    FULL_MONTH,
    INTEGER,
    MERIDIEM,
    MONTH,
    NUMBER,
    NUMBER_END,
    NUMBER_START,
    WHITESPACE,
    YEAR_NUMBER,
    alternation,
    fit,
    is_exactly_one,
    keep_final_period,
    pluralise_last_word,
    signed_number,
)

__all__ = ["MAX_SPOKEN_DIGITS", "normalize_english"]


def _max_day(month: int, year: int | None) -> int:
    if month == 2 and year is not None:
        leap = year % 4 == 0 and (year % 100 != 0 or year % 400 == 0)
        return 29 if leap else 28
    return DAYS_IN_MONTH[month - 1]


def _say_date(month: int, day: int | None, year: int | None, *, day_first: bool = False) -> str | None:
    """Spoken date, or None when the parts cannot form a real date (then the
    text is left for the number rewrites)."""
    if not 1 <= month <= 12:
        return None
    if day is not None and not 1 <= day <= _max_day(month, year):
        return None
    month_name = MONTH_NAMES[month - 1]
    if day is None:
        words = month_name
    elif day_first:
        words = f"{ordinal(str(day))} of {month_name}"
    else:
        words = f"{month_name} {ordinal(str(day))}"
    if year is not None:
        words = f"{words}, {year_words(year)}" if day is not None else f"{words} {year_words(year)}"
    return words


say_date = _say_date  # SSML's say-as date reads its parts the same way


def _optional_int(value: str | None) -> int | None:
    return int(value) if value is not None else None


# --- rewrites: dates -----------------------------------------------------------

_ISO_DATE = re.compile(
    r"(?<![0-9/.\-])(?P<year>[0-9]{4})(?P<sep>[-/])(?P<month>[0-9]{1,2})"
    r"(?P=sep)(?P<day>[0-9]{1,2})(?![0-9]|[-/.][0-9])"
)


def _rewrite_iso_date(match: re.Match[str]) -> str:
    words = _say_date(int(match.group("month")), int(match.group("day")), int(match.group("year")))
    return match.group(0) if words is None else fit(match, words)


_NUMERIC_DATE = re.compile(
    r"(?<![0-9/.\-])(?P<first>[0-9]{1,2})(?P<sep>[-/])(?P<second>[0-9]{1,2})"
    r"(?P=sep)(?P<year>[0-9]{4})(?![0-9]|[-/.][0-9])"
)


def _rewrite_numeric_date(match: re.Match[str]) -> str:
    """US order (month/day/year) unless the first number cannot be a month."""
    first, second = int(match.group("first")), int(match.group("second"))
    month, day = (first, second) if first <= 12 else (second, first)
    words = _say_date(month, day, int(match.group("year")))
    return match.group(0) if words is None else fit(match, words)


_DATE_CUE = "|".join(
    [*DATE_CUE_WORDS, *dict.fromkeys(WEEKDAY_ABBREVIATIONS.values()), alternation(WEEKDAY_ABBREVIATIONS)]
)
_SLASHED_MONTH_DAY = re.compile(
    rf"(?:(?<!\w)(?P<cue>(?i:{_DATE_CUE}))\.?,?\s+)?(?<![\w.,/\-])"
    r"(?P<first>[0-9]{1,2})/(?P<second>[0-9]{1,2})(?![\w/])(?![.,][0-9])"
)


def _rewrite_slashed_month_day(match: re.Match[str]) -> str:
    """A month and day without a year, by context: after a date cue a date (day first
    when the first number cannot be a month); before "of" a fraction; otherwise a date
    unless the day is a fraction's denominator. What stays goes on to the fraction rule."""
    first, second = int(match.group("first")), int(match.group("second"))
    if context.FRACTION_FOLLOWS.match(match.string, match.end()):
        return match.group(0)
    if match.group("cue") is not None:
        month, day = (first, second) if first <= 12 else (second, first)
    elif second in FRACTION_DENOMINATORS:
        return match.group(0)
    else:
        month, day = first, second
    words = _say_date(month, day, None)
    if words is None:
        return match.group(0)
    return fit(match, match.string[match.start() : match.start("first")] + words)


_MONTH_DAY_DATE = re.compile(rf"(?<!\w){MONTH}\s+{DAY}(?!\w)(?![.,:][0-9]){DATE_YEAR}?")
_DAY_MONTH_DATE = re.compile(rf"(?<![\w.,]){DAY}\s+(?P<of>of\s+)?{MONTH}{DATE_YEAR}?")
_MONTH_YEAR_DATE = re.compile(rf"(?<!\w){MONTH}{DATE_YEAR}")


def _rewrite_named_month_date(match: re.Match[str]) -> str:
    """Shared by month-first, day-first and month-year forms.  Day-first dates
    are read month first too, except "15th of March", which keeps its "of"."""
    month_key = match.group("month").rstrip(".")
    groups = match.groupdict()
    day = _optional_int(groups.get("day"))
    year = _optional_int(groups.get("year"))
    words = _say_date(MONTH_NUMBERS[month_key], day, year, day_first=groups.get("of") is not None)
    return match.group(0) if words is None else fit(match, words)


# --- rewrites: times -----------------------------------------------------------

_CLOCK_TIME = re.compile(
    r"(?<![0-9:.])(?P<hour>[01]?[0-9]|2[0-3]):(?P<minute>[0-5][0-9])"
    r"(?::(?P<second>[0-5][0-9]))?(?![0-9]|:[0-9])"
    rf"(?:\s?{MERIDIEM})?"
)
_HOUR_WITH_MERIDIEM = re.compile(rf"(?<![\w:.,])(?P<hour>1[0-2]|0?[1-9])\s?{MERIDIEM}")


def _say_meridiem(match: re.Match[str]) -> str:
    letter = match.group("meridiem")[0].lower()
    return keep_final_period(match, f"{letter} m")


def _rewrite_clock_time(match: re.Match[str]) -> str:
    """Read as written (no 24-hour conversion): "three oh five",
    "ten o'clock", "fourteen hundred", "ten a m"."""
    hour = int(match.group("hour"))
    minute = int(match.group("minute"))
    has_meridiem = match.group("meridiem") is not None
    parts = [cardinal(str(hour))]
    if minute == 0:
        if not has_meridiem:
            parts.append("o'clock" if 1 <= hour <= 12 else "hundred")
    elif minute < 10:
        parts.extend(("oh", cardinal(str(minute))))
    else:
        parts.append(cardinal(str(minute)))
    second_text = match.group("second")
    if second_text is not None and int(second_text) > 0:
        second = int(second_text)
        parts.append(f"and {cardinal(str(second))} second{'s' if second != 1 else ''}")
    if has_meridiem:
        parts.append(_say_meridiem(match))
    return fit(match, " ".join(parts))


def _rewrite_hour_with_meridiem(match: re.Match[str]) -> str:
    hour = cardinal(str(int(match.group("hour"))))
    return fit(match, f"{hour} {_say_meridiem(match)}")


# --- rewrites: eras and decades ------------------------------------------------

_ERA_YEAR = re.compile(rf"(?<![\w.,])(?P<year>[0-9]{{1,4}})\s?(?P<era>{alternation(ERA_LETTERS)})(?!\w)")


def _rewrite_era_year(match: re.Match[str]) -> str:
    era = keep_final_period(match, ERA_LETTERS[match.group("era")])
    return fit(match, f"{year_words(int(match.group('year')))} {era}")


_DECADE = re.compile(r"(?<![\w.,])(?P<decade>1[1-9][0-9]0|20[0-9]0)'?s(?!\w)")


def _rewrite_decade(match: re.Match[str]) -> str:
    return fit(match, pluralise_last_word(year_words(int(match.group("decade")))))


# "the 80s" / "'90s": only with "the" or an apostrophe, because "90s" alone
# is just as often ninety seconds.
_SHORT_DECADE = re.compile(r"(?:(?<=\b[Tt]he )|')(?P<decade>[1-9]0)'?s(?!\w)")


def _rewrite_short_decade(match: re.Match[str]) -> str:
    return fit(match, pluralise_last_word(cardinal(match.group("decade"))))


# --- rewrites: abbreviations -----------------------------------------------------

_WEEKDAY = re.compile(
    rf"(?<![\w.])(?P<abbreviation>{alternation(WEEKDAY_ABBREVIATIONS)})\."
    rf"(?=,?\s+(?:[0-9]|(?:{FULL_MONTH})\b))"
)


def _rewrite_weekday(match: re.Match[str]) -> str:
    """Only before a date: "Sun." or "Sat." on their own are too often words."""
    return WEEKDAY_ABBREVIATIONS[match.group("abbreviation")]


_DOTTED_ABBREVIATION = re.compile(
    r"(?<![\w.])(?P<abbreviation>"
    + alternation([*LEADING_ABBREVIATIONS, *TRAILING_ABBREVIATIONS, "Dr", "St"])
    + r")\."
)


def _rewrite_dotted_abbreviation(match: re.Match[str]) -> str:
    abbreviation = match.group("abbreviation")
    text = match.string
    next_is_capitalised = CAPITALISED_WORD_FOLLOWS.match(text, match.end()) is not None
    if abbreviation == "Dr":
        preceding = text[max(0, match.start() - 40) : match.start()]
        if not next_is_capitalised and CAPITALISED_WORD_ENDS.search(preceding):
            return fit(match, keep_final_period(match, "Drive"))
        return fit(match, "Doctor")
    if abbreviation == "St":
        if next_is_capitalised:
            return fit(match, "Saint")
        return fit(match, keep_final_period(match, "Street"))
    if abbreviation in LEADING_ABBREVIATIONS:
        return fit(match, LEADING_ABBREVIATIONS[abbreviation])
    return fit(match, keep_final_period(match, TRAILING_ABBREVIATIONS[abbreviation]))


_LATIN_ABBREVIATION = re.compile(r"(?<![\w.])(?P<first>[eEiI])\.(?P<second>[gGeE])\.")


def _rewrite_latin_abbreviation(match: re.Match[str]) -> str:
    key = (match.group("first") + match.group("second")).lower()
    words = LATIN_ABBREVIATIONS.get(key)
    return match.group(0) if words is None else fit(match, words)


_BARE_ABBREVIATION = re.compile(r"(?<![\w.])(?P<abbreviation>vs|etc)(?![\w.])")


def _rewrite_bare_abbreviation(match: re.Match[str]) -> str:
    words = "versus" if match.group("abbreviation") == "vs" else "et cetera"
    return fit(match, words)


_NUMBER_SIGN = re.compile(r"(?:(?<![\w.])[Nn]o\.\s?|#\s?)(?=[0-9])")


def _rewrite_number_sign(match: re.Match[str]) -> str:
    return fit(match, "number ")


# --- rewrites: money, percentages, units ------------------------------------------

_CURRENCY_SYMBOLS = "".join(CURRENCIES)
_SCALE = (
    r"(?:\s?(?P<scale_word>thousand|million|billion|trillion)(?!\w)"
    rf"|(?P<scale_abbreviation>{alternation(SCALE_ABBREVIATIONS)})(?!\w))"
)
_PREFIX_MONEY = re.compile(
    rf"(?:(?<!\w)(?P<sign>-))?(?P<symbol>[{_CURRENCY_SYMBOLS}])\s?"
    rf"{INTEGER}{FRACTION}{NUMBER_END}{_SCALE}?"
)
_SUFFIX_MONEY = re.compile(rf"{NUMBER}\s?(?P<symbol>[{_CURRENCY_SYMBOLS}])")


def _say_money(match: re.Match[str]) -> str:
    """Money as people say it: "$3.50" -> "three dollars and fifty cents",
    "$0.99" -> "ninety-nine cents", "$2.5M" -> "two point five million dollars"."""
    currency = CURRENCIES[match.group("symbol")]
    integer = match.group("int").replace(",", "")
    fraction = match.group("frac")
    groups = match.groupdict()
    scale = groups.get("scale_word") or SCALE_ABBREVIATIONS.get(groups.get("scale_abbreviation") or "")
    if scale:
        words = f"{decimal(integer, fraction)} {scale} {currency.major_plural}"
    elif (
        fraction is None
        or len(fraction) > 2
        or currency.minor_singular is None
        or currency.minor_plural is None
    ):
        unit = currency.major_singular if is_exactly_one(match) else currency.major_plural
        words = f"{decimal(integer, fraction)} {unit}"
    else:
        minor = int(fraction.ljust(2, "0"))
        major_is_zero = integer.strip("0") == ""
        major_unit = currency.major_singular if integer.lstrip("0") == "1" else currency.major_plural
        minor_unit = currency.minor_singular if minor == 1 else currency.minor_plural
        major_words = f"{cardinal(integer.lstrip('0') or '0')} {major_unit}"
        minor_words = f"{cardinal(str(minor))} {minor_unit}"
        if minor == 0:
            words = major_words
        elif major_is_zero:
            words = minor_words
        else:
            words = f"{major_words} and {minor_words}"
    if match.group("sign"):
        words = f"{SIGN_WORDS[match.group('sign')]} {words}"
    return fit(match, words)


_PERCENTAGE = re.compile(rf"{NUMBER}\s?%")


def _rewrite_percentage(match: re.Match[str]) -> str:
    return fit(match, f"{signed_number(match)} percent")


_UNIT_PATTERN = "|".join(
    [r"°\s?C", r"°\s?F"] + [re.escape(unit) for unit in sorted(UNITS, key=len, reverse=True)]
)
_NUMBER_WITH_UNIT = re.compile(rf"{NUMBER}\s?(?P<unit>{_UNIT_PATTERN})(?![\w/])")


def _rewrite_number_with_unit(match: re.Match[str]) -> str:
    unit_key = "".join(match.group("unit").split())
    singular, plural = UNITS[unit_key]
    unit = singular if is_exactly_one(match) else plural
    return fit(match, f"{signed_number(match)} {unit}")


# --- rewrites: years, ordinals ------------------------------------------------------

_YEAR_IN_CONTEXT = re.compile(
    rf"\b(?P<cue>(?i:{'|'.join(YEAR_CUE_WORDS)}))\s+(?P<first>{YEAR_NUMBER})"
    rf"(?:(?P<joiner>\s*[-\u2013]\s*|\s+(?:and|or|to)\s+)(?P<second>{YEAR_NUMBER}))?"
    r"(?![\w%]|[.,][0-9])"
)


def _rewrite_year_in_context(match: re.Match[str]) -> str:
    words = f"{match.group('cue')} {year_words(int(match.group('first')))}"
    second = match.group("second")
    if second is not None:
        joiner = match.group("joiner").strip()
        joiner = "to" if joiner in ("-", "\u2013") else joiner
        words = f"{words} {joiner} {year_words(int(second))}"
    return words


_ORDINAL_NUMBER = re.compile(rf"{NUMBER_START}{INTEGER}(?i:st|nd|rd|th)(?!\w)")


def _rewrite_ordinal_number(match: re.Match[str]) -> str:
    return fit(match, ordinal(match.group("int").replace(",", "")))


# --- rewrites: symbols and plain numbers -------------------------------------------


def _fixed(words: str) -> Callable[[re.Match[str]], str]:
    """Replacement that ignores the match; spaces are tidied at the end."""

    def replace(match: re.Match[str]) -> str:
        return f" {words} "

    return replace


_PLUS_BETWEEN_NUMBERS = re.compile(r"(?<=[0-9])\s*\+\s*(?=[0-9])")
_TIMES_BETWEEN_NUMBERS = re.compile(r"(?<=[0-9])\s*\u00d7\s*(?=[0-9])")
_AMPERSAND = re.compile(r"&")
_EQUALS = re.compile(r"=")
_AT_SIGN = re.compile(r"@")

_DOTTED_NUMBER = re.compile(r"(?<![0-9])(?<![0-9][.,])[0-9]+(?:\.[0-9]+){2,}(?![0-9])(?!\.[0-9])")


def _rewrite_dotted_number(match: re.Match[str]) -> str:
    return fit(match, " dot ".join(cardinal(part) for part in match.group(0).split(".")))


_PLAIN_NUMBER = re.compile(NUMBER)


def _rewrite_plain_number(match: re.Match[str]) -> str:
    return fit(match, signed_number(match))


# A comma between digits that no earlier rewrite claimed is not a thousands separator
# (INTEGER takes those: "1,250"): it separates the items of a list ("1,2,3", "1,2345").
_DIGIT_RUN = re.compile(r"(?P<digits>[0-9]+)(?P<list_comma>,(?=[0-9]))?")


def _rewrite_digit_run(match: re.Match[str]) -> str:
    """Last resort for digits no earlier rewrite claimed ("1,2345", "a1.5"). A list's
    comma gets its space ("1,2,3": "one, two, three"), so the phonemiser pauses there
    and a long list can be cut into chunks at its commas."""
    words = cardinal(match.group("digits"))
    return fit(match, f"{words}, " if match.group("list_comma") else words)


class _Rewrite(NamedTuple):
    """One rewrite step; ``needs_digits`` lets plain prose skip the number
    steps, which is most of the work (rewrites only ever remove digits)."""

    pattern: re.Pattern[str]
    replace: Callable[[re.Match[str]], str]
    needs_digits: bool


# Order matters: the most specific forms go first so that, for example, a date
# is claimed before its parts could be read as plain numbers.
_REWRITES: tuple[_Rewrite, ...] = (
    # A comparison reads its sign before the numbers around it are rewritten.
    _Rewrite(context.COMPARISON, context.say_comparison, needs_digits=False),
    _Rewrite(_ISO_DATE, _rewrite_iso_date, needs_digits=True),
    _Rewrite(_NUMERIC_DATE, _rewrite_numeric_date, needs_digits=True),
    _Rewrite(_SLASHED_MONTH_DAY, _rewrite_slashed_month_day, needs_digits=True),
    _Rewrite(_MONTH_DAY_DATE, _rewrite_named_month_date, needs_digits=True),
    _Rewrite(_DAY_MONTH_DATE, _rewrite_named_month_date, needs_digits=True),
    _Rewrite(_MONTH_YEAR_DATE, _rewrite_named_month_date, needs_digits=True),
    _Rewrite(_CLOCK_TIME, _rewrite_clock_time, needs_digits=True),
    _Rewrite(_HOUR_WITH_MERIDIEM, _rewrite_hour_with_meridiem, needs_digits=True),
    _Rewrite(context.TELEPHONE, context.say_telephone, needs_digits=True),
    _Rewrite(context.FRACTION, context.say_fraction, needs_digits=True),
    _Rewrite(context.MULTIPLIER, context.say_multiplier, needs_digits=True),
    _Rewrite(_ERA_YEAR, _rewrite_era_year, needs_digits=True),
    _Rewrite(_DECADE, _rewrite_decade, needs_digits=True),
    _Rewrite(_SHORT_DECADE, _rewrite_short_decade, needs_digits=True),
    _Rewrite(_WEEKDAY, _rewrite_weekday, needs_digits=False),
    _Rewrite(_DOTTED_ABBREVIATION, _rewrite_dotted_abbreviation, needs_digits=False),
    _Rewrite(_LATIN_ABBREVIATION, _rewrite_latin_abbreviation, needs_digits=False),
    _Rewrite(_BARE_ABBREVIATION, _rewrite_bare_abbreviation, needs_digits=False),
    _Rewrite(context.BEFORE_NUMBER_ABBREVIATION, context.say_before_number_abbreviation, needs_digits=True),
    _Rewrite(_NUMBER_SIGN, _rewrite_number_sign, needs_digits=True),
    _Rewrite(_PREFIX_MONEY, _say_money, needs_digits=True),
    _Rewrite(_SUFFIX_MONEY, _say_money, needs_digits=True),
    _Rewrite(_PERCENTAGE, _rewrite_percentage, needs_digits=True),
    _Rewrite(_NUMBER_WITH_UNIT, _rewrite_number_with_unit, needs_digits=True),
    _Rewrite(_YEAR_IN_CONTEXT, _rewrite_year_in_context, needs_digits=True),
    _Rewrite(_ORDINAL_NUMBER, _rewrite_ordinal_number, needs_digits=True),
    _Rewrite(_PLUS_BETWEEN_NUMBERS, _fixed("plus"), needs_digits=True),
    _Rewrite(_TIMES_BETWEEN_NUMBERS, _fixed("times"), needs_digits=True),
    _Rewrite(_AMPERSAND, _fixed("and"), needs_digits=False),
    _Rewrite(_EQUALS, _fixed("equals"), needs_digits=False),
    _Rewrite(_AT_SIGN, _fixed("at"), needs_digits=False),
    _Rewrite(_DOTTED_NUMBER, _rewrite_dotted_number, needs_digits=True),
    _Rewrite(_PLAIN_NUMBER, _rewrite_plain_number, needs_digits=True),
    _Rewrite(_DIGIT_RUN, _rewrite_digit_run, needs_digits=True),
)


def _clean_characters(text: str) -> str:
    """Unify the many Unicode spellings of the same text (full-width digits,
    "℃", non-breaking spaces, curly quotes) so the rewrites see one form."""
    text = text.translate(BEFORE_NFKC)
    text = unicodedata.normalize("NFKC", text)
    return text.translate(AFTER_NFKC)


def normalize_english(text: str) -> str:
    """Rewrite English ``text`` into the words a person would say aloud.

    Numbers, money, percentages, dates, times, units, abbreviations and a few
    symbols become words; sentence punctuation is kept; whitespace is
    collapsed to single spaces and trimmed.  Text with nothing to rewrite
    comes back unchanged apart from that.  Never raises on any ``str``.
    """
    text = _clean_characters(text)
    has_digits = ASCII_DIGIT.search(text) is not None
    for rewrite in _REWRITES:
        if has_digits or not rewrite.needs_digits:
            text = rewrite.pattern.sub(rewrite.replace, text)
    return WHITESPACE.sub(" ", text).strip()
