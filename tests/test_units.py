"""Pure functions: request checks, batching plans, the voice's id mapping."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from triton_tts.contract.validation import (
    MAX_TEXT_CHARS,
    NOTHING_TO_SAY,
    InvalidRequest,
    check_noise,
    check_speaker,
    check_speed,
    check_voice,
    decode_text,
    nothing_to_say,
)
from triton_tts.contract.voice import PINYIN_BAKER
from triton_tts.runtime.batching import PHONEME_BUCKETS, bucket_length, pad_stack, plan_sub_batches
from triton_tts.runtime.onnx_session import resolve_threads
from triton_tts.text.speaks import pronounceable, reading_speaks


def test_decode_text_cleans_and_rejects() -> None:
    assert decode_text(b"  Hello\nworld\x00 ") == "Hello world"
    assert decode_text("zero\u200bwidth") == "zerowidth"
    for bad, words in [
        (b"", "empty"),
        (b"\xff\xfe", "UTF-8"),
        (b"\x01\x02", "control"),
        (("a" * (MAX_TEXT_CHARS + 1)).encode(), "limit"),
    ]:
        with pytest.raises(InvalidRequest, match=words):
            decode_text(bad)


@pytest.mark.parametrize("speed", [0.0, -2.0, float("nan"), float("inf"), 0.1, 10.0])
def test_speed_out_of_range(speed: float) -> None:
    with pytest.raises(InvalidRequest, match="SPEED"):
        check_speed(speed)


def test_good_values_pass() -> None:
    assert check_speed(1.5) == 1.5
    assert check_noise("NOISE_W", 0.0) == 0.0
    assert check_speaker(0, 1, "joe") == 0
    with pytest.raises(InvalidRequest, match=r"speakers 0\.\.3"):
        check_speaker(4, 4, "vctk")


def test_voice_is_chosen_from_what_the_model_serves() -> None:
    served = ["joe", "vctk"]
    assert check_voice("", served) == "joe"  # left out or empty: the default
    assert check_voice("vctk", served) == "vctk"
    with pytest.raises(InvalidRequest, match=r"^unknown VOICE 'nobody': this model serves 'joe', 'vctk'$"):
        check_voice("nobody", served)


def test_nothing_to_say_is_its_own_refusal() -> None:
    refusal = nothing_to_say()
    assert isinstance(refusal, InvalidRequest)  # refused like any bad input: 400
    assert refusal.code == NOTHING_TO_SAY and InvalidRequest("x").code == "invalid"
    assert str(refusal) == "TEXT has nothing the voice can pronounce"
    for text in ("...", "* * *", "?! -- ;;", "\u2014", "\U0001f600", ""):
        assert not pronounceable(text), text
    for text in ("a", "7", "... then", "\u00e9t\u00e9", "\u65e5\u672c"):
        assert pronounceable(text), text


def test_nothing_to_say_before_and_after_reading() -> None:
    """A voice trained on Chinese only says nothing but Chinese characters; after reading,
    only framing or phonemes of punctuation say nothing."""
    assert pronounceable("\u4f60\u597d ok", PINYIN_BAKER) and not pronounceable("ok 42", PINYIN_BAKER)
    assert reading_speaks("h\u0259l\u02c8o\u028a.", ids=9, framing=3)
    assert not reading_speaks(". , !", ids=9, framing=3)  # espeak's punctuation only
    assert not reading_speaks("abc", ids=3, framing=3)  # letters the voice has no symbols for


def test_buckets_bound_padding() -> None:
    for length in range(1, PHONEME_BUCKETS[-1] + 1):
        bucket = bucket_length(length)
        assert bucket >= length
        assert bucket <= max(PHONEME_BUCKETS[0], int(length * 1.5) + 1)
    assert bucket_length(10**6) == 10**6


def test_sub_batches_respect_the_cap_and_cover_everything() -> None:
    rng = np.random.default_rng(0)
    lengths = [int(x) for x in rng.integers(1, 500, size=40)]
    groups = plan_sub_batches(lengths, max_padded=1200)
    assert sorted(i for g in groups for i in g) == list(range(40))
    for group in groups:
        longest = max(lengths[i] for i in group)
        assert len(group) == 1 or len(group) * longest <= 1200
    assert plan_sub_batches([5000], max_padded=100) == [[0]]  # one item always runs


def test_pad_stack() -> None:
    out = pad_stack([np.ones((2, 3), np.float32), np.ones((2, 5), np.float32)])
    assert out.shape == (2, 2, 5) and out[0, :, 3:].sum() == 0 and out[1].sum() == 10


def test_threads_never_oversubscribe() -> None:
    from triton_tts.runtime.onnx_session import available_cores

    assert resolve_threads("auto", 1) == available_cores()
    assert resolve_threads("auto", available_cores() * 4) == 1
    assert resolve_threads("3", 1) == 3


def test_auto_threads_honour_the_containers_cpu_quota(tmp_path, monkeypatch) -> None:
    """A pod limited to 2 CPUs on a 64-core node sizes its pools for 2 (cgroup v2 and v1)."""
    import os

    from triton_tts.runtime.onnx_session import available_cores, cgroup_cpu_limit

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(64)))
    v2 = tmp_path / "v2"
    v2.mkdir()
    (v2 / "cpu.max").write_text("200000 100000\n", encoding="utf-8")
    assert cgroup_cpu_limit(v2) == 2.0
    assert available_cores(v2) == 2
    assert resolve_threads("auto", 1, v2) == 2 and resolve_threads("auto", 2, v2) == 1
    (v2 / "cpu.max").write_text("150000 100000\n", encoding="utf-8")  # 1.5 CPUs: one thread
    assert available_cores(v2) == 1
    (v2 / "cpu.max").write_text("50000 100000\n", encoding="utf-8")  # half a CPU: still one
    assert resolve_threads("auto", 2, v2) == 1
    (v2 / "cpu.max").write_text("max 100000\n", encoding="utf-8")  # no limit: the affinity
    assert cgroup_cpu_limit(v2) is None and available_cores(v2) == 64
    v1 = tmp_path / "v1" / "cpu"
    v1.mkdir(parents=True)
    (v1 / "cpu.cfs_quota_us").write_text("400000\n", encoding="utf-8")
    (v1 / "cpu.cfs_period_us").write_text("100000\n", encoding="utf-8")
    assert available_cores(v1.parent) == 4
    (v1 / "cpu.cfs_quota_us").write_text("-1\n", encoding="utf-8")
    assert available_cores(v1.parent) == 64
    assert available_cores(tmp_path / "none") == 64  # no cgroup files: the affinity
    assert resolve_threads("3", 1, v2) == 3  # an explicit count is the operator's choice


def test_runners_give_the_same_audio_alone_or_padded_together(voice_dir, phonemizer, voice) -> None:
    """The CPU stages' in-model batching: padded runs of several items equal runs of one."""
    from triton_tts.runtime.stages import AcousticRunner, RunFailed, VocoderRunner

    texts = ["Short.", "A somewhat longer sentence for padding.", "Medium length, this one."]
    ids = [np.array(voice.phonemes_to_ids(p), dtype=np.int64) for p in phonemizer.phonemize(texts)]
    scales = [np.array([0.0, s, 0.0], dtype=np.float32) for s in (1.0, 0.8, 1.3)]
    outputs = []
    for items in (1, 3):
        acoustic = AcousticRunner(voice_dir / "acoustic.onnx", 1, max_items_per_run=items, max_padded=8192)
        vocoder = VocoderRunner(voice_dir / "vocoder.onnx", 1, max_items_per_run=items, max_padded=4000)
        latents = acoustic.run(ids, scales)
        assert not any(isinstance(x, RunFailed) for x in latents)
        waves = vocoder.run([x[0] for x in latents if not isinstance(x, RunFailed)])
        outputs.append(waves)
    for alone, together in zip(*outputs, strict=True):
        assert isinstance(alone, np.ndarray) and isinstance(together, np.ndarray)
        assert alone.shape == together.shape
        np.testing.assert_allclose(together, alone, atol=2e-4)


