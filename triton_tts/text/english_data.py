"""The English normaliser's tables (triton_tts/text/normalize.py reads them): spoken names
of digits, months, currencies, scales and units, the abbreviations it expands, the cue
words of years, and the characters it removes or unifies before the rewrites. Every
table is immutable (tuples, ``MappingProxyType``): the normaliser runs on many threads.
"""

from __future__ import annotations

from collections.abc import Mapping
from types import MappingProxyType
from typing import NamedTuple

DIGIT_WORDS = (
    "zero",
    "one",
    "two",
    "three",
    "four",
    "five",
    "six",
    "seven",
    "eight",
    "nine",
)

MONTH_NAMES = (
    "January",
    "February",
    "March",
    "April",
    "May",
    "June",
    "July",
    "August",
    "September",
    "October",
    "November",
    "December",
)
DAYS_IN_MONTH = (31, 29, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31)
MONTH_ABBREVIATIONS: Mapping[str, int] = MappingProxyType(
    {
        "Jan": 1,
        "Feb": 2,
        "Mar": 3,
        "Apr": 4,
        "Jun": 6,
        "Jul": 7,
        "Aug": 8,
        "Sep": 9,
        "Sept": 9,
        "Oct": 10,
        "Nov": 11,
        "Dec": 12,
    }
)
MONTH_NUMBERS: Mapping[str, int] = MappingProxyType(
    {
        **{name: index for index, name in enumerate(MONTH_NAMES, start=1)},
        **MONTH_ABBREVIATIONS,
    }
)

SIGN_WORDS: Mapping[str, str] = MappingProxyType({"-": "minus", "+": "plus"})


class Currency(NamedTuple):
    """Spoken names of a currency; ``minor_*`` is None where nobody says the
    subunit (yen), in which case fractions are read with "point"."""

    major_singular: str
    major_plural: str
    minor_singular: str | None
    minor_plural: str | None


CURRENCIES: Mapping[str, Currency] = MappingProxyType(
    {
        "$": Currency("dollar", "dollars", "cent", "cents"),
        "€": Currency("euro", "euros", "cent", "cents"),
        "£": Currency("pound", "pounds", "penny", "pence"),
        "¥": Currency("yen", "yen", None, None),
        "₹": Currency("rupee", "rupees", "paisa", "paise"),
    }
)

SCALE_ABBREVIATIONS: Mapping[str, str] = MappingProxyType(
    {
        "k": "thousand",
        "K": "thousand",
        "m": "million",
        "M": "million",
        "mn": "million",
        "b": "billion",
        "B": "billion",
        "bn": "billion",
        "tn": "trillion",
    }
)

# Unit symbol -> (singular, plural).  Keys are matched case-sensitively
# because "m" (meter) and "M" (mega/million) differ.
UNITS: Mapping[str, tuple[str, str]] = MappingProxyType(
    {
        "km": ("kilometer", "kilometers"),
        "m": ("meter", "meters"),
        "cm": ("centimeter", "centimeters"),
        "mm": ("millimeter", "millimeters"),
        "km2": ("square kilometer", "square kilometers"),
        "m2": ("square meter", "square meters"),
        "cm2": ("square centimeter", "square centimeters"),
        "m3": ("cubic meter", "cubic meters"),
        "mi": ("mile", "miles"),
        "ft": ("foot", "feet"),
        "yd": ("yard", "yards"),
        "kg": ("kilogram", "kilograms"),
        "g": ("gram", "grams"),
        "mg": ("milligram", "milligrams"),
        "lb": ("pound", "pounds"),
        "lbs": ("pound", "pounds"),
        "oz": ("ounce", "ounces"),
        "mph": ("mile per hour", "miles per hour"),
        "km/h": ("kilometer per hour", "kilometers per hour"),
        "kph": ("kilometer per hour", "kilometers per hour"),
        "m/s": ("meter per second", "meters per second"),
        "ml": ("milliliter", "milliliters"),
        "mL": ("milliliter", "milliliters"),
        "l": ("liter", "liters"),
        "L": ("liter", "liters"),
        "KB": ("kilobyte", "kilobytes"),
        "kB": ("kilobyte", "kilobytes"),
        "MB": ("megabyte", "megabytes"),
        "GB": ("gigabyte", "gigabytes"),
        "TB": ("terabyte", "terabytes"),
        "Hz": ("hertz", "hertz"),
        "kHz": ("kilohertz", "kilohertz"),
        "MHz": ("megahertz", "megahertz"),
        "GHz": ("gigahertz", "gigahertz"),
        "W": ("watt", "watts"),
        "kW": ("kilowatt", "kilowatts"),
        "kWh": ("kilowatt hour", "kilowatt hours"),
        "V": ("volt", "volts"),
        "h": ("hour", "hours"),
        "hr": ("hour", "hours"),
        "hrs": ("hour", "hours"),
        "min": ("minute", "minutes"),
        "mins": ("minute", "minutes"),
        "s": ("second", "seconds"),
        "sec": ("second", "seconds"),
        "secs": ("second", "seconds"),
        "ms": ("millisecond", "milliseconds"),
        "yr": ("year", "years"),
        "yrs": ("year", "years"),
        "°C": ("degree Celsius", "degrees Celsius"),
        "°F": ("degree Fahrenheit", "degrees Fahrenheit"),
        "°": ("degree", "degrees"),
    }
)

