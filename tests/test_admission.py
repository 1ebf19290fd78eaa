"""Admission by work (triton_tts/runtime/admission.py): the ledger's decisions on their own, then
through real servers with tritonclient, the client library and the gateway.

Outcomes, not wall-clock limits: a one-sentence flood below capacity is served whole;
work beyond the budget is refused before any accepted text is answered, with a retry
hint the client library honours; listeners are admitted while their real-time demand
fits the capacity, whatever their number; a greedy caller is held to its share while a
polite one is still served.
"""

from __future__ import annotations

import multiprocessing
import os
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import tritonclient.grpc as grpcclient
from hypothesis import given, settings
from hypothesis import strategies as st

from testkit.sample_texts import PARAGRAPH, SENTENCES
from tests.helpers import metric_total, tts_inputs
from tests.test_overload import flood
from triton_tts.build.model_configs import BuildOptions
from triton_tts.client.tts_client import NO_RETRIES, RetryPolicy, ServerBusy, TTSClient, retry_hint
from triton_tts.contract.voice import Voice
from triton_tts.ops.server import TritonServer, default_voice_server
from triton_tts.runtime.admission import (
    DEFAULT_CAPACITY,
    WINDOW_S,
    AdmissionSettings,
    Ledger,
    Refused,
    Work,
    busy_message,
    retry_after,
)
from triton_tts.runtime.limits import RATE_TEXTS, calibrate
from triton_tts.text.reader import TextReader

# The fixture that starts this module's own server (tests/conftest.py marks its tests).
SERVER_FIXTURES = {"tight"}


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def ledger(tmp_path: Path, clock: Clock | None = None, **budgets: float) -> Ledger:
    made = Ledger(tmp_path / "ledger", AdmissionSettings(**budgets), clock=clock or Clock())  # type: ignore[arg-type]
    made.set_capacity("joe", 20.0)
    return made


# -- the ledger on its own ---------------------------------------------------------------


def test_texts_are_admitted_while_the_work_ahead_fits_the_budget(tmp_path: Path) -> None:
    book = ledger(tmp_path, text_budget_s=4.0)
    # 20 s of audio at 20 audio-s/s: one machine-second each
    admitted = []
    with pytest.raises(Refused) as refused:
        for i in range(10):
            admitted.append(book.admit_text(f"t{i}", "joe", "", 20.0))
    assert len(admitted) == 5  # 0, 1, 2, 3, 4 s ahead; the sixth would wait 5 s
    assert "would wait ~5.0 s" in str(refused.value) and refused.value.retry_after_s == pytest.approx(1.0)
    book.release(admitted[0])
    assert book.admit_text("again", "joe", "", 20.0).remaining_s == pytest.approx(1.0)
    # the work done counts: half of one text made frees half a second of the budget
    book.completed(admitted[1], 10.0)
    assert book.load().text_work_s == pytest.approx(4.5)


def test_one_large_text_is_admitted_when_nothing_is_ahead(tmp_path: Path) -> None:
    book = ledger(tmp_path, text_budget_s=1.0)
    big = book.admit_text("book", "joe", "", 3600.0)  # an hour of audio: three minutes of work
    assert big.remaining_s == pytest.approx(180.0)
    with pytest.raises(Refused):
        book.admit_text("next", "joe", "", 1.0)


def test_the_hint_is_the_one_the_client_reads() -> None:
    message = busy_message("a text would wait ~9.0 s", 1.25)
    assert retry_after(message) == retry_hint(f"[StatusCode.UNAVAILABLE] {message}") == 1.2
    assert message.startswith("server busy")
    assert retry_after("Exceeds maximum queue size") is None


def test_listeners_are_admitted_by_demand_not_by_count(tmp_path: Path) -> None:
    book = ledger(tmp_path, stream_headroom=0.15)
    listeners = []
    with pytest.raises(Refused, match="listeners take"):
        for i in range(40):
            listeners.append(book.admit_stream(f"s{i}", "joe", "", 60.0, 2.0, 10.0))
            book.completed(listeners[-1], 2.0, first=True)  # first chunks out
    assert len(listeners) == 17  # 17 / 20 of the machine: 85 %
    book.release(listeners[0])
    book.admit_stream("one more", "joe", "", 60.0, 2.0, 10.0)
    book.set_capacity("joe", 40.0)  # a faster machine takes twice as many
    assert len([book.admit_stream(f"x{i}", "joe", "", 60.0, 0.0, 10.0) for i in range(17)]) == 17


