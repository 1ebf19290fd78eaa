"""The text front-end against Piper's own (normaliser, espeak-ng, the joe voice's ids).

The served ids (the real server's preprocess model) of a few hundred English sentences
(tests/data/frontend_sentences.txt) are compared with Piper's, computed by Piper's code
in its own virtualenvs (tests/piper_reference.py; GPL, never imported by the product):

* piper-phonemize 1.1.0, the phonemizer the joe voice was trained with (.bench/
  piper-phonemize): on our normalised text its ids equal ours for every sentence, and on
  the raw text every difference is one of our normaliser's reading choices, named and
  explained in CATEGORIES (piper-phonemize gives espeak-ng the written form; what espeak
  says for "$3.50" or "Dr." is where the two differ);
* piper-tts 1.8.0, Piper's synthesiser today (.bench/piper, the peer benchmark's): it
  bundles a 2025 espeak-ng whose English differs from the one the voices were trained with
  ("four" as fˈɔːɹ for fˈoːɹ, a glide ʲ between some vowels); where it differs from us,
  piper-phonemize agrees with us.

Texts of several sentences: Piper synthesises each sentence on its own; the ids compared
are those of the sentences flattened into one sequence, as Piper's training prepares an
utterance and as triton-tts says a text (or a chunk of a long one).

Known and not in the corpus: Debian's espeak-ng 1.51 and piper-phonemize's build of it
stress a clause-final "one" differently ("It is one." wˈʌn / wˌʌn);
test_espeak_builds_differ_in_stress_only pins that it is stress marks only.
"""

from __future__ import annotations

import json
import re
import subprocess
from collections import Counter
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import pytest
import tritonclient.http as httpclient

from tests.helpers import tts_inputs
from triton_tts.contract.voice import PIPER_PHONEMES, Voice
from triton_tts.export.piper import bundled_joe_paths
from triton_tts.ops.server import TritonServer
from triton_tts.text import english_patterns, normalize
from triton_tts.text.normalize import normalize_english
from triton_tts.text.phonemize import EspeakPhonemizer

# Server tests are those that ask for a server (tests/conftest.py); the rest run in `make test-unit`.

ROOT = Path(__file__).resolve().parent.parent
CORPUS = Path(__file__).parent / "data" / "frontend_sentences.txt"
REFERENCE_SCRIPT = Path(__file__).parent / "piper_reference.py"
# Piper's two phonemizers, each in the virtualenv the Makefile makes for it.
TRAINED_WITH = "piper-phonemize"
RELEASED = "piper-tts"
# Requests in flight at once, under preprocess's queue bound (32).
IN_FLIGHT = 16
VENVS = {TRAINED_WITH: ROOT / ".bench" / "piper-phonemize", RELEASED: ROOT / ".bench" / "piper"}

