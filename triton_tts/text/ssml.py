"""SSML in: a documented subset of SSML 1.1, read into what the long-text models say.

A text is SSML when TEXT_FORMAT says "ssml", or (TEXT_FORMAT absent or "auto") when it
starts with ``<speak`` (or an XML declaration, or a DOCTYPE of speak) after white
space. It is parsed with defusedxml (no DOCTYPE, no entities, no external references:
an XML bomb or an external entity is refused before anything is expanded) and read into
:class:`Segment` s: runs of text said with one rate and volume, each followed by the
silence its breaks ask for. The elements:

* ``speak`` (the root; ``xml:lang`` and ``version`` are not checked), ``p``, ``s``: a
  sentence or paragraph ends with the element (a period is added if none ends it); a
  paragraph is followed by a ``strong`` break.
* ``break``: ``time`` ("500ms", "1.5s", at most 10 s) or ``strength`` (none 0, x-weak
  0.1, weak 0.25, medium 0.4, strong 0.65, x-strong 1.0 seconds; medium without either).
  Breaks are exact silence: zeros after the audio before them, and word timestamps count
  them.
* ``prosody``: ``rate`` (x-slow, slow, medium, fast, x-fast, "N%", or a number: a factor of
  the request's SPEED; the product must stay within SPEED's range) and ``volume``
  (silent, x-soft, soft, medium, loud, x-loud, "+N dB"/"-N dB": a gain on the samples).
  ``pitch`` and ``contour`` are checked and not applied: VITS voices cannot set a pitch.
* ``say-as`` ``interpret-as``: characters / spell-out / verbatim (letter by letter),
  cardinal, ordinal, digits, telephone, date (``format`` mdy, dmy, ymd, md, dm, my, ym, y),
  time, currency, fraction. English voices read each as written here; others read the
  content through their normaliser.
* ``sub`` ``alias``: the alias is said; the word timestamps name the element's text.
* ``phoneme`` ``ph``: the phonemes are said instead of the word; ``alphabet="ipa"`` for
  espeak-ng voices (each symbol must be one of the voice's phonemes), ``"x-pinyin"`` for
  Mandarin ones ("yin2 hang2" or "yín háng", each a syllable of the voice); without
  ``alphabet``, the voice's own.
* ``emphasis``, ``lang``, ``mark``: their text is spoken as it is (``mark`` is empty).

Anything else (``audio``, ``voice``, unknown elements or attributes' values)
is refused: :class:`triton_tts.contract.validation.InvalidRequest`, naming the element and its line
and column; so is an element nested deeper than :data:`MAX_DEPTH`, while it is parsed.
The silence a document asks for in all is bounded where its audio is
(:func:`triton_tts.runtime.limits.check_audio`).
"""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from dataclasses import dataclass, field

from defusedxml import DefusedXmlException
from defusedxml.ElementTree import DefusedXMLParser, ParseError

from triton_tts.contract.validation import MAX_BREAK_S, MAX_SPEED, MIN_SPEED, InvalidRequest
from triton_tts.text.english_context import FRACTION, TELEPHONE, say_fraction, say_telephone
from triton_tts.text.english_data import DIGIT_WORDS
from triton_tts.text.english_numbers import cardinal, ordinal, read_digits, year_words
from triton_tts.text.pronounce import mark

SSML_NAMESPACE = "http://www.w3.org/2001/10/synthesis"
# TEXT_FORMAT auto: a text that starts so (after white space) is SSML
SSML_STARTS = ("<speak", "<?xml", "<!DOCTYPE speak")
# Elements inside one another, <speak> counted: a real document nests speak > p > s >
# prosody > emphasis > say-as, six. Refused as the parser reaches it, so the reader's
# recursion (two frames a level) stays far from Python's limit whatever the text.
MAX_DEPTH = 32
BREAK_STRENGTHS = {"none": 0.0, "x-weak": 0.1, "weak": 0.25, "medium": 0.4, "strong": 0.65, "x-strong": 1.0}
PARAGRAPH_BREAK_S = BREAK_STRENGTHS["strong"]
RATES = {"x-slow": 0.5, "slow": 0.75, "medium": 1.0, "fast": 1.25, "x-fast": 1.75, "default": 1.0}
VOLUMES_DB = {"silent": None, "x-soft": -12.0, "soft": -6.0, "medium": 0.0, "loud": 6.0, "x-loud": 12.0}
VOLUMES_DB["default"] = 0.0
MAX_GAIN_DB = 12.0
SAY_AS = (
    "characters",
    "spell-out",
    "verbatim",
    "cardinal",
    "ordinal",
    "digits",
    "telephone",
    "date",
    "time",
    "currency",
    "fraction",
)
DATE_FORMATS = ("mdy", "dmy", "ymd", "md", "dm", "my", "ym", "y")
SPOKEN_AS_IS = ("emphasis", "lang", "mark")
SENTENCE_END = re.compile(r"[.!?…。！？][\"')\]»”’]*\s*$")

