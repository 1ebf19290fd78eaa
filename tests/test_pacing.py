"""The pacer's arithmetic (triton_tts.runtime.pacing) on a clock the test moves; the paced server
itself is in tests/test_first_audio.py, and the listener model of the benchmark here too."""

from __future__ import annotations

from pathlib import Path

import pytest

from benchmarks.first_audio import listener_gaps
from triton_tts.runtime.pacing import CHECK_EVERY_S, Pacer, released_by_file


class Clock:
    def __init__(self) -> None:
        self.now = 100.0
        self.sleeps: list[float] = []

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.sleeps.append(seconds)
        self.now += seconds


def pacer(lead_s: float, clock: Clock, released: bool = False) -> Pacer:
    return Pacer(lead_s, lambda: released, clock=clock, sleep=clock.sleep)


def test_a_later_chunk_waits_until_the_lead_drops_under_the_bound() -> None:
    clock = Clock()
    p = pacer(10.0, clock)
    p.sent(2.0)  # the first chunk: playback starts now
    clock.now += 0.5
    p.wait(lambda: False)
    assert clock.sleeps == []  # 1.5 s ahead: the next chunk starts at once
    p.sent(30.0)  # 31.5 s ahead
    p.wait(lambda: False)
    assert p.lead() == pytest.approx(10.0)
    assert sum(clock.sleeps) == pytest.approx(21.5)
    assert max(clock.sleeps) <= CHECK_EVERY_S  # cancellation is asked between short sleeps
    assert p.waited_s == pytest.approx(21.5)
    assert p.gaps == 0


def test_no_lead_means_no_wait() -> None:
    clock = Clock()
    p = pacer(0.0, clock)
    p.sent(60.0)
    p.wait(lambda: False)
    assert clock.sleeps == [] and p.waited_s == 0.0


def test_a_chunk_sent_after_the_audio_ran_out_is_a_gap_and_playback_resumes_with_it() -> None:
    clock = Clock()
    p = pacer(5.0, clock)
    p.sent(1.0)
    clock.now += 3.0  # the listener played 1 s, then waited 2 s
    p.sent(4.0)
    assert p.gaps == 1 and p.gap_s == pytest.approx(2.0)
    assert p.lead() == pytest.approx(4.0)  # playback resumed when the chunk came
    clock.now += 1.0
    p.sent(4.0)  # in time
    assert p.gaps == 1


def test_waiting_ends_when_the_stream_stops_or_the_server_releases_it() -> None:
    clock = Clock()
    p = pacer(1.0, clock)
    p.sent(100.0)
    asked = []

    def stop() -> bool:
        asked.append(clock.now)
        return len(asked) == 3

    p.wait(stop)
    assert len(asked) == 3 and p.lead() > 90  # stopped long before the lead ran down
    released = pacer(1.0, clock, released=True)
    released.sent(100.0)
    released.wait(lambda: False)
    assert released.lead() == pytest.approx(100.0)


def test_the_release_file_is_read_when_it_exists(tmp_path: Path) -> None:
    flag = tmp_path / "release-streams"
    released = released_by_file(str(flag))
    assert not released()
    flag.touch()
    assert released()
    assert not released_by_file("")()  # no file named: never released by one


def test_the_benchmarks_listener_hears_gaps_only_when_a_chunk_comes_late() -> None:
    # chunks of 2 s, 10 s, 10 s: the second arrives 1 s into the first's playback, the
    # third 3 s after the second finished playing
    gaps, silent = listener_gaps([0.5, 1.5, 15.5], [2.0, 10.0, 10.0])
    assert gaps == 1 and silent == pytest.approx(3.0)
    assert listener_gaps([0.5, 2.5, 12.0], [2.0, 10.0, 10.0]) == (0, 0.0)


def test_a_lead_is_built_only_while_no_first_chunk_waits() -> None:
    """Another stream's first chunk waiting holds a stream with audio to spare (earliest
    deadline first), down to HOLD_FLOOR_S of audio left; below it, the chunk goes."""
    from triton_tts.runtime.pacing import HOLD_FLOOR_S

    clock = Clock()
    waiting = {"first chunks": True}
    p = Pacer(10.0, clock=clock, sleep=clock.sleep, hold=lambda: waiting["first chunks"])
    p.sent(8.0)  # 8 s of audio: under the lead, over the floor
    p.wait(lambda: False)
    assert p.lead() == pytest.approx(HOLD_FLOOR_S, abs=0.11)  # held until the floor
    p.sent(4.0)
    waiting["first chunks"] = False
    clock.sleeps.clear()
    p.wait(lambda: False)
    assert clock.sleeps == []  # nothing waits: the lead is built at once