# Our normaliser's reading choices: why each reads a written form otherwise than Piper,
# which hands the written form to espeak-ng (examples from the corpus).
CATEGORIES = {
    "numbers": "number words as one says them: '42' is 'forty-two' (espeak-ng: two words, "
    "'forty two'), hundreds take 'and' ('one hundred and one'), decimals 'point' with stress; "
    "'1.2.3' is 'one dot two dot three'",
    "ordinals": "'25th' is 'twenty-fifth' and '100th' 'one hundredth' (espeak-ng: 'twenty "
    "fifth', 'one hundred th')",
    "money": "'$12.50' is 'twelve dollars and fifty cents' (espeak-ng: 'dollar twelve point "
    "five zero'), the currency after the amount, '$2.5M' 'two point five million dollars'",
    "percentages": "'4.5%' is 'four point five percent' with our number words",
    "dates": "'March 15, 2024', '15 March 1990', '2024-03-15', '3/15/2024' are all 'March "
    "fifteenth, twenty twenty-four' (espeak-ng: cardinal days, 'two thousand twenty four', "
    "'dash' and 'slash'); 'on 12/24' is 'on December twenty-fourth' (espeak-ng: 'twelve "
    "slash twenty four')",
    "years": "a year after a cue word, with an era or as a decade ('in 1985', '753 BC', "
    "'1960s', 'the 80s') is 'nineteen eighty-five' (espeak-ng: 'nineteen hundred eighty "
    "five', 'two thousand ten')",
    "times": "'10:00' is 'ten o'clock', '3:05 pm' 'three oh five p m', '14:45' 'fourteen "
    "forty-five' (espeak-ng: 'ten zero zero', 'three zero five pm')",
    "units": "'5 kg', '12 km', '25 °C', '60 mph' are spoken units (espeak-ng spells most: 'k g', 'k m')",
    "abbreviations": "'Dr.', 'Mr.', 'Ms.', 'St.', 'Inc.', 'vs.', 'e.g.', 'Jan.', 'No. 5' are "
    "words ('Doctor', 'Miz', 'for example'), 'ext. 204' 'extension two zero four'; espeak-ng "
    "spells some ('M S'), and where it expands one ('Doctor') its period still ends the "
    "sentence, so Piper pauses inside 'Doctor. Smith'",
    "symbols": "'&', '=', '@', '+' and '×' between numbers are 'and', 'equals', 'at', 'plus', "
    "'times'; '<' and '>' in a comparison 'less than', 'greater than' (espeak-ng: nothing)",
    "telephone": "'555-0123', '(212) 555-0187', '+44 20 7946 0958' are read in their groups digit by "
    "digit with a pause between ('five five five, zero one two three'; espeak-ng: 'five hundred "
    "fifty five zero one two three')",
    "fractions": "'3/4' is 'three quarters', '1 1/2' 'one and one half', '5/8' 'five eighths' "
    "(espeak-ng: 'three slash four')",
    "multipliers": "'3.5x' is 'three point five times', '10x' 'ten times' (espeak-ng: 'x')",
    "characters": "typographic quotes, dashes and other Unicode spellings are unified (NFKC) "
    "before the rewrites; espeak-ng mostly reads both alike",
}
# The normaliser's steps (triton_tts/text/normalize.py, _REWRITES) by category.
STEP_CATEGORIES = {
    "_ISO_DATE": "dates",
    "_NUMERIC_DATE": "dates",
    "_SLASHED_MONTH_DAY": "dates",
    "_MONTH_DAY_DATE": "dates",
    "_DAY_MONTH_DATE": "dates",
    "_MONTH_YEAR_DATE": "dates",
    "_CLOCK_TIME": "times",
    "_HOUR_WITH_MERIDIEM": "times",
    "_ERA_YEAR": "years",
    "_DECADE": "years",
    "_SHORT_DECADE": "years",
    "_YEAR_IN_CONTEXT": "years",
    "_WEEKDAY": "abbreviations",
    "_DOTTED_ABBREVIATION": "abbreviations",
    "_LATIN_ABBREVIATION": "abbreviations",
    "_BARE_ABBREVIATION": "abbreviations",
    "_NUMBER_SIGN": "abbreviations",
    "context.BEFORE_NUMBER_ABBREVIATION": "abbreviations",
    "_PREFIX_MONEY": "money",
    "_SUFFIX_MONEY": "money",
    "_PERCENTAGE": "percentages",
    "_NUMBER_WITH_UNIT": "units",
    "_ORDINAL_NUMBER": "ordinals",
    "_PLUS_BETWEEN_NUMBERS": "symbols",
    "_TIMES_BETWEEN_NUMBERS": "symbols",
    "_AMPERSAND": "symbols",
    "_EQUALS": "symbols",
    "_AT_SIGN": "symbols",
    "_DOTTED_NUMBER": "numbers",
    "_PLAIN_NUMBER": "numbers",
    "_DIGIT_RUN": "numbers",
    "context.TELEPHONE": "telephone",
    "context.FRACTION": "fractions",
    "context.MULTIPLIER": "multipliers",
    "context.COMPARISON": "symbols",
}


