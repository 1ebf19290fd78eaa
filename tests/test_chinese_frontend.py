"""The Mandarin text front-end (triton_tts/text/chinese.py) and ``triton-tts frontend``.

Every expected string here is written by hand from the rules of reading Chinese aloud
(how numbers, dates, money and units are said; the tone sandhi of 一, 不 and third
tones; which reading a polyphone has in a word), not copied from the code's output.
Pinyin is written with tone numbers, 5 for the neutral tone.
"""

from __future__ import annotations

import os
import random
import subprocess
import sys
from pathlib import Path

import pytest

from triton_tts.cli import main
from triton_tts.contract.voice import Voice
from triton_tts.text.chinese import normalize_chinese, pinyin
from triton_tts.text.frontend import frontend_for, is_chinese
from triton_tts.text.normalize import normalize_english

NORMALISED = [
    # quantities
    ("我有123个苹果", "我有一百二十三个苹果"),
    ("2个人", "两个人"),
    ("2000人", "两千人"),
    ("22个", "二十二个"),
    ("1000000", "一百万"),
    ("1,000元", "一千元"),
    ("共12,345人", "共一万二千三百四十五人"),
    ("全角１２３", "全角一百二十三"),
    # digit strings: phone numbers (1 is 幺), years, IDs
    ("电话13812345678", "电话幺三八幺二三四五六七八"),
    ("13912345678", "幺三九幺二三四五六七八"),
    ("请拨打010-12345678", "请拨打零幺零幺二三四五六七八"),
    ("1998年", "一九九八年"),
    ("10年", "十年"),
    ("2020-2024年", "二零二零到二零二四年"),
    ("编号007", "编号零零七"),
    ("编号12345", "编号一二三四五"),
    # dates and times
    ("2024年3月15日", "二零二四年三月十五日"),
    ("今天是2024-03-15", "今天是二零二四年三月十五日"),
    ("2024/3/5", "二零二四年三月五日"),
    ("03月05日", "三月五日"),
    ("下午3:05开会", "下午三点零五分开会"),
    ("10:00出发", "十点出发"),
    ("14:30", "十四点三十分"),
    ("2:15", "两点十五分"),
    ("12:30:45", "十二点三十分四十五秒"),
    # money
    ("价格是¥12.50", "价格是十二元五角"),
    ("¥3.05", "三元零五分"),
    ("￥100", "一百元"),
    ("¥0.5", "五角"),
    ("¥1,250.50", "一千二百五十元五角"),
    ("共35元", "共三十五元"),
    ("12.5元", "十二点五元"),
    ("花了$20", "花了二十美元"),
    ("$3.50", "三点五美元"),
    # percentages, fractions, decimals, negatives
    ("增长了50%", "增长了百分之五十"),
    ("12.5%", "百分之十二点五"),
    ("10-20%", "百分之十到百分之二十"),
    ("3/4的人", "四分之三的人"),
    ("1.5倍", "一点五倍"),
    ("0.25", "零点二五"),
    # units
    ("温度25℃", "温度二十五摄氏度"),
    ("温度-5℃", "温度负五摄氏度"),
    ("距离5km", "距离五公里"),
    ("我跑了3 km", "我跑了三公里"),
    ("重20kg", "重二十千克"),
    ("面积100m²", "面积一百平方米"),
    ("60km/h", "六十公里每小时"),
    # ranges and ordinals
    ("10-20个", "十到二十个"),
    ("3~5天", "三到五天"),
    ("第3名", "第三名"),
    ("第2个", "第二个"),
    ("第10章", "第十章"),
    # what is already words stays; mixed scripts keep their Latin words
    ("二年级", "二年级"),
    ("我用 iPhone 打电话", "我用iPhone打电话"),
    ("！！！", "！！！"),
]


@pytest.mark.parametrize(("text", "expected"), NORMALISED)
def test_normalization(text: str, expected: str) -> None:
    assert normalize_chinese(text) == expected