# Abbreviations that always introduce what follows (titles, "vs."), so their
# period never ends a sentence and is dropped.
LEADING_ABBREVIATIONS: Mapping[str, str] = MappingProxyType(
    {
        "Mr": "Mister",
        "Mrs": "Missus",
        "Ms": "Miz",
        "Prof": "Professor",
        "Mt": "Mount",
        "Capt": "Captain",
        "Lt": "Lieutenant",
        "Col": "Colonel",
        "Gen": "General",
        "Sgt": "Sergeant",
        "Rev": "Reverend",
        "Gov": "Governor",
        "Sen": "Senator",
        "vs": "versus",
        "approx": "approximately",
    }
)

# Abbreviations that may close a sentence; there the period is kept so the
# phonemiser still hears the sentence end.
TRAILING_ABBREVIATIONS: Mapping[str, str] = MappingProxyType(
    {
        "Jr": "Junior",
        "Sr": "Senior",
        "Inc": "Incorporated",
        "Ltd": "Limited",
        "Co": "Company",
        "Corp": "Corporation",
        "Ave": "Avenue",
        "Blvd": "Boulevard",
        "Rd": "Road",
        "Dept": "Department",
        "etc": "et cetera",
        **{abbreviation: MONTH_NAMES[number - 1] for abbreviation, number in MONTH_ABBREVIATIONS.items()},
    }
)

LATIN_ABBREVIATIONS: Mapping[str, str] = MappingProxyType({"eg": "for example", "ie": "that is"})

# Abbreviations expanded only before a number (lower-cased keys; "ext." alone may be a
# file's extension): the number after them is read digit by digit, as in a telephone number.
BEFORE_NUMBER_ABBREVIATIONS: Mapping[str, str] = MappingProxyType({"ext": "extension"})

# Comparison signs, read only in a comparison's shape (before a number, or between words
# with a space on each side), so that markup ("<b>"), arrows ("->", "=>") and shifts ("<<")
# are left alone.
COMPARISONS: Mapping[str, str] = MappingProxyType(
    {
        "<": "less than",
        ">": "greater than",
        "<=": "less than or equal to",
        ">=": "greater than or equal to",
        "\u2264": "less than or equal to",
        "\u2265": "greater than or equal to",
    }
)

# Denominators a reader names as fractions ("3/4", "5/8"; "24/7" and "50/50" are not
# fractions to them). A month/day without a year ("3/15") whose day is one of these is a
# fraction, unless a date cue stands before it.
FRACTION_DENOMINATORS = frozenset({2, 3, 4, 5, 6, 8, 10, 12, 16, 32, 64, 100})

WEEKDAY_ABBREVIATIONS: Mapping[str, str] = MappingProxyType(
    {
        "Mon": "Monday",
        "Tue": "Tuesday",
        "Tues": "Tuesday",
        "Wed": "Wednesday",
        "Thu": "Thursday",
        "Thur": "Thursday",
        "Thurs": "Thursday",
        "Fri": "Friday",
        "Sat": "Saturday",
        "Sun": "Sunday",
    }
)

YEAR_CUE_WORDS = (
    "in",
    "since",
    "by",
    "from",
    "until",
    "till",
    "to",
    "of",
    "during",
    "before",
    "after",
    "around",
    "circa",
    "between",
    "through",
    "year",
)

# Words after which a month/day without a year ("on 1/2", "Mon 12/24") is a date even where
# it could be a fraction; weekdays (WEEKDAY_ABBREVIATIONS, full and abbreviated) count too.
DATE_CUE_WORDS = ("on", "until", "till", "since", "due", "through", "thru", "dated", "expires")

ERA_LETTERS: Mapping[str, str] = MappingProxyType(
    {
        "AD": "A D",
        "BC": "B C",
        "BCE": "B C E",
        "CE": "C E",
        "A.D.": "A D",
        "B.C.": "B C",
        "B.C.E.": "B C E",
        "C.E.": "C E",
    }
)

# --- character clean-up ----------------------------------------------------

# Removed before NFKC: invisible formatting characters (zero-width space and
# joiners, bidi controls, BOM, soft hyphen) and lone surrogates, which would
# make the text unencodable as UTF-8 further down the pipeline.
INVISIBLE_CODEPOINTS = (
    0x00AD,
    0x061C,
    0x180E,
    0xFEFF,
    *range(0x200B, 0x2010),
    *range(0x202A, 0x202F),
    *range(0x2060, 0x2070),
    *range(0xFFF9, 0xFFFC),
    *range(0xD800, 0xE000),
)
CONTROL_CODEPOINTS = (*range(0x00, 0x20), *range(0x7F, 0xA0))
BEFORE_NFKC: Mapping[int, str | None] = MappingProxyType(
    {
        **{codepoint: None for codepoint in INVISIBLE_CODEPOINTS},
        **{codepoint: " " for codepoint in CONTROL_CODEPOINTS},
    }
)
# Applied after NFKC, which leaves typographic quotes and the minus sign alone.
AFTER_NFKC: Mapping[int, str] = MappingProxyType(
    {
        ord(typographic): plain
        for typographic, plain in {
            "\u2018": "'",
            "\u2019": "'",
            "\u201a": "'",
            "\u201b": "'",
            "\u2032": "'",
            "\u201c": '"',
            "\u201d": '"',
            "\u201e": '"',
            "\u201f": '"',
            "\u00ab": '"',
            "\u00bb": '"',
            "\u2212": "-",
        }.items()
    }
)