_NAMES = (
    "ay bee see dee ee eff jee aitch eye jay kay el em en oh pee cue ar ess tee you vee double-you ex why zee"
)
LETTER_NAMES = dict(zip("abcdefghijklmnopqrstuvwxyz", _NAMES.split(" "), strict=True))
SYMBOL_NAMES = {
    "-": "dash",
    ".": "dot",
    "@": "at",
    "/": "slash",
    "_": "underscore",
    "#": "hash",
    "+": "plus",
    "&": "and",
    ":": "colon",
    "*": "star",
    "%": "percent",
    "$": "dollar",
    "=": "equals",
}


def is_ssml(text: str, text_format: str = "auto") -> bool:
    """Whether ``text`` is read as SSML under TEXT_FORMAT ``text_format`` (checked already)."""
    if text_format == "auto":
        return text.lstrip().startswith(SSML_STARTS)
    return text_format == "ssml"


@dataclass
class Segment:
    """Text said at one ``rate`` (a factor of SPEED) and ``gain_db``; ``said``: what the voice
    reads (normalised already, or say-as readings); ``written``: the words as written (for
    timestamps); then ``pause_s`` of silence."""

    said: list[str] = field(default_factory=list)
    written: list[str] = field(default_factory=list)
    rate: float = 1.0
    gain_db: float | None = 0.0  # None: silent
    pause_s: float = 0.0

    @property
    def text(self) -> str:
        """The said parts joined: a space between them, none before punctuation."""
        out = ""
        for part in (p.strip() for p in self.said):
            if part:
                out = f"{out}{part}" if not out or part[0] in ".,;:!?" else f"{out} {part}"
        return out


@dataclass
class Document:
    """The segments in reading order, and the silence before the first."""

    segments: list[Segment]
    lead_s: float = 0.0

    @property
    def written(self) -> str:
        """The text as written (its elements' text, as it stands between the tags)."""
        return " ".join("".join(s.written) for s in self.segments)


class TooDeep(InvalidRequest):
    """An element nested past :data:`MAX_DEPTH` (raised by the parser's target)."""


class _Positions(ET.TreeBuilder):
    """A tree builder that notes each element's line and column, and refuses an element
    nested past :data:`MAX_DEPTH` before the tree holds it."""

    def __init__(self) -> None:
        super().__init__()
        self.parser: DefusedXMLParser | None = None
        self.at: dict[int, tuple[int, int]] = {}
        self.depth = 0

    def start(self, tag: str, attrs: dict[str, str]) -> ET.Element:
        expat = getattr(self.parser, "parser", None)
        where = (expat.CurrentLineNumber, expat.CurrentColumnNumber + 1) if expat is not None else (0, 0)
        self.depth += 1
        if self.depth > MAX_DEPTH:
            name = tag.rpartition("}")[2]
            raise TooDeep(
                f"SSML <{name}> at line {where[0]}, column {where[1]}: nested {self.depth} elements "
                f"deep, the limit is {MAX_DEPTH}"
            )
        element = super().start(tag, attrs)
        self.at[id(element)] = where
        return element

    def end(self, tag: str) -> ET.Element:
        self.depth -= 1
        return super().end(tag)


def parse(text: str) -> tuple[ET.Element, dict[int, tuple[int, int]]]:
    """The document's root and its elements' (line, column); InvalidRequest when it is
    not well-formed XML or uses a DOCTYPE, entities or external references."""
    builder = _Positions()
    parser = DefusedXMLParser(target=builder, forbid_dtd=True, forbid_entities=True, forbid_external=True)
    builder.parser = parser
    try:
        parser.feed(text)
        root = parser.close()
    except TooDeep:
        raise
    except ParseError as err:
        line, column = err.position
        reason = str(err).split(":")[0]
        raise InvalidRequest(  # TEXT named: the input a caller must mend (tests/test_every_input.py)
            f"TEXT: SSML is not well-formed XML: {reason} at line {line}, column {column + 1}"
        ) from None
    except DefusedXmlException as err:
        raise InvalidRequest(
            f"SSML may not use a DOCTYPE, entities or external references ({type(err).__name__})"
        ) from None
    return root, builder.at