PINYIN = [
    # 一: yí before a fourth tone, yì before the others, yī in numbers and ordinals and at a
    # word's end, neutral in "看一看"
    ("一个", "yi2 ge4"),
    ("一样", "yi2 yang4"),
    ("一定", "yi2 ding4"),
    ("一天", "yi4 tian1"),
    ("一年", "yi4 nian2"),
    ("一起", "yi4 qi3"),
    ("一百", "yi4 bai3"),
    ("一万", "yi2 wan4"),
    ("第一", "di4 yi1"),
    ("十一", "shi2 yi1"),
    ("统一", "tong3 yi1"),
    ("看一看", "kan4 yi5 kan4"),
    ("想一想", "xiang3 yi5 xiang3"),
    ("一九九八年", "yi1 jiu2 jiu3 ba1 nian2"),
    ("一点五", "yi1 dian2 wu3"),
    # 不: bú before a fourth tone, bù otherwise, neutral in "A不A"
    ("不是", "bu2 shi4"),
    ("不对", "bu2 dui4"),
    ("不要", "bu2 yao4"),
    ("不好", "bu4 hao3"),
    ("不行", "bu4 xing2"),
    ("不吃", "bu4 chi1"),
    ("好不好", "hao3 bu5 hao3"),
    ("是不是", "shi4 bu5 shi4"),
    # third tones
    ("你好", "ni2 hao3"),
    ("展览馆", "zhan2 lan2 guan3"),
    ("我很好", "wo2 hen2 hao3"),
    ("水果", "shui2 guo3"),
    ("可以", "ke2 yi3"),
    ("老鼠", "lao2 shu3"),
    ("买雨伞", "mai3 yu2 san3"),
    ("两个", "liang3 ge4"),
    # polyphones, read by their word
    ("银行", "yin2 hang2"),
    ("行走", "xing2 zou3"),
    ("银行行长", "yin2 hang2 hang2 zhang3"),
    ("重要", "zhong4 yao4"),
    ("重复", "chong2 fu4"),
    ("长大", "zhang3 da4"),
    ("长度", "chang2 du4"),
    ("音乐", "yin1 yue4"),
    ("快乐", "kuai4 le4"),
    ("睡觉", "shui4 jiao4"),
    ("觉得", "jue2 de5"),
    ("还有", "hai2 you3"),
    ("还钱", "huan2 qian2"),
    ("都是首都", "dou1 shi4 shou3 du1"),
    ("为什么", "wei4 shen2 me5"),
    # mixed scripts: Latin words as written, for the English path
    ("我用iPhone打电话", "wo3 yong4 iPhone da3 dian4 hua4"),
    ("今天OK吗", "jin1 tian1 OK ma5"),
    # full-width punctuation as pauses
    ("你好，世界。", "ni2 hao3 , shi4 jie4 ."),
    ("真的吗？是的！", "zhen1 de5 ma5 ? shi4 de5 !"),
    ("苹果、香蕉；梨：好", "ping2 guo3 , xiang1 jiao1 ; li2 : hao3"),
    ("好……走", "hao3 . zou3"),
    # bad input: nothing to say, or nothing but what can be said
    ("", ""),
    ("。，！？", ""),
    ("😀😀", ""),
    ("你好😀", "ni2 hao3"),
    ("\x00\ufffd", ""),
]


@pytest.mark.parametrize(("text", "expected"), PINYIN)
def test_pinyin(text: str, expected: str) -> None:
    assert " ".join(pinyin(text)) == expected


def test_tone_marks() -> None:
    assert pinyin("你好，一个", marks=True) == ["ní", "hǎo", ",", "yí", "gè"]
    assert pinyin("不对", marks=True) == ["bú", "duì"]


def test_numbers_read_end_to_end() -> None:
    """Normalised, then read: the 两 of a measure word, the 幺 of a phone number."""
    assert pinyin(normalize_chinese("2个")) == ["liang3", "ge4"]
    assert " ".join(pinyin(normalize_chinese("电话110"))) == "dian4 hua4 yao1 yao1 ling2"
    assert " ".join(pinyin(normalize_chinese("第1名"))) == "di4 yi1 ming2"