def test_a_stream_without_room_waits_its_turn(tmp_path: Path) -> None:
    """Streams that find no room queue first come, first served: a newcomer and a later
    ticket are refused while an earlier one waits, and each gets in once room frees."""
    clock = Clock()
    book = ledger(tmp_path, clock, stream_headroom=0.9)  # room: 10 % of 20 audio-s/s, 2 listeners
    running = [book.admit_stream(f"s{i}", "joe", "", 30.0, 0.0, 10.0) for i in range(2)]
    with pytest.raises(Refused, match="listeners take"):
        book.admit_stream("third", "joe", "", 30.0, 0.0, 10.0)
    first, first_wait_s = book.enqueue_stream("joe", 30.0, 10.0)
    assert first_wait_s == pytest.approx(20.0)  # the two running streams' 20 s left, over 2
    clock.now += 1.0
    second, _ = book.enqueue_stream("joe", 30.0, 10.0)
    # the running streams' 19 s left each, and the 20 s the first holds, over 2 at once
    assert book.stream_wait_s(first) == pytest.approx(19.0)
    assert book.stream_wait_s(second) == pytest.approx(19.0 + 10.0)
    book.release(running[0])
    for cut_in in ("newcomer", second):
        with pytest.raises(Refused, match="wait for room ahead of it"):
            book.admit_stream(
                "x", "joe", "", 30.0, 0.0, 10.0, ticket=None if cut_in == "newcomer" else cut_in
            )
    book.admit_stream("first", "joe", "", 30.0, 0.0, 10.0, ticket=first)
    book.release(running[1])
    book.admit_stream("second", "joe", "", 30.0, 0.0, 10.0, ticket=second)
    assert book.load().streams == 2 and book.stream_wait_s("gone") == pytest.approx(20.0)  # 20 s left each


def test_as_many_streams_wait_as_may_run(tmp_path: Path) -> None:
    book = ledger(tmp_path, max_streams=2)
    tickets = [book.enqueue_stream("joe", 5.0, 10.0)[0] for _ in range(2)]
    with pytest.raises(Refused, match="2 streams already wait"):
        book.enqueue_stream("joe", 5.0, 10.0)
    book.leave_queue(tickets[0])
    book.enqueue_stream("joe", 5.0, 10.0)


def test_a_request_waits_as_long_as_it_says() -> None:
    """The budget is the request's own deadline (microseconds, as Triton's timeout), up to
    max_wait_s; a request that states none gets the defaults."""
    defaults = AdmissionSettings.from_parameters({})
    assert (defaults.text_budget(0), defaults.stream_budget(0)) == (45.0, 45.0)
    assert defaults.text_budget(2_500_000) == defaults.stream_budget(2_500_000) == 2.5
    assert defaults.text_budget(10**12) == defaults.max_wait_s == 300.0
    rendered = AdmissionSettings.from_parameters(
        {"text_budget_ms": "1000", "stream_wait_ms": "2000", "max_wait_ms": "5000"}
    )
    assert (rendered.text_budget(0), rendered.stream_budget(0), rendered.text_budget(9_000_000)) == (1, 2, 5)


def test_a_text_is_refused_past_its_own_deadline_only(tmp_path: Path) -> None:
    book = ledger(tmp_path)  # the default budget
    for i in range(10):  # 10 machine-seconds ahead: within the default 45 s
        book.admit_text(f"t{i}", "joe", "", 20.0)
    with pytest.raises(Refused, match=r"would wait ~10\.0 s .*its budget: 2 s"):
        book.admit_text("hurried", "joe", "", 20.0, budget_s=2.0)
    book.admit_text("patient", "joe", "", 20.0)


