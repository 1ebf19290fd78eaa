"""XTTS v2's text front-end, without torch or coqui-tts: text -> the GPT's text ids.

XTTS was trained on text read by Coqui's multilingual cleaners and a byte-pair tokenizer;
serving must read text the same way, so this module restates that pipeline (its order and
its rules are facts of coqui-tts 0.28, ``TTS/tts/layers/xtts/tokenizer.py``; the tables of
abbreviations and symbols are data in ``cleaners.json``):

1. ``strip().lower()`` (Coqui's ``inference``), then the cleaners: drop ``"``; for Turkish
   İ Ö Ü to i ö ü; lowercase; numbers read out in the language (thousands separators,
   currencies £ $ €, decimals, ordinals, then cardinals, through num2words); abbreviations;
   symbols; whitespace collapsed.
2. Chinese: numbers by this product's Mandarin normaliser (:func:`normalize_chinese`, which
   reads phone numbers, dates and money as people do), punctuation to ",", then pypinyin's
   TONE3 with a 5 for the neutral tone, syllables joined with nothing. Korean: romanised
   (``ko_speech_tools.hangul_romanize``). Japanese: cutlet's romaji, when cutlet is
   installed (it is not a dependency: its dictionary is large); otherwise refused.
3. ``[lang]`` (``[zh-cn]`` for Chinese) before the text, spaces as ``[SPACE]``, and the
   byte-pair tokenizer of the voice's ``vocab.json`` (Hugging Face ``tokenizers``).

A request's text is cut into segments first (:meth:`XttsText.segments`): sentences packed
up to the language's character limit (XTTS's ``char_limits``), a longer sentence cut at
commas, then spaces; a segment's ids must stay under the card's ``max_text_tokens``.
"""

from __future__ import annotations

import contextlib
import json
import re
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any

from num2words import num2words

from triton_tts.contract.validation import UNREADABLE, InvalidRequest
from triton_tts.text.chinese import normalize_chinese
from triton_tts.xtts.card import VOCAB_FILE, XttsCard

TABLES_FILE = Path(__file__).with_name("cleaners.json")
CLEANED = frozenset(
    ["ar", "cs", "de", "en", "es", "fr", "hi", "hu", "it", "nl", "pl", "pt", "ru", "tr", "zh", "ko"]
)
LANGUAGES = CLEANED | {"ja"}
DEFAULT_CHAR_LIMIT = 250

# Ordinal suffixes per language (the number is group 1).
_ORDINALS = {
    "en": r"([0-9]+)(st|nd|rd|th)",
    "es": r"([0-9]+)(º|ª|er|o|a|os|as)",
    "fr": r"([0-9]+)(º|ª|er|re|e|ème)",
    "de": r"([0-9]+)(st|nd|rd|th|º|ª|\.(?=\s|$))",
    "pt": r"([0-9]+)(º|ª|o|a|os|as)",
    "it": r"([0-9]+)(º|°|ª|o|a|i|e)",
    "pl": r"([0-9]+)(º|ª|st|nd|rd|th)",
    "ar": r"([0-9]+)(ون|ين|ث|ر|ى)",
    "cs": r"([0-9]+)\.(?=\s|$)",
    "ru": r"([0-9]+)(-й|-я|-е|-ое|-ье|-го)",
    "nl": r"([0-9]+)(de|ste|e)",
    "tr": r"([0-9]+)(\.|inci|nci|uncu|üncü|\.)",
    "hu": r"([0-9]+)(\.|adik|edik|odik|edik|ödik|ödike|ik)",
    "ko": r"([0-9]+)(번째|번|차|째)",
    "hi": r"([0-9]+)(st|nd|rd|th)",
}
ORDINALS = {lang: re.compile(pattern) for lang, pattern in _ORDINALS.items()}
# Currency: the sign before or after the amount; tried in this order.
CURRENCIES = (("GBP", "£"), ("USD", "$"), ("EUR", "€"))
# What num2words puts between the units and the cents, dropped for whole amounts.
CENTS_JOINER = {"es": " con ", "fr": " et ", "de": " und ", "pt": " e ", "it": " e "}
# Thousands separators: "," in English and Russian, "." (any one character, as XTTS's
# cleaner matches it) elsewhere.
COMMA_GROUPS = re.compile(r"\b\d{1,3}(,\d{3})*(\.\d+)?\b")
DOT_GROUPS = re.compile(r"\b\d{1,3}(.\d{3})*(\,\d+)?\b")
DECIMAL = re.compile(r"([0-9]+[.,][0-9]+)")
NUMBER = re.compile(r"[0-9]+")
WHITESPACE = re.compile(r"\s+")
# Chinese punctuation (Zhon's lists) and ASCII punctuation, all read as "," before pinyin.
CHINESE_PUNCTUATION = (
    "！？｡。＂＃＄％＆＇（）＊＋，－／：；＜＝＞＠［＼］＾＿｀｛｜｝～｟｠｢｣､、〃《》「」『』【】〔〕〖〗〘〙〚〛"
    "〜〝〞〟〰〾〿–—‘’‛“”„‟…‧﹏·〈〉-"
    "!\"#$%&'()*+,-./:;<=>?@[\\]^_`{|}~"
)
TO_COMMA = str.maketrans(CHINESE_PUNCTUATION, "," * len(CHINESE_PUNCTUATION))
SENTENCE_END = re.compile(r"(?<=[.!?。！？；;…])\s*")
SPACE_TOKEN = "[SPACE]"  # noqa: S105 (a token of the vocabulary)