def _step(name: str) -> Any:
    """A step's pattern by its name in normalize.py ("context.TELEPHONE": of a module it imports)."""
    found: Any = normalize
    for part in name.split("."):
        found = getattr(found, part)
    return found


# Punctuation as Piper writes it, and where Coqui's convention differed: quotes, brackets,
# dashes, ellipses, doubled marks, closing quotes after a sentence, clauses espeak-ng cuts
# for length (Piper runs them together).
PUNCTUATION_PROBES = [
    'red "green" blue, “red” «green».',
    "red (green) [blue] {black}.",
    "red — green – blue - black -- white—grey.",
    "Well... maybe… yes?! No!! What...? Why??",
    'She said "no." Then she left. He asked (why?) and left.',
    "Is it red?\" he asked. It's red.' She nodded.",
    "red ¿green ¡blue, red ; ; green,, blue,. black",
    "red: green; blue, black. white? pink! grey",
    "Dear Sir: thanks; regards, Anna.",
    " ".join(["the lazy dog runs far away into green hills"] * 12) + ".",
]
# Where Debian's espeak-ng 1.51 and piper-phonemize's build of it differ (stress only).
ESPEAK_BUILD_PROBES = ["It is one.", "one, two!", "Zero, one, two."]


@dataclass(frozen=True)
class PiperIds:
    phonemes: str
    ids: list[int]
    sentences: int


def corpus() -> list[str]:
    lines = CORPUS.read_text(encoding="utf-8").splitlines()
    return [line for line in lines if line.strip() and not line.startswith("#")]