def test_first_chunks_ahead_bound_a_new_stream(tmp_path: Path) -> None:
    book = ledger(tmp_path, first_chunk_budget_s=1.0)
    for i in range(5):  # 4 s of first chunk each: 0.2 machine-seconds
        book.admit_stream(f"s{i}", "joe", "", 60.0, 4.0, 10.0)
    with pytest.raises(Refused, match=r"first chunk would wait ~1\.2 s") as refused:
        book.admit_stream("late", "joe", "", 60.0, 4.0, 10.0)  # 1.0 s ahead: still within
        book.admit_stream("later", "joe", "", 60.0, 4.0, 10.0)
    assert refused.value.retry_after_s > 0


def test_a_greedy_caller_is_held_to_its_share(tmp_path: Path) -> None:
    book = ledger(tmp_path, text_budget_s=4.0, caller_share=0.5, stream_headroom=0.15)
    greedy = [book.admit_text("g0", "joe", "greedy", 200.0)]  # 10 s of work: nothing was ahead
    with pytest.raises(Refused, match="caller 'greedy'"):
        book.admit_text("g1", "joe", "greedy", 20.0)
    # the greedy caller's excess does not count against others: it runs interleaved
    polite = [book.admit_text(f"p{i}", "joe", "polite", 20.0) for i in range(2)]
    assert len(polite) == 2 and greedy
    # listeners: the greedy caller gets half the room, the others the rest
    streams = []
    with pytest.raises(Refused, match="caller 'greedy'"):
        for i in range(20):
            streams.append(book.admit_stream(f"gs{i}", "joe", "greedy", 600.0, 0.0, 10.0))
    assert len(streams) == 8  # 8 / 20 <= 0.5 x 0.85
    assert len([book.admit_stream(f"ps{i}", "joe", "polite", 60.0, 0.0, 10.0) for i in range(8)]) == 8


def test_lines_of_dead_processes_are_dropped(tmp_path: Path) -> None:
    dead: set[int] = set()
    book = Ledger(
        tmp_path / "ledger", AdmissionSettings(text_budget_s=1.0), alive=lambda pid: pid not in dead
    )
    book.set_capacity("joe", 20.0)
    book.admit_text("t", "joe", "", 400.0)
    with pytest.raises(Refused):
        book.admit_text("u", "joe", "", 20.0)
    dead.add(os.getpid())  # the stub that admitted them died
    assert book.load().texts == 0


def test_capacity_follows_what_a_busy_server_makes(tmp_path: Path) -> None:
    clock = Clock()
    book = ledger(tmp_path, clock, text_budget_s=100.0)
    texts = [book.admit_text(f"t{i}", "joe", "", 400.0) for i in range(4)]  # 80 s of work
    for _ in range(10):  # busy throughout, making 10 audio-s/s where 20 was assumed
        clock.now += WINDOW_S
        book.completed(texts[0], 10.0 * WINDOW_S)
    assert 10.0 < book.capacity("joe") < 11.0
    for text in texts:
        book.release(text)
    for _ in range(10):  # idle windows that make little never lower it
        clock.now += WINDOW_S
        book.completed(texts[0], 1.0)
    assert 10.0 < book.capacity("joe") < 11.0
    book.set_capacity("joe", 5.0, pinned=True)
    clock.now += WINDOW_S
    book.completed(texts[0], 100.0)  # more than 5 a second, yet a pinned figure stays
    assert book.capacity("joe") == 5.0