def text_refused(message: str) -> InvalidRequest:
    """Text or a language the voice cannot read."""
    return InvalidRequest(message, UNREADABLE)


def _currency(text: str, lang: str, code: str, sign: str) -> str:
    s = re.escape(sign)
    pattern = re.compile(rf"(({s}[0-9\.\,]*[0-9]+)|([0-9\.\,]*[0-9]+{s}))")

    def spoken(match: re.Match[str]) -> str:
        amount = float(re.sub(r"[^\d.]", "", match.group(0).replace(",", ".")))
        words = str(num2words(amount, to="currency", currency=code, lang=lang))
        if amount.is_integer():
            cut = words.rfind(CENTS_JOINER.get(lang, ", "))
            if cut != -1:
                words = words[:cut]
        return words

    return pattern.sub(spoken, text)


def read_numbers(text: str, lang: str) -> str:
    """Numbers as words in ``lang`` (not Chinese), in XTTS's order."""
    if lang in ("en", "ru"):
        text = COMMA_GROUPS.sub(lambda m: m.group(0).replace(",", ""), text)
    else:
        text = DOT_GROUPS.sub(lambda m: m.group(0).replace(".", ""), text)
    # A language num2words has no currency for keeps the rest of its signs as they are.
    with contextlib.suppress(Exception):
        for code, sign in CURRENCIES:
            text = _currency(text, lang, code, sign)
    if lang != "tr":
        text = DECIMAL.sub(_words(lambda m: num2words(float(m.group(1).replace(",", ".")), lang=lang)), text)
    text = ORDINALS[lang].sub(_words(lambda m: num2words(int(m.group(1)), ordinal=True, lang=lang)), text)
    return NUMBER.sub(_words(lambda m: num2words(int(m.group(0)), lang=lang)), text)


def _words(say: Callable[[re.Match[str]], Any]) -> Callable[[re.Match[str]], str]:
    """A number's words, or the match as it was where num2words cannot say it in the
    language (Czech ordinals, say; where Coqui's cleaner raises): a later rule, or the
    cardinal reading, takes it."""

    def spoken(match: re.Match[str]) -> str:
        try:
            return str(say(match))
        except (NotImplementedError, ValueError, OverflowError, ArithmeticError):
            return match.group(0)

    return spoken


@cache
def _tables() -> dict[str, list[tuple[re.Pattern[str], str]]]:
    data = json.loads(TABLES_FILE.read_text(encoding="utf-8"))
    rules: dict[str, list[tuple[re.Pattern[str], str]]] = {}
    for lang, words in data["abbreviations"].items():
        rules[f"abbreviations:{lang}"] = [
            (
                re.compile(
                    rf"\b{re.escape(word[:-1])}\." if word.endswith(".") else rf"\b{re.escape(word)}\b", re.I
                ),
                spoken,
            )
            for word, spoken in words.items()
        ]
    for lang, symbols in data["symbols"].items():
        rules[f"symbols:{lang}"] = [
            (re.compile(re.escape(sign), re.I), spoken) for sign, spoken in symbols.items()
        ]
    return rules


def clean(text: str, lang: str) -> str:
    """XTTS's multilingual cleaners for one of :data:`CLEANED`."""
    text = text.replace('"', "")
    if lang == "tr":
        text = text.replace("İ", "i").replace("Ö", "ö").replace("Ü", "ü")
    text = text.lower()
    text = _chinese_numbers(text) if lang == "zh" else read_numbers(text, lang)
    rules = _tables()
    for pattern, spoken in rules[f"abbreviations:{lang}"]:
        text = pattern.sub(spoken, text)
    for pattern, spoken in rules[f"symbols:{lang}"]:
        text = pattern.sub(spoken, text).replace("  ", " ")
    return WHITESPACE.sub(" ", text.strip())


