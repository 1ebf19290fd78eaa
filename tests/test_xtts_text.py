"""XTTS's text front-end without torch (triton_tts.xtts.text) against Coqui's own
``VoiceBpeTokenizer.encode`` (after the ``strip().lower()`` of Coqui's ``inference``), on
the byte-pair vocabulary of a locally built XTTS checkpoint: texts with numbers, money,
ordinals, abbreviations and symbols in every language both read, generated ones too, and
the segmenting of long text by the language's character limit.

Chinese differs by design where numbers are concerned (this product's Mandarin normaliser
reads phone numbers, dates and money as people say them; Coqui's reads long numbers digit
by digit), so Chinese is compared on text without digits, and its numbers are checked to
be read as Chinese numerals before pinyin.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from testkit.xtts_checkpoints import build_vocab
from triton_tts.contract.validation import UNREADABLE, InvalidRequest
from triton_tts.xtts.card import VOCAB_FILE, XttsCard
from triton_tts.xtts.text import XttsText

pytestmark = pytest.mark.export

TEXTS = {
    "en": [
        "Mr. Smith paid $1,250.50 for 3 tickets on the 21st of May & left at 9.",
        'Dr. Jones said: "It\'s 45% off", at 7:30 with 2 kids.',
        "Gen. Lee won £12 and €3, #1 in 2024 — 10° colder.",
    ],
    "es": ["El Sr. García pagó 1.500 euros el 3º día, 25% más.", "Tengo 21 años y 3,5 hijos."],
    "fr": ["M. Dupont a 2 chats et 1er prix à 15 € le 3e jour.", "Il fait 12,5° à Paris & Lyon."],
    "de": ["Dr. Müller hat 3 Hunde, 1.200 Katzen und 5 % Rabatt am 2. Mai.", "Es kostet 4,50 €."],
    "it": ["Il sig. Rossi ha 2 gatti e 1.000 euro, il 3º giorno.", "Costa 7,5 € & più."],
    "pt": ["O Sr. Silva tem 22 anos e R$ 1.000, o 1º lugar.", "São 3 gatos e 50% a mais."],
    "pl": ["Mam 3 koty i 1.250 złotych, 2 gen. tutaj.", "To kosztuje 5,5 € & 10%."],
    "ru": ["У меня 3 кошки и 1,250 рублей, г-н Иванов пришёл.", "Это 5-й раз, 10% скидка."],
    "nl": ["Ik heb 3 katten en 1.250 euro, de 2de keer.", "Het kost 4,50 € & 5%."],
    "cs": ["Mám 3 kočky a 1.250 korun, 5 května.", "Stojí to 4,5 € a 10 %."],  # no ordinal: Coqui raises
    "tr": ["İstanbul'da 3 kedi ve 1.250 lira, 5. gün Öğretmen Ünal.", "Bu 10% indirim."],
    "hu": ["Van 3 macskám és 1.250 forintom, az 5. napon.", "Ez 10% kedvezmény."],
    "ar": ["لدي 3 قطط و 1250 دولار.", "هذا 10% خصم."],
    "hi": ["मेरे पास तीन बिल्लियाँ हैं & डॉ. शर्मा।", "यह छूट है।"],  # num2words has no Hindi: Coqui raises on digits
    "ko": ["나는 고양이 3마리가 있어요. 안녕하세요!", "오늘은 좋은 날입니다."],
    "zh-cn": ["你好，世界！今天天气很好。", "我们一起去北京吧？好的。"],
}


@pytest.fixture(scope="module")
def folder(tmp_path_factory: pytest.TempPathFactory) -> Path:
    out = tmp_path_factory.mktemp("xtts-text")
    build_vocab(out / VOCAB_FILE, 1000)
    card = XttsCard(
        name="xtts-text", languages=list(TEXTS), char_limits={"en": 250, "zh": 82, "ko": 95, "de": 253},
        text_tokens=1000, text_start=0, text_stop=0, max_text_tokens=402, audio_codes=10, audio_start=8,
        audio_stop=9, max_audio_tokens=8, layers=1, heads=1, head_dim=1, model_dim=1,
    )  # fmt: skip
    card.save(out)
    return out


@pytest.fixture(scope="module")
def ours(folder: Path) -> XttsText:
    return XttsText(folder)


@pytest.fixture(scope="module")
def coqui(folder: Path) -> Any:
    from TTS.tts.layers.xtts.tokenizer import VoiceBpeTokenizer

    return VoiceBpeTokenizer(str(folder / VOCAB_FILE))


def coqui_ids(coqui: Any, text: str, language: str) -> list[int]:
    ids: list[int] = coqui.encode(text.strip().lower(), language)
    return ids


@pytest.mark.parametrize("language", sorted(TEXTS))
def test_ids_equal_coqui_in_every_language(ours: XttsText, coqui: Any, language: str) -> None:
    for text in TEXTS[language]:
        assert ours.encode(text, language) == coqui_ids(coqui, text, language), (language, text)


WORDS = ["the", "cat", "mr.", "dr.", "st.", "&", "%", "@", "$", "#", "sold", "on", "and", "Co.", "°"]
NUMBERS = st.one_of(
    st.integers(0, 10**7).map(str),
    st.integers(0, 10**6).map(lambda n: f"{n:,}"),
    st.tuples(st.integers(0, 999), st.integers(0, 99)).map(lambda p: f"{p[0]}.{p[1]:02d}"),
    st.integers(1, 200).map(lambda n: f"{n}{['st', 'nd', 'rd', 'th'][n % 4]}"),
    st.integers(1, 10**4).map(lambda n: f"${n}"),
    st.integers(1, 10**4).map(lambda n: f"{n}€"),
)


@settings(max_examples=60, deadline=None)
@given(st.lists(st.one_of(st.sampled_from(WORDS), NUMBERS), min_size=1, max_size=12))
def test_generated_english_equals_coqui(ours: XttsText, coqui: Any, words: list[str]) -> None:
    text = " ".join(words)
    assert ours.encode(text, "en") == coqui_ids(coqui, text, "en")


@settings(max_examples=30, deadline=None)
@given(
    st.lists(
        st.one_of(st.sampled_from(["der", "Hund", "Dr.", "&", "%", "und"]), NUMBERS), min_size=1, max_size=10
    )
)
def test_generated_german_equals_coqui(ours: XttsText, coqui: Any, words: list[str]) -> None:
    text = " ".join(words)
    assert ours.encode(text, "de") == coqui_ids(coqui, text, "de")


def test_chinese_numbers_are_read_as_numerals_before_pinyin(ours: XttsText, coqui: Any) -> None:
    spelled = ours.encode("我有三个苹果和二十五本书。", "zh-cn")
    assert ours.encode("我有3个苹果和25本书。", "zh-cn") == spelled
    assert spelled == coqui_ids(coqui, "我有三个苹果和二十五本书。", "zh-cn")


def test_languages_are_checked_against_the_voice(ours: XttsText) -> None:
    assert ours.language("ZH-CN") == "zh"
    with pytest.raises(InvalidRequest, match="this voice reads"):
        ours.language("xx")
    with pytest.raises(InvalidRequest, match="this voice reads") as refused:
        ours.language("ja")  # not among this card's languages
    assert refused.value.code == UNREADABLE


def test_segments_keep_within_the_language_limit(ours: XttsText) -> None:
    sentence = "This sentence, which has a few clauses in it, goes on for a while before it ends. "
    text = sentence * 12 + "And " + "very " * 80 + "long without a single comma at all."
    segments = ours.segments(text, "en")
    assert all(len(s) <= 250 for s in segments)
    assert " ".join(segments).split() == text.split()  # nothing lost or reordered
    assert segments[0].endswith(".")  # whole sentences where they fit
    chinese = "今天天气很好，我们一起去公园散步，然后去吃饭。" * 8
    assert all(len(s) <= 82 for s in ours.segments(chinese, "zh-cn"))
    assert "".join(ours.segments(chinese, "zh-cn")) == chinese


def test_a_number_num2words_cannot_say_is_read_as_a_cardinal(ours: XttsText) -> None:
    # num2words has no Czech ordinals (Coqui's cleaner raises on "5."): the cardinal reads it
    assert ours.encode("Přijdu 5. května.", "cs") == ours.encode("Přijdu pět. května.", "cs")


def test_empty_and_oversized_text_are_refused(ours: XttsText) -> None:
    with pytest.raises(InvalidRequest, match="nothing to say"):
        ours.read("   ", "en")
    assert len(ours.read("Hello there. How are you?", "en")) == 1