def piper(engine: str, texts: list[str]) -> list[PiperIds]:
    """Piper's ids for ``texts``, from ``engine`` in its own virtualenv."""
    python = VENVS[engine] / "bin" / "python"
    if not python.exists():
        pytest.fail(f"no {engine} at {VENVS[engine]}: run `make test` (or `make {python.relative_to(ROOT)}`)")
    for text in texts:
        assert "\n" not in text
    done = subprocess.run(
        [str(python), str(REFERENCE_SCRIPT), engine, "--config", str(bundled_joe_paths()[1])],
        input="".join(f"{text}\n" for text in texts).encode("utf-8"),
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert done.returncode == 0, done.stderr.decode("utf-8", "replace")
    records = [PiperIds(**json.loads(line)) for line in done.stdout.decode("utf-8").splitlines()]
    assert len(records) == len(texts)
    return records


def served_ids(
    http: httpclient.InferenceServerClient, texts: list[str], normalize: bool, inside: dict[str, str]
) -> list[list[int]]:
    """The ids the server's preprocess model computes, as the ensembles receive them."""

    served = []
    for start in range(0, len(texts), IN_FLIGHT):
        pending = [
            http.async_infer(
                "preprocess", tts_inputs(httpclient, text, NORMALIZE=normalize), parameters=inside
            )
            for text in texts[start : start + IN_FLIGHT]
        ]
        for request in pending:
            result = request.get_result()
            ids, length = result.as_numpy("PHONEME_IDS"), result.as_numpy("PHONEME_LENGTH")
            assert ids is not None and length is not None
            served.append([int(i) for i in ids.reshape(-1)[: int(length.reshape(-1)[0])]])
    return served


def normalized_with_categories(text: str) -> tuple[str, set[str]]:
    """normalize_english(text), step by step: the text and the categories whose step
    changed it. Checked against normalize_english itself, so it cannot drift from it."""
    steps = {_step(name): category for name, category in STEP_CATEGORIES.items()}
    cleaned = normalize._clean_characters(text)
    categories = {"characters"} if cleaned != text else set()
    has_digits = english_patterns.ASCII_DIGIT.search(cleaned) is not None
    spoken = cleaned
    for rewrite in normalize._REWRITES:
        if has_digits or not rewrite.needs_digits:
            rewritten = rewrite.pattern.sub(rewrite.replace, spoken)
            if rewritten != spoken:
                categories.add(steps[rewrite.pattern])
                spoken = rewritten
    spoken = english_patterns.WHITESPACE.sub(" ", spoken).strip()
    assert spoken == normalize_english(text)
    return spoken, categories


@pytest.fixture(scope="module")
def joe(voice: Voice) -> Voice:
    assert voice.tokens == PIPER_PHONEMES, "the default voice is a Piper voice"
    return voice


@pytest.fixture(scope="module")
def texts() -> list[str]:
    return corpus()


@pytest.fixture(scope="module")
def normalized(texts: list[str]) -> list[str]:
    return [normalize_english(t) for t in texts]


def _differences(
    texts: list[str], ours: list[str], theirs: list[PiperIds], ids: list[list[int]]
) -> list[str]:
    return [
        f"{text!r}\n  ours : {mine}\n  piper: {reference.phonemes}"
        for text, mine, reference, our_ids in zip(texts, ours, theirs, ids, strict=True)
        if our_ids != reference.ids
    ]


def test_every_normalizer_step_has_an_explained_category() -> None:
    steps = {_step(name) for name in STEP_CATEGORIES}
    assert {rewrite.pattern for rewrite in normalize._REWRITES} == steps
    assert set(STEP_CATEGORIES.values()) | {"characters"} == set(CATEGORIES)


def test_corpus_is_a_few_hundred_varied_sentences(texts: list[str]) -> None:
    assert len(texts) >= 300 and len(set(texts)) == len(texts)
    sections = [line for line in CORPUS.read_text(encoding="utf-8").splitlines() if line.startswith("# ")]
    assert len(sections) >= 15


def test_normalized_text_gives_piper_phonemizers_ids(
    server: TritonServer,
    http: httpclient.InferenceServerClient,
    joe: Voice,
    phonemizer: EspeakPhonemizer,
    normalized: list[str],
) -> None:
    """(b) Our normalised text through our phonemizer and the voice's map, served, equals
    piper-phonemize's ids on the same text, for every sentence."""
    served = served_ids(http, normalized, normalize=False, inside=server.internal_parameters())
    reference = piper(TRAINED_WITH, normalized)
    ours = phonemizer.symbols(normalized, joe.tokens)
    assert served == [joe.phonemes_to_ids(p) for p in ours]  # the server runs this code
    differences = _differences(normalized, ours, reference, served)
    assert not differences, "\n".join(differences)
    several = sum(r.sentences > 1 for r in reference)
    assert 0 < several < len(reference) // 4  # mostly one sentence: Piper's own framing


def test_raw_text_differs_only_by_named_reading_choices(
    server: TritonServer,
    http: httpclient.InferenceServerClient,
    joe: Voice,
    phonemizer: EspeakPhonemizer,
    texts: list[str],
) -> None:
    """(a) Raw text through both whole front-ends: every difference comes from one of our
    normaliser's steps (a category of CATEGORIES), and giving Piper our normalised text
    removes it."""
    served = served_ids(http, texts, normalize=True, inside=server.internal_parameters())
    reference = piper(TRAINED_WITH, texts)
    counts: Counter[str] = Counter()
    unexplained = []
    for text, ids, theirs in zip(texts, served, reference, strict=True):
        if ids == theirs.ids:
            continue
        spoken, categories = normalized_with_categories(text)
        ours = phonemizer.symbols([spoken], joe.tokens)[0]
        if not categories or joe.phonemes_to_ids(ours) != ids:
            unexplained.append(f"{text!r} -> {spoken!r}\n  ours : {ours}\n  piper: {theirs.phonemes}")
        counts.update(categories)
    assert not unexplained, "\n".join(unexplained)
    differing = sum(ids != theirs.ids for ids, theirs in zip(served, reference, strict=True))
    # The corpus exercises every reading choice but the Unicode clean-up, which Piper's
    # espeak-ng mostly ignores too.
    assert set(counts) >= set(CATEGORIES) - {"characters"}, counts
    assert differing < len(texts) // 2, f"{differing} of {len(texts)} differ: {dict(counts)}"


def test_piper_tts_differs_only_where_piper_releases_disagree(
    joe: Voice, phonemizer: EspeakPhonemizer, normalized: list[str]
) -> None:
    """piper-tts 1.8.0's espeak-ng (2025) reads some English otherwise than the one the
    voice was trained with: wherever its ids differ from ours, piper-phonemize's equal
    ours, and the difference is inside words, never punctuation."""
    released = piper(RELEASED, normalized)
    trained = piper(TRAINED_WITH, normalized)
    ours = phonemizer.symbols(normalized, joe.tokens)
    drift = 0
    for text, mine, new, old in zip(normalized, ours, released, trained, strict=True):
        ids = joe.phonemes_to_ids(mine)
        if ids == new.ids:
            continue
        drift += 1
        assert ids == old.ids, f"{text!r}\n  ours : {mine}\n  piper-tts: {new.phonemes}"
        assert _punctuation(mine) == _punctuation(new.phonemes), text
    assert drift > 0  # if none is left, Piper's releases agree again: say so in the docstring


def test_punctuation_as_piper_writes_it(joe: Voice, phonemizer: EspeakPhonemizer) -> None:
    """The cases where our phonemizer used to differ (Coqui's convention): quotes and
    brackets say nothing, dashes are semicolons, an ellipsis and ¿¡ write nothing,
    "?!" is a question, long clauses run together, on raw text."""
    ours = phonemizer.symbols(PUNCTUATION_PROBES, joe.tokens)
    reference = piper(TRAINED_WITH, PUNCTUATION_PROBES)
    ids = [joe.phonemes_to_ids(p) for p in ours]
    differences = _differences(PUNCTUATION_PROBES, ours, reference, ids)
    assert not differences, "\n".join(differences)
    for symbol in ('"', "(", ")", "…", "—"):
        assert all(symbol not in p for p in ours)


def test_espeak_builds_differ_in_stress_only(joe: Voice, phonemizer: EspeakPhonemizer) -> None:
    ours = phonemizer.symbols(ESPEAK_BUILD_PROBES, joe.tokens)
    reference = piper(TRAINED_WITH, ESPEAK_BUILD_PROBES)
    for mine, theirs in zip(ours, reference, strict=True):
        assert _unstressed(mine) == _unstressed(theirs.phonemes)


def test_piper_convention_is_safe_under_concurrent_callers(
    joe: Voice, phonemizer: EspeakPhonemizer, normalized: list[str]
) -> None:
    texts = normalized[:40]
    expected = phonemizer.symbols(texts, joe.tokens)
    with ThreadPoolExecutor(8) as pool:
        results = list(pool.map(lambda t: phonemizer.symbols([t], joe.tokens)[0], texts * 4))
    assert results == expected * 4


def test_voice_folders_from_before_keep_their_convention(joe: Voice, tmp_path: Path) -> None:
    """Piper voices exported when both conventions were "phonemes" read as Piper's; a
    Coqui voice (its own framing) stays "phonemes"."""
    older = {**asdict(joe), "tokens": "phonemes"}
    (tmp_path / "voice.json").write_text(json.dumps(older), encoding="utf-8")
    assert Voice.load(tmp_path).tokens == PIPER_PHONEMES
    coqui = {**older, "bos": [], "eos": [], "intersperse": [0], "pad_id": 0}
    (tmp_path / "voice.json").write_text(json.dumps(coqui), encoding="utf-8")
    assert Voice.load(tmp_path).tokens == "phonemes"


def _punctuation(phonemes: str) -> str:
    return re.sub(r"[^.,:;?!]", "", phonemes)


def _unstressed(phonemes: str) -> str:
    return phonemes.replace("ˈ", "").replace("ˌ", "")