def test_a_voice_its_own_model_measures_is_apart_from_the_windows(tmp_path: Path) -> None:
    """XTTS: its model reports its capacity (the default first, then busy windows' throughput,
    30 % of the way), which the chunk voices' windows neither rescale nor are skewed by;
    its texts still share the machine with theirs, in machine-seconds."""
    clock = Clock()
    book = ledger(tmp_path, clock, text_budget_s=100.0)
    assert book.observe_capacity("xtts", None, 0.2) == pytest.approx(0.2)
    assert book.observe_capacity("xtts", 1.2, 0.2) == pytest.approx(0.5)  # busy: 0.2 + 0.3 x 1.0
    assert book.observe_capacity("xtts", 0.1, 0.2, busy=False) == pytest.approx(0.5)  # idle: no lower
    assert book.observe_capacity("xtts", 1.5, 0.2, busy=False) == pytest.approx(0.8)  # made more
    assert book.observe_capacity("xtts", None, 0.2) == pytest.approx(0.8)  # a restarted model keeps it
    xtts = book.admit_text("x", "xtts", "", 8.0)  # 10 machine-seconds at 0.8 audio-s/s
    assert xtts.remaining_s == pytest.approx(10.0)
    with pytest.raises(Refused, match=r"would wait ~10\.0 s"):
        book.admit_text("j", "joe", "", 20.0, budget_s=5.0)  # joe waits for XTTS's work
    for _ in range(10):  # XTTS makes far more than its figure: joe's windows neither see it
        clock.now += WINDOW_S  # nor count its waiting text as a busy joe
        book.completed(xtts, 0.1)
    assert book.capacities()["joe"][:2] == (20.0, "warm-up")
    assert book.load().text_work_s == pytest.approx(10.0 - 10 * 0.1 / 0.8)
    joe = [book.admit_text(f"t{i}", "joe", "", 400.0) for i in range(4)]
    for _ in range(10):  # joe's busy windows at half its figure leave XTTS's alone
        clock.now += WINDOW_S
        book.completed(joe[0], 10.0 * WINDOW_S)
    capacity, source, _ = book.capacities()["xtts"]
    assert book.capacity("joe") < 11.0 and capacity == pytest.approx(0.8) and source == "model"
    book.set_capacity("xtts", 3.0, pinned=True)  # an operator's figure stays
    assert book.observe_capacity("xtts", 30.0, 0.2) == 3.0


def test_the_xtts_model_judges_its_throughput_window_by_window() -> None:
    from triton_tts.xtts.capacity import ThroughputWindow

    clock = Clock()
    window = ThroughputWindow(5.0, clock)
    window.made(2.0)
    assert window.sample(busy=True) is None  # the window is not over
    clock.now += 5.0
    window.made(3.0)
    assert window.sample(busy=True) == (1.0, True)  # 5 s of audio in 5 s, busy throughout
    window.sample(busy=False)  # one idle moment makes the next window not busy
    clock.now += 10.0
    window.made(1.0)
    assert window.sample(busy=True) == (0.1, False)


def test_an_unmeasured_voice_starts_at_the_default(tmp_path: Path) -> None:
    book = Ledger(tmp_path / "ledger")
    work = book.admit_text("t", "baker", "", DEFAULT_CAPACITY)
    assert work.remaining_s == pytest.approx(1.0)


def _admit_many(directory: str, count: int, out: multiprocessing.Queue, done: Any) -> None:  # type: ignore[type-arg]
    book = Ledger(directory, AdmissionSettings(text_budget_s=10.0))
    admitted = 0
    for i in range(count):
        try:
            book.admit_text(f"{os.getpid()}-{i}", "joe", "", 20.0)
            admitted += 1
        except Refused:
            pass
    out.put(admitted)
    # Alive until every worker has admitted: the ledger drops a dead process's work, so a
    # worker that exited early would free the budget for one that started late.
    done.wait(60)


def test_processes_share_one_ledger(tmp_path: Path) -> None:
    """tts's instances and tts_stream are processes of their own: four admitting at once
    admit exactly what one budget holds (one machine-second each, 10 s of budget)."""
    directory = tmp_path / "ledger"
    Ledger(directory).set_capacity("joe", 20.0)
    out: multiprocessing.Queue = multiprocessing.Queue()  # type: ignore[type-arg]
    done = multiprocessing.Event()
    workers = [
        multiprocessing.Process(target=_admit_many, args=(str(directory), 10, out, done)) for _ in range(4)
    ]
    for w in workers:
        w.start()
    try:
        admitted = sum(out.get(timeout=60) for _ in workers)
    finally:
        done.set()
        for w in workers:
            w.join()
    assert admitted == 11  # 0 ... 10 s ahead