def _name(element: ET.Element) -> str:
    tag = element.tag
    if tag.startswith("{"):
        namespace, _, local = tag[1:].partition("}")
        if namespace != SSML_NAMESPACE:
            return tag
        return local
    return tag


def seconds(value: str) -> float | None:
    """An SSML time designation ("250ms", "1.5s") in seconds; None if it is not one."""
    match = re.fullmatch(r"\s*(\d+(?:\.\d+)?|\.\d+)\s*(ms|s)\s*", value)
    if match is None:
        return None
    number = float(match.group(1))
    return number / 1000 if match.group(2) == "ms" else number


def spelled(text: str) -> str:
    """Letter by letter: letters by name, digits as words, common symbols named."""
    out = []
    for char in text:
        lower = char.lower()
        if lower in LETTER_NAMES:
            out.append(LETTER_NAMES[lower])
        elif char.isdigit() and char.isascii():
            out.append(DIGIT_WORDS[int(char)])
        elif char in SYMBOL_NAMES:
            out.append(SYMBOL_NAMES[char])
        elif char.isalnum():
            out.append(char)
    return " ".join(out)


class Reader:
    """Reads one SSML document for a voice: ``normalize`` is its language's normaliser,
    ``english`` whether say-as reads English words here, ``alphabet`` the phonemes it
    takes ("ipa", "x-pinyin"; "": none)."""

    def __init__(
        self, normalize: Callable[[str], str], english: bool, speed: float = 1.0, alphabet: str = "ipa"
    ) -> None:
        self.normalize, self.english, self.speed = normalize, english, speed
        self.alphabet = alphabet
        self.positions: dict[int, tuple[int, int]] = {}
        self.segments: list[Segment] = []
        self.lead_s = 0.0

    def read(self, text: str) -> Document:
        root, self.positions = parse(text)
        if _name(root) != "speak":
            raise self.refused(root, f"the root element must be <speak>, not <{_name(root)}>")
        self._children(root, rate=1.0, gain_db=0.0)
        segments = [s for s in self.segments if s.text or s.pause_s]
        return Document(segments, self.lead_s)

    def where(self, element: ET.Element) -> str:
        line, column = self.positions.get(id(element), (0, 0))
        return f"<{_name(element)}> at line {line}, column {column}"

    def refused(self, element: ET.Element, why: str) -> InvalidRequest:
        return InvalidRequest(f"SSML {self.where(element)}: {why}")

    # -- building segments ------------------------------------------------------------

    def _current(self, rate: float, gain_db: float | None) -> Segment:
        if (
            not self.segments
            or self.segments[-1].pause_s
            or ((self.segments[-1].rate, self.segments[-1].gain_db) != (rate, gain_db))
        ):
            self.segments.append(Segment(rate=rate, gain_db=gain_db))
        return self.segments[-1]

    def _say(self, said: str, written: str, rate: float, gain_db: float | None) -> None:
        if not said.strip() and not written.strip():
            return
        segment = self._current(rate, gain_db)
        segment.said.append(said)
        segment.written.append(written)

    def _text(self, text: str | None, rate: float, gain_db: float | None) -> None:
        if text and text.strip():
            self._say(self.normalize(text), text, rate, gain_db)

    def _pause(self, seconds_: float) -> None:
        if not self.segments:
            self.lead_s += seconds_
        else:
            self.segments[-1].pause_s += seconds_

    def _end_sentence(self) -> None:
        if not self.segments or not self.segments[-1].said:
            return
        # The segment's text ends with its last part (Segment.text joins them): asked of
        # that part alone, a document of thousands of <s> is read in linear time.
        last = next((p.strip() for p in reversed(self.segments[-1].said) if p.strip()), "")
        if not SENTENCE_END.search(last):
            self.segments[-1].said.append(".")
        self.segments[-1].written.append(" ")  # <s>One</s><s>Two</s>: two words

    def _children(self, element: ET.Element, rate: float, gain_db: float | None) -> None:
        self._text(element.text, rate, gain_db)
        for child in element:
            self._element(child, rate, gain_db)
            self._text(child.tail, rate, gain_db)

    def _element(self, element: ET.Element, rate: float, gain_db: float | None) -> None:
        name = _name(element)
        if name in ("p", "s"):
            self._end_sentence()
            self._children(element, rate, gain_db)
            self._end_sentence()
            if name == "p":
                self._pause(PARAGRAPH_BREAK_S)
        elif name == "break":
            self._break(element)
        elif name == "prosody":
            self._children(element, self._rate(element, rate), self._volume(element, gain_db))
        elif name == "say-as":
            self._say_as(element, rate, gain_db)
        elif name == "sub":
            alias = element.get("alias")
            if alias is None or not alias.strip():
                raise self.refused(element, "needs an alias (the text to say)")
            self._say(self.normalize(alias), "".join(element.itertext()), rate, gain_db)
        elif name in SPOKEN_AS_IS:
            self._children(element, rate, gain_db)
        elif name == "phoneme":
            self._phoneme(element, rate, gain_db)
        else:
            known = "speak, p, s, break, prosody, say-as, sub, emphasis, lang, mark"
            raise self.refused(element, f"is not supported; the elements read here: {known}")

    def _phoneme(self, element: ET.Element, rate: float, gain_db: float | None) -> None:
        alphabet, ph = element.get("alphabet", self.alphabet or "ipa"), element.get("ph")
        if alphabet not in ("ipa", "x-pinyin"):
            raise self.refused(
                element, f"alphabet {alphabet!r}: 'ipa' (espeak-ng voices) or 'x-pinyin' (Mandarin)"
            )
        if alphabet != self.alphabet:
            takes = f"takes {self.alphabet!r}" if self.alphabet else "takes no phonemes (it reads letters)"
            raise self.refused(element, f"alphabet {alphabet!r}: this voice {takes}")
        if ph is None or not ph.strip():
            raise self.refused(element, "needs ph, the phonemes to say")
        if len(element):
            raise self.refused(element, "may hold only text")
        written = (element.text or "").strip() or ph
        self._say(mark(ph), written, rate, gain_db)

    def _break(self, element: ET.Element) -> None:
        time_, strength = element.get("time"), element.get("strength")
        if len(element) or (element.text or "").strip():
            raise self.refused(element, "must be empty")
        if time_ is not None:
            value = seconds(time_)
            if value is None:
                raise self.refused(element, f"time {time_!r} is not a time such as '500ms' or '1.5s'")
            if value > MAX_BREAK_S:
                raise self.refused(element, f"time {time_!r} is over {MAX_BREAK_S:g} s")
            self._pause(value)
        elif strength is not None:
            if strength not in BREAK_STRENGTHS:
                raise self.refused(element, f"strength {strength!r}: use one of {', '.join(BREAK_STRENGTHS)}")
            self._pause(BREAK_STRENGTHS[strength])
        else:
            self._pause(BREAK_STRENGTHS["medium"])

    def _rate(self, element: ET.Element, rate: float) -> float:
        value = element.get("rate")
        for attribute in ("pitch", "contour", "range"):  # checked, not applied (see the module)
            if (given := element.get(attribute)) is not None and not given.strip():
                raise self.refused(element, f"{attribute} is empty")
        if value is None:
            return rate
        if value in RATES:
            factor = RATES[value]
        elif match := re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*%\s*", value):
            factor = float(match.group(1)) / 100
        elif match := re.fullmatch(r"\s*(\d+(?:\.\d+)?)\s*", value):
            factor = float(match.group(1))
        else:
            raise self.refused(
                element,
                f"rate {value!r}: use {', '.join(k for k in RATES if k != 'default')}, 'N%' or a number",
            )
        combined = rate * factor
        if not MIN_SPEED <= combined * self.speed <= MAX_SPEED:
            raise self.refused(
                element,
                f"rate {value!r} makes the speed {combined * self.speed:g}, outside "
                f"[{MIN_SPEED:g}, {MAX_SPEED:g}]",
            )
        return combined

    def _volume(self, element: ET.Element, gain_db: float | None) -> float | None:
        value = element.get("volume")
        if value is None:
            return gain_db
        if value in VOLUMES_DB:
            change = VOLUMES_DB[value]
        elif match := re.fullmatch(r"\s*([+-]?\d+(?:\.\d+)?)\s*dB\s*", value):
            change = float(match.group(1))
        else:
            raise self.refused(element, f"volume {value!r}: use {', '.join(VOLUMES_DB)} or '+NdB'/'-NdB'")
        if change is None or gain_db is None:
            return None
        combined = gain_db + change
        if combined > MAX_GAIN_DB:
            raise self.refused(element, f"volume {value!r} is over +{MAX_GAIN_DB:g} dB in all")
        return combined

    def _say_as(self, element: ET.Element, rate: float, gain_db: float | None) -> None:
        kind = element.get("interpret-as")
        if kind not in SAY_AS:
            raise self.refused(element, f"interpret-as {kind!r}: use one of {', '.join(SAY_AS)}")
        if len(element):
            raise self.refused(element, "may hold only text")
        content = (element.text or "").strip()
        if not content:
            raise self.refused(element, "is empty")
        said = self._interpret(element, kind, content)
        self._say(said, content, rate, gain_db)

    def _interpret(self, element: ET.Element, kind: str, content: str) -> str:
        if kind in ("characters", "spell-out", "verbatim"):
            return spelled(content) if self.english else " ".join(c for c in content if not c.isspace())
        if not self.english:
            return self.normalize(content)
        bare = content.replace(",", "")
        if kind == "cardinal":
            if not re.fullmatch(r"-?\d+", bare):
                raise self.refused(element, f"{content!r} is not a whole number")
            words = cardinal(bare.lstrip("-").lstrip("0") or "0")
            return f"minus {words}" if bare.startswith("-") else words
        if kind == "ordinal":
            digits = re.fullmatch(r"(\d+)(?:st|nd|rd|th)?", bare)
            if digits is None:
                raise self.refused(element, f"{content!r} is not an ordinal number")
            return ordinal(digits.group(1))
        if kind == "digits":
            if not re.fullmatch(r"[\d\s.-]+", content) or not any(c.isdigit() for c in content):
                raise self.refused(element, f"{content!r} is not a run of digits")
            return read_digits("".join(c for c in content if c.isdigit()))
        if kind == "telephone":
            match = TELEPHONE.fullmatch(content)
            if match is not None:
                return say_telephone(match)
            groups = re.findall(r"\d+", content)
            if not groups or re.sub(r"[\d\s().+-]", "", content):
                raise self.refused(element, f"{content!r} is not a telephone number")
            words = ", ".join(read_digits(group) for group in groups)
            return f"plus {words}" if content.startswith("+") else words
        if kind == "date":
            return self._date(element, content)
        if kind == "fraction":
            match = FRACTION.fullmatch(content)
            said = say_fraction(match) if match is not None else content
            if said == content:
                parts = re.fullmatch(r"(\d+)/(\d+)", content)
                if parts is None:
                    raise self.refused(element, f"{content!r} is not a fraction such as 3/4")
                return f"{cardinal(parts.group(1))} over {cardinal(parts.group(2))}"
            return said
        # time, currency: the normaliser's own readings of what is written
        said = self.normalize(content)
        if said.strip() == content:
            raise self.refused(element, f"{content!r} is not read as a {kind}")
        return said

    def _date(self, element: ET.Element, content: str) -> str:
        from triton_tts.text.normalize import say_date

        form = element.get("format", "mdy")
        if form not in DATE_FORMATS:
            raise self.refused(element, f"format {form!r}: use one of {', '.join(DATE_FORMATS)}")
        parts = re.findall(r"\d+", content)
        if len(parts) != len(form) or re.sub(r"[\d\s./-]", "", content):
            raise self.refused(element, f"{content!r} does not match the date format {form!r}")
        values = dict(zip(form, (int(p) for p in parts), strict=True))
        if form == "y":
            return year_words(values["y"])
        words = say_date(values["m"], values.get("d"), values.get("y"), day_first=form.startswith("d"))
        if words is None:
            raise self.refused(element, f"{content!r} is not a date in the format {form!r}")
        return words


def read(
    text: str, normalize: Callable[[str], str], english: bool, speed: float = 1.0, alphabet: str = "ipa"
) -> Document:
    """An SSML document -> its segments (InvalidRequest naming what is wrong and where)."""
    document = Reader(normalize, english, speed, alphabet).read(text)
    if not any(s.text for s in document.segments):
        raise InvalidRequest("SSML: the document has nothing to say")
    return document
