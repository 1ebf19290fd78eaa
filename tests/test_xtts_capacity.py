"""XTTS's capacity: the scheduler alone (no server: generations decoding together give each
the codes it gets alone, and the stream, chunk by chunk with XTTS's overlap and
crossfade, is the whole decode but at its joins), a one-slot server (beyond the slots
requests wait, beyond the wait they are refused), and XTTS texts admitted by their work
in the ledger the chunk voices share."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest
import tritonclient.grpc as grpcclient
from google.protobuf import text_format

from tests.helpers import metric_total, stream_model, wait_until
from tests.xtts_kit import (
    GREEDY,
    XTTS_CAPACITY,
    clip,
    long_text_inputs,
    run_jobs,
    stream_errors,
    stream_xtts,
    xtts_inputs,
)
from triton_tts.ops.server import TritonServer, free_port
from triton_tts.runtime.admission import Ledger, retry_after
from triton_tts.xtts import defaults as xtts_defaults
from triton_tts.xtts.runner import XttsRunner
from triton_tts.xtts.scheduler import OVERLAP, Scheduler

pytestmark = [pytest.mark.server, pytest.mark.export]


def test_generations_batched_together_get_the_codes_they_get_alone(runner: XttsRunner) -> None:
    cond = runner.conditioning(clip(3, 5.0))
    prompts = [[5, 17, 40, 22, 9], [31, 8, 77, 12, 60, 44, 19, 3, 51], [90, 14]]
    alone = [runner.generate(cond.style, ids, GREEDY).codes for ids in prompts]
    pool = runner.pool(4)
    gens = [runner.start(cond.style, ids, GREEDY, pool=pool) for ids in prompts]
    assert [g.slot for g in gens] == [0, 1, 2]
    sizes = []
    while not all(g.done for g in gens):
        sizes.append(runner.step(gens))
        for g in gens:  # a finished generation leaves at once; the last slot moves into its place
            if g.done and g.slot >= 0:
                pool.release(g)
    assert [g.codes for g in gens] == alone
    assert max(sizes) == 3 and pool.live == 0


def test_a_stream_is_the_whole_decode_but_at_its_joins(runner: XttsRunner) -> None:
    cond = runner.conditioning(clip(4, 6.0))
    ids = [12, 40, 7, 33, 28, 5]
    scheduler = Scheduler(runner, slots=2)
    try:
        (result,) = run_jobs(scheduler, [([ids], cond, GREEDY, 0)])
    finally:
        scheduler.stop()
    chunks = result["chunks"]
    assert len(chunks) == 3 and [last for _, last in chunks] == [False, False, True]
    stream = np.concatenate([audio for audio, _ in chunks])
    gen = runner.generate(cond.style, ids, GREEDY)
    whole = runner.waveform(np.stack(gen.latents), cond.speaker)
    assert stream.shape == whole.shape  # nothing lost, nothing repeated (XTTS drops its last overlap)
    # Between joins the stream is the whole decode; at a join the crossfade keeps it continuous.
    joins = np.cumsum([audio.shape[0] for audio, _ in chunks])[:-1]
    away = np.ones(whole.shape[0], dtype=bool)
    for j in joins:
        away[max(j - 4 * OVERLAP, 0) : j + OVERLAP] = False
    assert np.abs(stream[away] - whole[away]).max() < 1e-4
    step = np.abs(np.diff(whole)).max()
    for j in joins:
        assert abs(float(stream[j]) - float(stream[j - 1])) <= 2 * step  # no click at the join


@pytest.fixture(scope="module")
def one_slot_server(
    voice_dir: Path, xtts_voice: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[TritonServer]:
    """Raised limits for the test (not the shipped ones): one cache slot, one waiting."""
    from triton_tts.build.model_configs import HEADER, parse
    from triton_tts.ops.repository import build_repository

    repo = build_repository([voice_dir, xtts_voice], tmp_path_factory.mktemp("xtts-one") / "model_repository")
    path = repo / "xtts" / "config.pbtxt"
    config = parse(path.read_text(encoding="utf-8"))
    config.parameters["slots"].string_value = "1"
    config.parameters["max_waiting"].string_value = "1"
    path.write_text(HEADER + text_format.MessageToString(config), encoding="utf-8")
    log_file = tmp_path_factory.mktemp("logs") / "tritonserver-xtts-one.log"
    with TritonServer(repo, http_port=free_port(), grpc_port=free_port(), metrics_port=free_port(),
                      log_file=log_file) as running:  # fmt: skip
        yield running


def test_beyond_the_slots_requests_wait_and_beyond_the_wait_they_are_refused(
    one_slot_server: TritonServer,
) -> None:
    results: list[Any] = [None] * 3

    def run(i: int) -> None:
        # The first holds the slot for a while (four sentences); the others are short.
        text = " ".join([f"Request {i} of three, each several words long."] * (4 if i == 0 else 1))
        results[i] = stream_xtts(one_slot_server.grpc_url, xtts_inputs(text, clip(50 + i, 3.0), SEED=i))

    def at_model() -> float:
        return metric_total(one_slot_server.metrics_port, "tts_xtts_generations")

    threads = []
    for i in range(3):
        threads.append(threading.Thread(target=run, args=(i,)))
        threads[-1].start()
        if i < 2:  # the first takes the slot, the second waits
            wait_until(lambda: at_model() >= len(threads), 60, "the request to reach the model")
    for t in threads:
        t.join(300)
    refused = [errors for chunks, errors in results if errors]
    served = [chunks for chunks, errors in results if not errors]
    assert len(served) == 2 and all(chunks[-1]["last"] for chunks in served)
    assert len(refused) == 1 and "UNAVAILABLE" in refused[0][0] and "at capacity" in refused[0][0]
    # One slot: no step ran two generations.
    assert metric_total(one_slot_server.metrics_port, "tts_xtts_decode_steps_total", batch="2") == 0


@pytest.fixture
def xtts_ledger(xtts_server: TritonServer) -> Iterator[Ledger]:
    """The server's ledger, the XTTS voice's capacity pinned for the test and handed back
    to the model's own measurement afterwards."""
    assert xtts_server.admission_dir is not None
    book = Ledger(xtts_server.admission_dir)
    before, source, _ = book.capacities()["xtts"]
    assert source == "model"  # the xtts model reports its own capacity to the shared ledger
    book.set_capacity("xtts", XTTS_CAPACITY, pinned=True)
    yield book
    book.set_capacity("xtts", before)
    book.observe_capacity("xtts", None, xtts_defaults.CAPACITY)


