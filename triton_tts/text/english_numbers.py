"""English numbers as words, for the normaliser (triton_tts/text/normalize.py).

num2words is only ever called with ``int`` values (its float path stores the precision
on the shared converter object, which would not be thread-safe), through one guarded
helper that falls back to reading the digits one by one; numbers longer than
:data:`MAX_SPOKEN_DIGITS` digits are always read digit by digit (nobody says "ten
duodecillion", and it keeps ``int()`` away from huge strings: Python refuses to convert
over 4,300 digits, and num2words would spend long on them).
"""

from __future__ import annotations

from num2words import num2words  # type: ignore[import-untyped,unused-ignore]

from triton_tts.text.english_data import DIGIT_WORDS

MAX_SPOKEN_DIGITS = 15
"""Longest integer (in digits) spoken as a whole number; longer ones are
read digit by digit, which is also how people read IDs and serial numbers."""


def read_digits(digits: str) -> str:
    """Digit-by-digit reading: the safe fallback for anything too long or odd."""
    return " ".join(DIGIT_WORDS[ord(digit) - ord("0")] for digit in digits)


def spell(value: int, style: str) -> str | None:
    """Ask num2words, hiding its failures: one odd number must not take down a
    request.  Its commas are removed so the phonemiser does not pause inside a
    number."""
    try:
        words = num2words(value, lang="en", to=style)
    except Exception:
        return None
    return str(words).replace(",", "")


def cardinal(digits: str) -> str:
    """Whole number from ASCII digits; leading zeros ("007") and very long runs
    are read digit by digit, as people do."""
    if len(digits) > MAX_SPOKEN_DIGITS or (len(digits) > 1 and digits[0] == "0"):
        return read_digits(digits)
    return spell(int(digits), "cardinal") or read_digits(digits)


def ordinal(digits: str) -> str:
    """Ordinal from ASCII digits; overlong values read their last digit as an
    ordinal so the suffix is still heard."""
    digits = digits.lstrip("0") or "0"
    if len(digits) > MAX_SPOKEN_DIGITS:
        return f"{read_digits(digits[:-1])} {ordinal(digits[-1])}"
    return spell(int(digits), "ordinal") or read_digits(digits)


def year_words(value: int) -> str:
    """Year reading ("nineteen oh five"); num2words hyphenates "oh-five",
    which is written here like the "oh" in clock times."""
    words = spell(value, "year")
    if words is None:
        return cardinal(str(value))
    return words.replace("oh-", "oh ")


def decimal(integer: str, fraction: str | None) -> str:
    """Integer part as a number, fraction digit by digit ("three point one
    four"); thousands separators in ``integer`` are ignored."""
    words = cardinal(integer.replace(",", ""))
    if fraction:
        words = f"{words} point {read_digits(fraction)}"
    return words