@settings(max_examples=60, deadline=None)
@given(
    st.lists(
        st.tuples(st.sampled_from(["text", "stream", "done", "release"]), st.floats(0.1, 300.0)),
        max_size=40,
    )
)
def test_the_ledger_stays_consistent(
    tmp_path_factory: pytest.TempPathFactory, steps: list[tuple[str, float]]
) -> None:
    """Whatever comes in any order: no negative work, the ledger holds exactly what was
    admitted and not released, and every text admitted found its wait within budget."""
    book = ledger(tmp_path_factory.mktemp("ledger"), text_budget_s=5.0)
    held: list[Work] = []
    for kind, seconds in steps:
        before = book.load()
        try:
            if kind == "text":
                held.append(book.admit_text(f"t{len(held)}", "joe", "", seconds))
                assert before.text_wait_s <= 5.0
            elif kind == "stream":
                held.append(book.admit_stream(f"s{len(held)}", "joe", "", seconds, seconds / 10, 10.0))
            elif held and kind == "done":
                book.completed(held[-1], seconds, first=True)
            elif held:
                book.release(held.pop(0))
        except Refused as refusal:
            assert refusal.retry_after_s >= 0.1
    load = book.load()
    assert load.texts + load.streams == len(held)
    assert load.text_work_s >= 0 and load.first_work_s >= 0 and load.stream_demand >= 0


# -- through real servers ----------------------------------------------------------------


def test_predicted_work_matches_served_prose(server: TritonServer, voice_dir: Path) -> None:
    """Admission predicts a text's audio from the voice's prose rate (limits.RATE_TEXTS):
    held-out prose, served with the defaults, is within 20 % of the prediction, all
    together and each sentence. A rate from the dense chunk-bound texts overcounted
    ordinary sentences by ~40 % and refused a flood the machine could serve."""
    held_out = [*SENTENCES[1:4], PARAGRAPH]
    assert not set(held_out) & set(RATE_TEXTS)
    rate = calibrate(voice_dir)
    reader = TextReader(Voice.load(voice_dir))
    client = grpcclient.InferenceServerClient(server.grpc_url)
    try:
        pairs = []
        for text in held_out:
            result = client.infer("tts", tts_inputs(grpcclient, text))
            served = result.as_numpy("AUDIO").size / int(result.as_numpy("SAMPLE_RATE").reshape(-1)[0])
            pairs.append((served, rate.audio_seconds(len(reader.normalize(text)), None, None)))
    finally:
        client.close()
    ratios = [served / predicted for served, predicted in pairs]
    assert all(0.75 < r < 1.33 for r in ratios), ratios
    total = sum(served for served, _ in pairs) / sum(predicted for _, predicted in pairs)
    assert 0.8 < total < 1.25, ratios