def _chinese_numbers(text: str) -> str:
    return normalize_chinese(text).translate(TO_COMMA)


def chinese_pinyin(text: str) -> str:
    import pypinyin

    syllables = pypinyin.pinyin(
        text, style=pypinyin.Style.TONE3, heteronym=False, neutral_tone_with_five=True
    )
    return "".join(s[0] for s in syllables)


@cache
def _japanese_reader() -> Callable[[str], str]:
    try:
        import cutlet
    except ImportError as err:
        raise text_refused(
            "LANGUAGE ja: Japanese needs cutlet (pip install cutlet unidic-lite), which is not installed"
        ) from err
    reader: Any = cutlet.Cutlet()
    return lambda text: str(reader.romaji(text)).lower()


def base_language(language: str) -> str:
    """ "zh-cn" -> "zh", "EN" -> "en"."""
    return language.strip().lower().split("-")[0]


def transliterate(text: str, lang: str) -> str:
    """The cleaned text the tokenizer reads (no language tag yet)."""
    if lang not in LANGUAGES:
        raise text_refused(f"LANGUAGE {lang!r}: XTTS does not read this language")
    if lang == "ja":
        return _japanese_reader()(text)
    text = clean(text, lang)
    if lang == "zh":
        return chinese_pinyin(text)
    if lang == "ko":
        from ko_speech_tools import hangul_romanize

        return str(hangul_romanize(text))
    return text


class XttsText:
    """A voice's text front-end: languages, segments and ids."""

    def __init__(self, folder: Path, card: XttsCard | None = None):
        from tokenizers import Tokenizer

        self.card = card or XttsCard.load(folder)
        self.tokenizer = Tokenizer.from_file(str(Path(folder) / VOCAB_FILE))

    def language(self, language: str) -> str:
        """The base language of a request's LANGUAGE, or a refusal naming the voice's."""
        lang = base_language(language)
        served = {base_language(code) for code in self.card.languages}
        if lang not in served or lang not in LANGUAGES:
            raise text_refused(
                f"LANGUAGE {language!r}: this voice reads {', '.join(sorted(self.card.languages))}"
            )
        return lang

    def char_limit(self, lang: str) -> int:
        return int(self.card.char_limits.get(lang, DEFAULT_CHAR_LIMIT))

    def encode(self, text: str, language: str) -> list[int]:
        """One segment's text ids (as Coqui's ``VoiceBpeTokenizer.encode`` after its
        ``inference`` strips and lowercases)."""
        lang = self.language(language)
        spoken = transliterate(text.strip().lower(), lang)
        tag = "zh-cn" if lang == "zh" else lang
        ids: list[int] = self.tokenizer.encode(f"[{tag}]{spoken}".replace(" ", SPACE_TOKEN)).ids
        return ids

    def segments(self, text: str, language: str) -> list[str]:
        """The text in pieces of at most the language's character limit: whole sentences
        where they fit, a longer sentence cut at a comma, then at a space, then anywhere."""
        lang = self.language(language)
        limit = self.char_limit(lang)
        joiner = "" if lang in ("zh", "ja") else " "  # no spaces between Chinese sentences
        pieces: list[str] = []
        for sentence in (s.strip() for s in SENTENCE_END.split(text)):
            if sentence:
                pieces.extend(_cut(sentence, limit))
        segments: list[str] = []
        for piece in pieces:
            joined = f"{segments[-1]}{joiner}{piece}" if segments else piece
            if segments and len(joined) <= limit:
                segments[-1] = joined
            else:
                segments.append(piece)
        return segments

    def read(self, text: str, language: str) -> list[list[int]]:
        """Every segment's ids; a segment the GPT cannot take whole is refused."""
        out = []
        for segment in self.segments(text, language):
            ids = self.encode(segment, language)
            if len(ids) >= self.card.max_text_tokens:
                most = self.card.max_text_tokens
                raise text_refused(
                    f"TEXT {segment[:40]!r}... reads as {len(ids)} text tokens; XTTS takes fewer than {most}"
                )
            if len(ids) > 1:  # more than the language tag
                out.append(ids)
        if not out:
            raise text_refused("TEXT: the text has nothing to say")
        return out


def _cut(sentence: str, limit: int) -> list[str]:
    if len(sentence) <= limit:
        return [sentence]
    for separator in (",", "，", "、", " "):
        at = sentence.rfind(separator, 1, limit)
        if at > 0:
            head = sentence[: at + 1].strip() if separator != " " else sentence[:at].strip()
            return [head, *_cut(sentence[at + 1 :].strip(), limit)]
    return [sentence[:limit], *_cut(sentence[limit:], limit)]