def test_a_failing_run_fails_only_its_own_requests(voice_dir) -> None:
    from triton_tts.runtime.stages import RunFailed, VocoderRunner

    vocoder = VocoderRunner(voice_dir / "vocoder.onnx", 1, max_items_per_run=1, max_padded=4000)
    good = np.zeros((192, 20), dtype=np.float32)
    wrong_channels = np.zeros((7, 20), dtype=np.float32)
    results = vocoder.run([good, wrong_channels, good])
    assert isinstance(results[1], RunFailed) and "vocoder failed" in results[1].message
    for i in (0, 2):
        ok = results[i]
        assert isinstance(ok, np.ndarray) and ok.shape == (20 * 256,)


def test_phonemizer_is_safe_under_concurrent_callers(phonemizer) -> None:
    from concurrent.futures import ThreadPoolExecutor

    texts = [f"Sentence number {i}, said by thread after thread." for i in range(16)]
    expected = phonemizer.phonemize(texts)
    with ThreadPoolExecutor(max_workers=8) as pool:
        results = list(pool.map(lambda t: phonemizer.phonemize([t])[0], texts * 4))
    assert results == expected * 4


class RecordingSender:
    """Stands in for a request's response sender: records what it was sent."""

    def __init__(self, broken: bool = False) -> None:
        self.sent: list[tuple[str, int]] = []
        self.broken = broken

    def send(self, response: str, flags: int) -> None:
        if self.broken:
            raise RuntimeError("client went away")
        self.sent.append((response, flags))


def test_each_request_gets_exactly_one_response_as_its_item_is_done() -> None:
    from triton_tts.runtime.stages import RunFailed, send_as_done

    order: list[int] = []
    senders = [RecordingSender(), RecordingSender(broken=True), RecordingSender(), RecordingSender()]

    def results() -> Iterator[tuple[int, object]]:
        for index, result in ((2, "audio-2"), (1, "audio-1"), (0, RunFailed("bad input"))):
            yield index, result
            order.append(index)  # the response was sent before the next item ran
        raise RuntimeError("runner broke")

    send_as_done(senders, results(), lambda r: f"ok:{r}", lambda i, m: f"error {i}:{m}", final=7)
    assert order == [2, 1, 0]
    assert senders[2].sent == [("ok:audio-2", 7)]
    assert senders[0].sent == [("error 0:bad input", 7)]
    assert senders[3].sent == [("error 3:internal error: runner broke", 7)]  # never ran: still answered
    assert senders[1].sent == []  # its sender failed; the others were not affected