@pytest.mark.parametrize(
    "text", ["", "   ", "%%%", "-", "$", "¥", "1/0", "99:99", "2024-13-45", "9" * 400, "😀" * 50]
)
def test_never_raises(text: str) -> None:
    pinyin(normalize_chinese(text))


def test_never_raises_on_random_mixtures() -> None:
    """Numbers, signs, units, Chinese, Latin and emoji in random order (seeded): no
    exception, and no digit left unread."""
    rng = random.Random(13)
    alphabet = "0123456789.,-/:%¥$~年月日第个 km²℃一不你好，。😀aZ"
    for _ in range(2000):
        text = "".join(rng.choice(alphabet) for _ in range(rng.randint(0, 25)))
        normalized = normalize_chinese(text)
        assert not any(ch in "0123456789" for ch in normalized), (text, normalized)  # all read
        assert all(pinyin(normalized)), text


def test_impossible_dates_and_times_are_not_read_as_dates() -> None:
    assert "月" not in normalize_chinese("2024-13-45")
    assert "点" not in normalize_chinese("25:61")


@pytest.mark.parametrize(
    ("language", "chinese"),
    [("cmn", True), ("zh", True), ("zh-CN", True), ("zh_TW", True), ("en-us", False), ("de", False)],
)
def test_the_language_chooses_the_front_end(language: str, chinese: bool) -> None:
    assert is_chinese(language) is chinese
    expected = normalize_chinese if chinese else normalize_english
    assert frontend_for(language).normalize is expected


def test_chinese_pronunciation_reads_latin_words_with_english_phonemes() -> None:
    said = frontend_for("zh").pronounce("我用iPhone")
    syllables, english = said.split(" ", 2)[:2], said.split(" ", 2)[2]
    assert syllables == ["wo3", "yong4"]
    assert english.startswith("/") and english.endswith("/") and "f" in english


# --- triton-tts frontend ------------------------------------------------------------------


def _lines(out: str) -> dict[str, str]:
    return {key.strip(): value.strip() for key, value in (line.split(":", 1) for line in out.splitlines())}


def test_cli_chinese(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["frontend", "我有2个苹果，一样好。", "--language", "zh"]) == 0
    shown = _lines(capsys.readouterr().out)
    assert shown["normalised"] == "我有两个苹果，一样好。"
    assert shown["pronunciation"] == "wo2 you3 liang3 ge4 ping2 guo3 , yi2 yang4 hao3 ."