def test_xtts_texts_are_admitted_by_their_work_in_the_shared_ledger(
    xtts_server: TritonServer, xtts_ledger: Ledger
) -> None:
    """tts and tts_stream admit an XTTS voice's text in the ledger the chunk voices share,
    by its predicted work: while a long stream's work is admitted, a text that may wait
    1 ms is refused at once (busy, with a retry hint) by both, before the stream ends; one
    that states no deadline is served; the work shows while it runs and is gone after."""
    import tritonclient.http as httpclient
    from tritonclient.utils import InferenceServerException

    # ~1,100 characters: ~77 s of audio, ~19 s of work at the pinned capacity (within the
    # default budget), and twenty segments for the tiny model to decode.
    text = " ".join(f"Line {i} of a text that keeps the model busy." for i in range(20))
    reference = clip(70, 3.0)
    ahead: list[Any] = []
    runner = threading.Thread(
        target=lambda: ahead.append(
            stream_model(
                xtts_server.grpc_url, "tts_stream", long_text_inputs(grpcclient, text, "xtts", reference)
            )
        )
    )
    runner.start()
    try:
        wait_until(lambda: xtts_ledger.load().texts == 1, 60, "the stream's work in the ledger")
        assert metric_total(xtts_server.metrics_port, "triton_tts_admitted_work_seconds") > 0
        short = long_text_inputs(httpclient, "Hello there.", "xtts", reference)
        http = httpclient.InferenceServerClient(xtts_server.http_url, network_timeout=300)
        try:
            with pytest.raises(InferenceServerException, match="server busy") as refused:
                http.infer("tts", short, parameters={"max_wait_ms": 1})
            assert refused.value.status() == "503" and (retry_after(str(refused.value)) or 0) > 0
            streamed = long_text_inputs(grpcclient, "Hello there.", "xtts", reference)
            errors = stream_errors(xtts_server.grpc_url, streamed, {"max_wait_ms": 1})
            assert len(errors) == 1 and "server busy" in errors[0] and retry_after(errors[0]), errors
            assert not ahead, "the stream ended before the refusals: they prove nothing"
            served = http.infer("tts", short)  # no deadline: the default budget holds the work ahead
            assert served.as_numpy("AUDIO").size > 0
        finally:
            http.close()
    finally:
        runner.join(300)
    ((chunks, errors),) = ahead
    assert not errors and chunks[-1]["last"]
    wait_until(lambda: xtts_ledger.load().texts == 0, 30, "the XTTS work to leave the ledger")
    assert xtts_ledger.load().text_work_s == 0