@pytest.fixture(scope="module")
def tight(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[TritonServer]:
    """The defaults, paced streams included, with budgets of one second for texts and for a
    stream's wait for room (so that refusals come at once)."""
    folder = tmp_path_factory.mktemp("admission")
    options = BuildOptions(text_budget_ms=1000, stream_wait_ms=1000)
    with default_voice_server(
        folder / "model_repository", folder / "tritonserver.log", voice_dir, options
    ) as running:
        yield running


def test_work_beyond_the_budget_is_refused_at_once_with_a_hint(tight: TritonServer) -> None:
    def call() -> None:
        client = grpcclient.InferenceServerClient(tight.grpc_url)
        try:
            client.infer("tts", tts_inputs(grpcclient, PARAGRAPH))
        finally:
            client.close()

    outcomes = flood(8, call)
    ok = [o for o in outcomes if o[0] == "ok"]
    refused = [o for o in outcomes if o[0] != "ok"]
    assert ok and refused, outcomes
    assert {o[0] for o in refused} == {"StatusCode.UNAVAILABLE"}, refused
    assert all("would wait" in o[1] and (retry_hint(o[1]) or 0) > 0 for o in refused), refused
    # refused before any work: each came back before the first accepted text was answered
    # (all were released together)
    assert max(o[2] for o in refused) < min(o[2] for o in ok), outcomes
    # over HTTP: 503, and the client library carries the hint and honours it
    busy = threading.Thread(target=call)
    busy.start()
    time.sleep(0.5)  # the paragraph is admitted and takes longer than the budget
    with TTSClient(tight.http_url, "http", retry=NO_RETRIES) as impatient:
        with pytest.raises(ServerBusy) as refusal:  # the client waits half a second at most
            impatient.synthesize(PARAGRAPH, max_wait_s=0.5)
        assert refusal.value.retry_after_s is not None and refusal.value.retry_after_s > 0
    with TTSClient(tight.http_url, "http", retry=RetryPolicy(attempts=30)) as patient:
        assert patient.synthesize(PARAGRAPH).duration_s > 20
    busy.join()
    refused_seconds = metric_total(
        tight.metrics_port, "triton_tts_demanded_audio_seconds_total", model="tts", outcome="refused"
    )
    assert refused_seconds > 0


class Listener:
    """A paced stream that has had its first chunk (a client of its own: tritonclient's
    gRPC client holds one stream at a time); close() leaves, which cancels it."""

    def __init__(self, server: TritonServer, text: str = PARAGRAPH, **options: object) -> None:
        self.client = TTSClient(server.grpc_url, "grpc", retry=NO_RETRIES)
        self.chunks = self.client.stream(text, **options)  # type: ignore[arg-type]
        try:
            self.first = next(self.chunks)
        except BaseException:
            self.client.close()
            raise

    def close(self) -> None:
        self.chunks.close()
        self.client.close()


def _streams_in_ledger(server: TritonServer, count: int) -> bool:
    assert server.admission_dir is not None
    book = Ledger(server.admission_dir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if book.load().streams == count:
            return True
        time.sleep(0.2)
    return False


@pytest.fixture
def pinned(tight: TritonServer) -> Iterator[Ledger]:
    """The tight server's ledger, its capacity given back afterwards."""
    assert tight.admission_dir is not None
    book = Ledger(tight.admission_dir)
    yield book
    book.set_capacity("joe", tight.capacity["joe"][0])


def test_listener_admission_follows_demand(tight: TritonServer, pinned: Ledger) -> None:
    """At a pinned capacity of 3 s of audio a second, 85 % of it holds two listeners; a
    third is refused until one leaves; at 10x the capacity, ten more come in."""
    pinned.set_capacity("joe", 3.0, pinned=True)
    listening = [Listener(tight) for _ in range(2)]
    try:
        with pytest.raises(ServerBusy, match="listeners take") as refusal:
            Listener(tight)
        assert refusal.value.retry_after_s is not None
        listening.pop().close()
        assert _streams_in_ledger(tight, 1)
        listening.append(Listener(tight))
        pinned.set_capacity("joe", 30.0, pinned=True)
        listening += [Listener(tight) for _ in range(10)]
        assert pinned.load().streams == 12
    finally:
        for listener in listening:
            listener.close()
    assert _streams_in_ledger(tight, 0)


def test_a_greedy_caller_cannot_starve_polite_ones(tight: TritonServer, pinned: Ledger) -> None:
    """One caller with many slow, long streams and long texts gets its share: half the
    listeners' room, half the text budget. The polite callers are still served."""
    pinned.set_capacity("joe", 6.0, pinned=True)  # room for 5 listeners, 2 of them greedy's
    slow = "\n".join([PARAGRAPH] * 4)
    listening: list[Listener] = []
    try:
        with pytest.raises(ServerBusy, match="caller 'greedy'"):
            for _ in range(10):
                listening.append(Listener(tight, slow, speed=0.25, caller="greedy"))
        assert len(listening) == 2
        listening += [Listener(tight, caller=f"polite-{i}") for i in range(3)]
        assert all(listener.first.audio.size for listener in listening)
    finally:
        for listener in listening:
            listener.close()
    assert _streams_in_ledger(tight, 0)
    # texts: the greedy caller's first long text is admitted (nothing was ahead of it), its
    # next ones are refused while polite callers' sentences are served
    done: list[float] = []

    def greedy_text() -> None:
        with TTSClient(tight.grpc_url, "grpc", retry=NO_RETRIES) as tts:
            done.append(tts.synthesize(PARAGRAPH, caller="greedy").duration_s)

    first = threading.Thread(target=greedy_text)
    first.start()
    try:
        assert _text_admitted(tight)
        with TTSClient(tight.grpc_url, "grpc", retry=NO_RETRIES) as tts:
            with pytest.raises(ServerBusy, match="caller 'greedy'"):
                tts.synthesize(PARAGRAPH, caller="greedy")
            polite = [tts.synthesize(SENTENCES[i], caller=f"polite-{i}") for i in range(3)]
        assert all(result.duration_s > 0.5 for result in polite)
    finally:
        first.join()
    assert done and done[0] > 20


def _text_admitted(server: TritonServer) -> bool:
    assert server.admission_dir is not None
    book = Ledger(server.admission_dir)
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        if book.load().texts:
            return True
        time.sleep(0.05)
    return False


def test_the_gpu_check_reports_what_admission_takes_of_a_gpu() -> None:
    """benchmarks/gpu_vocoder_check.py (run on a lent GPU) derives capacity figures from its
    batch sweep: the best batch, the batch the start-up burst forms, the listeners admitted."""
    from benchmarks.gpu_vocoder_check import capacity

    sweep = [
        {"dtype": "fp16", "batch": b, "x_real_time": x}
        for b, x in [(1, 100.0), (8, 600.0), (16, 900.0), (32, 1000.0)]
    ]
    (row,) = capacity(sweep, burst_batch=16)
    assert (row["best_batch"], row["burst_batch"]) == (32, 16)
    assert row["burst_share_of_best"] == pytest.approx(0.9)
    assert row["listeners_admitted"] == int((1 - AdmissionSettings().stream_headroom) * 1000)


def test_stream_chunks_are_ordered_by_deadline() -> None:
    """First chunks first; then the less audio a listener has left, the sooner; texts (the
    default level, which BLS requests get) last, below a stream however far ahead."""
    from triton_tts.runtime.priorities import DEFAULT_PRIORITY, FIRST_CHUNK_PRIORITY, chunk_priority

    levels = [chunk_priority(1, lead) for lead in (0.5, 2.0, 3.0, 6.0, 30.0)]
    assert chunk_priority(0, 30.0) == FIRST_CHUNK_PRIORITY < levels[0]
    assert levels == sorted(levels) and len(set(levels)) == 3
    assert max(levels) < DEFAULT_PRIORITY


def test_a_burst_of_streams_gets_shorter_first_chunks(tmp_path: Path) -> None:
    """The more first chunks wait ahead, the shorter a new stream's (down to half), so a
    burst's last listener hears audio sooner; streams alone keep the plan's."""
    from triton_tts.runtime.chunking import ChunkPlan, split_text

    book = ledger(tmp_path)
    scales = []
    for i in range(12):
        scales.append(book.load().first_chunk_scale)
        book.admit_stream(f"s{i}", "joe", "", 60.0, 0.5, 10.0)
    assert scales[0] == 1.0 and scales == sorted(scales, reverse=True) and scales[-1] == 0.5
    plan = ChunkPlan(40, 120, 2)
    text = "Thank you for calling the support line, how can I help you today with your order?"
    assert len(split_text(text, plan.first_shorter(0.5))[0]) <= 20 < len(split_text(text, plan)[0])
    assert plan.first_shorter(1.0) is plan and plan.first_shorter(0.1).first_chars == 16


def test_counted_admission_takes_no_work_and_no_caller(tmp_path: Path) -> None:
    """admission=requests: the ledger itself sets work and callers aside; counts bound it."""
    book = ledger(tmp_path, text_budget_s=1.0, caller_share=0.5, counted=True, max_texts=3)
    texts = [book.admit_text(f"t{i}", "joe", "greedy", 3600.0) for i in range(3)]
    assert all(t.remaining_s == 0.0 and t.caller == "" for t in texts)
    with pytest.raises(Refused, match="3 texts in progress"):
        book.admit_text("t3", "joe", "", 1.0)


def test_models_of_one_repository_share_a_ledger_by_default(tmp_path: Path) -> None:
    """Without serve's folder, each Python model is told its own folder: tts, tts_stream and
    the xtts models of one repository must still find one ledger (a different repository
    its own)."""
    from triton_tts.runtime.admission import default_directory

    repository = tmp_path / "model_repository"
    folders = [repository / name for name in ("tts", "tts_stream", "xtts__clone")]
    assert len({default_directory(str(folder)) for folder in folders}) == 1
    assert default_directory(str(tmp_path / "other" / "tts")) != default_directory(str(folders[0]))