def test_cli_english_voice_folder(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    Voice("tiny", 22050, 256, 192, "en-us", {"_": [0], "^": [1], "$": [2]}).save(tmp_path / "tiny")
    assert main(["frontend", "It costs $3.50.", "--voice", str(tmp_path / "tiny")]) == 0
    shown = _lines(capsys.readouterr().out)
    assert shown["language"] == "en-us"
    assert shown["normalised"] == "It costs three dollars and fifty cents."
    assert "θɹˈiː" in shown["pronunciation"]  # espeak-ng's "three"


def test_cli_shows_what_a_character_voice_is_given(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """A voice's tokens decide its pronunciation line: a character voice gets the text."""
    symbols = {"_": [0], "^": [1], "$": [2]}
    Voice("chars", 22050, 256, 80, "en-us", symbols, tokens="characters").save(tmp_path / "chars")
    assert main(["frontend", "Dr. Smith, 2 cats.", "--voice", str(tmp_path / "chars")]) == 0
    shown = _lines(capsys.readouterr().out)
    assert shown["pronunciation"] == "doctor smith, two cats."


def test_cli_voice_by_name_and_unknown_voice(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("TRITON_TTS_HOME", str(tmp_path))
    Voice("mandarin", 24000, 256, 80, "cmn", {"_": [0], "^": [1], "$": [2]}).save(
        tmp_path / "voices" / "mandarin"
    )
    assert main(["frontend", "你好", "--voice", "mandarin"]) == 0
    assert _lines(capsys.readouterr().out)["pronunciation"] == "ni2 hao3"
    assert main(["frontend", "你好", "--voice", "nobody"]) == 1
    assert "no voice folder nobody" in capsys.readouterr().err


def test_cli_as_a_command() -> None:
    """The real entry point in a process of its own, UTF-8 out whatever the locale."""
    env = {**os.environ, "PYTHONIOENCODING": "utf-8"}
    done = subprocess.run(
        [sys.executable, "-m", "triton_tts.cli", "frontend", "不是1.5倍", "--language", "zh"],
        capture_output=True,
        text=True,
        encoding="utf-8",
        env=env,
        check=False,
        timeout=120,
    )
    assert done.returncode == 0, done.stderr
    shown = _lines(done.stdout)
    assert shown["normalised"] == "不是一点五倍"
    assert shown["pronunciation"] == "bu2 shi4 yi1 dian2 wu3 bei4"


# --- Baker-corpus symbols (pinyin-baker voices) ----------------------------------------------

# A Baker voice's table for the syllables below (voice.json "syllables"; zero initials are "^").
BAKER_SYLLABLES = {
    "jin": ["j", "in"], "tian": ["t", "ian"], "hen": ["h", "en"], "hao": ["h", "ao"],
    "wo": ["^", "uo"], "men": ["m", "en"], "en": ["^", "en"], "hua": ["h", "ua"],
    "er": ["^", "er"], "nv": ["n", "v"], "yi": ["^", "i"], "ge": ["g", "e"], "bu": ["b", "u"],
    "shi": ["sh", "iii"],
}  # fmt: skip


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        # one initial and one toned final per character, #0 between characters
        ("今天", "j in1 #0 t ian1"),
        # third-tone sandhi reaches the symbols: 很好 hén hǎo
        ("很好", "h en2 #0 h ao3"),
        # a comma inside the text is the corpus's phrase break #3, not a #0
        ("我们，很好", "^ uo3 #0 m en5 #3 h en2 #0 h ao3"),
        # 嗯 (pypinyin "n") is "en" in the corpus; pauses at the edges say nothing
        ("，嗯。", "^ en2"),
        # 一 before a fourth tone is yí: 一个 yí gè; 不是 bú shì
        ("一个", "^ i2 #0 g e4"),
        ("不是", "b u2 #0 sh iii4"),
        # 儿 is its own syllable, with its initial-less final: 女儿 nǚ ér
        ("女儿", "n v3 #0 ^ er2"),
        # Latin words and emoji say nothing in a voice trained on Chinese only
        ("OK 很好 🙂", "h en2 #0 h ao3"),
        ("Hello!", ""),
    ],
)
def test_baker_symbols(text: str, expected: str) -> None:
    from triton_tts.text.chinese import baker_symbols

    assert " ".join(baker_symbols(pinyin(normalize_chinese(text)), BAKER_SYLLABLES)) == expected


def test_a_syllable_the_voice_lacks_says_nothing() -> None:
    from triton_tts.text.chinese import baker_symbols

    assert baker_symbols(["xyz1", "hao3"], BAKER_SYLLABLES) == ["h", "ao3"]


def test_given_pinyin_takes_tone_numbers_and_marks() -> None:
    from triton_tts.text.chinese import given_pinyin

    assert given_pinyin("yín háng") == given_pinyin("yin2 hang2") == ["yin2", "hang2"]
    assert given_pinyin("lü4 lv4 lu:4 ma") == ["lv4", "lv4", "lv4", "ma5"]
    assert given_pinyin("kʰæt") is None and given_pinyin("") is None


def test_pinyin_spans_say_where_each_syllable_is_written() -> None:
    from triton_tts.text.chinese import pinyin_spans
    from triton_tts.text.pronounce import mark

    text = "我去" + mark("bei3 jing1") + "了。"
    assert pinyin_spans(text) == [
        ("wo3", 0),
        ("qu4", 1),
        ("bei3", 2),
        ("jing1", 2),
        ("le5", len(text) - 2),
        (".", len(text) - 1),
    ]
