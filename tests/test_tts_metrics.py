"""TTS metrics on Triton's metrics port: known traffic in, exact counts out (as deltas)."""

from __future__ import annotations

import itertools
import math
import re
import time
import urllib.request

import pytest
import tritonclient.http as httpclient
from tritonclient.utils import InferenceServerException

from testkit.sample_texts import PARAGRAPH
from tests.helpers import PARAGRAPH_CHUNKS, STREAM_PARAGRAPH_CHUNKS, model_counts, stream_raw, synthesize
from triton_tts.ops.server import TritonServer
from triton_tts.runtime.metrics import (
    AUDIO_SECONDS,
    CHARACTERS,
    CHUNKS,
    FAMILIES,
    FIRST_CHUNK_SECONDS,
    PROCESSING_SECONDS,
    REAL_TIME_FACTOR,
    REQUESTS,
)

Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]
_SAMPLE = re.compile(r"([a-zA-Z_:][a-zA-Z0-9_:]*)(?:\{(.*)\})? (\S+)")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')
FLOAT_SLACK = 1e-6  # counters add doubles: rounding only


def scrape(server: TritonServer) -> tuple[Samples, dict[str, str]]:
    """Every sample on the metrics port, and each family's # TYPE."""
    with urllib.request.urlopen(f"http://localhost:{server.metrics_port}/metrics", timeout=30) as page:
        text = page.read().decode("utf-8")
    samples: Samples = {}
    types: dict[str, str] = {}
    for line in text.splitlines():
        if line.startswith("# TYPE "):
            _, _, name, kind = line.split(" ", 3)
            types[name] = kind
        elif line and not line.startswith("#") and (match := _SAMPLE.fullmatch(line)):
            labels = frozenset(_LABEL.findall(match[2] or ""))
            samples[(match[1], labels)] = float(match[3])
    return samples, types


def total(samples: Samples, name: str, **labels: str) -> float:
    """The sum over every series of ``name`` that has ``labels`` (e.g. all model_instances)."""
    wanted = set(labels.items())
    return sum(value for (n, have), value in samples.items() if n == name and wanted <= have)


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    return total(after, name, **labels) - total(before, name, **labels)


def settle(http: httpclient.InferenceServerClient, quiet_s: float = 3.0, limit_s: float = 120.0) -> int:
    """Wait until no chunk is in the works (tts_chunk's count unchanged for ``quiet_s``,
    longer than one chunk takes here), so that deltas count only the test's own traffic;
    returns that count."""
    settled, _ = model_counts(http, "tts_chunk")
    quiet, deadline = 0.0, time.monotonic() + limit_s
    while quiet < quiet_s and time.monotonic() < deadline:
        time.sleep(0.5)
        now, _ = model_counts(http, "tts_chunk")
        quiet = quiet + 0.5 if now == settled else 0.0
        settled = now
    return settled


def test_every_family_is_served_with_its_kind(server: TritonServer, http) -> None:
    # Some series appear with the first request (the ledger's capacity, per voice).
    synthesize(http, "Hello there.")
    _, types = scrape(server)
    for family in FAMILIES:
        assert types.get(family.name) == family.kind.lower(), family.name
    assert "nv_inference_request_success" in types  # next to Triton's own


def test_ok_requests_add_their_characters_audio_chunks_and_rtf(server: TritonServer, http) -> None:
    texts = ["Hello there.", "Café prices rose by 3% this year.", PARAGRAPH]
    settle(http)
    before, _ = scrape(server)
    results = [synthesize(http, text) for text in texts]
    after, _ = scrape(server)

    tts = {"model": "tts"}
    joe = {"model": "tts", "voice": "joe"}
    assert delta(before, after, REQUESTS.name, reason="ok", **tts) == len(texts)
    for reason in ("invalid", "busy", "cancelled", "failed"):
        assert delta(before, after, REQUESTS.name, reason=reason, **tts) == 0
    # characters are code points of the text as sent ("é" is one), not bytes
    assert delta(before, after, CHARACTERS.name, **joe) == sum(len(t) for t in texts)
    audio_s = sum(len(audio) / rate for audio, rate in results)
    assert delta(before, after, AUDIO_SECONDS.name, **joe) == pytest.approx(audio_s, abs=FLOAT_SLACK)
    assert delta(before, after, CHUNKS.name + "_count", **tts) == len(texts)
    # by hand: one sentence each, then PARAGRAPH's chunks (tests/helpers.py), a multi-chunk one
    assert delta(before, after, CHUNKS.name + "_sum", **tts) == 1 + 1 + PARAGRAPH_CHUNKS
    assert delta(before, after, CHUNKS.name + "_bucket", le="1", **tts) == 2
    processing_s = delta(before, after, PROCESSING_SECONDS.name, **joe)
    assert 0 < processing_s < 300
    assert delta(before, after, REAL_TIME_FACTOR.name + "_count", **joe) == len(texts)
    rtf_sum = delta(before, after, REAL_TIME_FACTOR.name + "_sum", **joe)
    assert 0 < rtf_sum < len(texts) * max(1.0, processing_s)  # one ratio per request
    # nothing of this reached tts_stream
    assert delta(before, after, REQUESTS.name, model="tts_stream") == 0


def test_refused_requests_count_once_by_reason(server: TritonServer, http) -> None:
    before, _ = scrape(server)
    for text, options in (("", {}), ("Too fast.", {"SPEED": 100.0}), ("Who?", {"VOICE": "nobody"})):
        with pytest.raises(InferenceServerException) as info:
            synthesize(http, text, **options)
        assert info.value.status() == "400"
    after, _ = scrape(server)
    assert delta(before, after, REQUESTS.name, model="tts", reason="invalid") == 3
    assert delta(before, after, REQUESTS.name, model="tts", reason="ok") == 0
    assert delta(before, after, CHARACTERS.name, model="tts") == 0


def test_streams_add_chunks_audio_and_first_chunk_latency(server: TritonServer, http) -> None:
    texts = ["A short stream.", PARAGRAPH]
    settle(http)
    before, _ = scrape(server)
    streams = []
    for text in texts:
        chunks, errors = stream_raw(server.grpc_url, text)
        assert not errors and chunks[-1]["last"]
        streams.append(chunks)
    refused, errors = stream_raw(server.grpc_url, "")
    assert not refused and errors
    after, _ = scrape(server)

    stream = {"model": "tts_stream"}
    joe = {"model": "tts_stream", "voice": "joe"}
    assert delta(before, after, REQUESTS.name, reason="ok", **stream) == len(texts)
    assert delta(before, after, REQUESTS.name, reason="invalid", **stream) == 1
    assert delta(before, after, CHARACTERS.name, **joe) == sum(len(t) for t in texts)
    assert delta(before, after, CHUNKS.name + "_sum", **stream) == sum(len(c) for c in streams)
    assert sum(len(c) for c in streams) == 1 + STREAM_PARAGRAPH_CHUNKS  # by hand, as above
    audio_s = sum(len(c["audio"]) / c["rate"] for chunks in streams for c in chunks)
    assert delta(before, after, AUDIO_SECONDS.name, **joe) == pytest.approx(audio_s, abs=FLOAT_SLACK)
    first = FIRST_CHUNK_SECONDS.name
    assert delta(before, after, first + "_count", **joe) == len(texts)
    first_s = delta(before, after, first + "_sum", **joe)
    assert 0 < first_s < delta(before, after, PROCESSING_SECONDS.name, **joe)
    # le="+Inf" holds every observation; the finite buckets are cumulative
    buckets = sorted(
        (float(dict(labels)["le"]), value)
        for (name, labels), value in after.items()
        if name == first + "_bucket" and set(joe.items()) <= labels
    )
    assert buckets[-1][0] == math.inf and all(a[1] <= b[1] for a, b in itertools.pairwise(buckets))
    assert delta(before, after, REQUESTS.name, model="tts") == 0


def test_each_instance_has_its_own_series(server: TritonServer, http) -> None:
    """Labelled by instance and stub pid (see triton_tts.runtime.metrics), one set per instance."""
    samples, _ = scrape(server)
    instances = {
        dict(labels)["model_instance"]
        for (name, labels), _ in samples.items()
        if name == REQUESTS.name and ("model", "tts") in labels
    }
    configured = sum(g["count"] for g in http.get_model_config("tts")["instance_group"])
    assert len(instances) == configured
    assert all(re.fullmatch(r"tts_\d+_\d+:\d+", i) for i in instances), instances
