"""Every subtitle file answered (issue 43): generated odd SubRip and WebVTT files (bad and
reversed timings, overlaps, cues out of order, empty and markup-only cues, unspeakable
"♪♪", huge cue numbers and times, a BOM, CRLF line ends, binary junk) sent to the
gateway's ``POST /v1/audio/dub`` and to ``triton-tts dub``, through the real server.

The gateway answers 200 (a zip) or a 4xx in OpenAI's error JSON, never a 5xx, and its log
shows no traceback; the command exits 0 or 1 with one line on stderr, never a traceback.
Few examples and short cues: most files are refused before any synthesis, and each one
dubbed is a synthesis per cue on the suite's 2 cores.
"""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator

import pytest
import requests
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from tests.test_gateway import error_of, logged_gateway
from triton_tts.ops.server import TritonServer

TIMEOUT_S = 120  # a bound for a hang, not a claim about speed
EXAMPLES = settings(
    max_examples=15,
    deadline=None,
    database=None,  # the same draws each run: what failed once fails again
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow],
)

TEXTS = ["Hi.", "Ok.", "", "   ", "\u266a\u266a", "<i></i>", "{\\an8}", "<b>Go.</b>", "&amp;", "1 --> 2"]
INDICES = ["1", "2", "0", "-1", "99999999999999999999999", "x", ""]


def _clock(ms: int, fmt: str) -> str:
    hours, rest = divmod(ms, 3_600_000)
    minutes, rest = divmod(rest, 60_000)
    mark = "," if fmt == "srt" else "."
    return f"{hours:02d}:{minutes:02d}:{rest // 1000:02d}{mark}{rest % 1000:03d}"


@st.composite
def timing(draw: st.DrawFn, fmt: str, at: int) -> tuple[str, int]:
    """A cue's timing line and where the next may start: mostly a short, good slot after
    ``at``; or one ending before it starts, starting before ``at`` (overlap, out of
    order), a time past hours, a mistyped arrow or a line that is no timing at all."""
    start = at + draw(st.integers(0, 400))
    end = start + draw(st.integers(300, 1200))
    kind = draw(st.sampled_from(["good"] * 6 + ["reversed", "early", "huge", "arrow", "junk", "negative"]))
    if kind == "reversed":
        start, end = end, start
    elif kind == "early":
        start = max(0, at - draw(st.integers(1, 2000)))
    elif kind == "huge":
        end = draw(st.sampled_from([5 * 3_600_000, 10**12, 10**20]))
    line = f"{_clock(start, fmt)} --> {_clock(end, fmt)}"
    if kind == "arrow":
        line = line.replace("-->", draw(st.sampled_from(["->", "--", "==>", "—>", " --> -->"])))
    elif kind == "junk":
        line = draw(st.sampled_from(["00:00:01", "-->", "1:2:3 --> 4:5:6", "\x00\x01\x02"]))
    elif kind == "negative":
        line = f"-{line}"
    return line, max(end, at)


@st.composite
def subtitle_files(draw: st.DrawFn) -> tuple[str, bytes]:
    """(file name, bytes): a SubRip or WebVTT file of one to three short cues, odd in a few
    ways, or now and then bytes that are no text."""
    fmt = draw(st.sampled_from(["srt", "vtt"]))
    if draw(st.integers(0, 9)) == 5:
        return f"film.{fmt}", draw(st.binary(max_size=64))
    blocks, at = [], 0
    for n in range(1, draw(st.integers(1, 3)) + 1):
        line, at = draw(timing(fmt, at))
        text = draw(st.sampled_from(TEXTS[:2] * 4 + TEXTS))
        head = [draw(st.sampled_from([str(n)] * 4 + INDICES))] if fmt == "srt" else []
        if fmt == "vtt" and draw(st.booleans()):
            head = [draw(st.sampled_from([f"cue-{n}", "NOTE odd", "STYLE", "x --> y"]))]
        blocks.append("\n".join([*head, line, text]))
    if fmt == "vtt" and draw(st.integers(0, 5)) != 3:
        blocks.insert(0, "WEBVTT")
    body = "\n\n".join(blocks) + draw(st.sampled_from(["\n", "", "\n\n\n"]))
    if draw(st.booleans()):
        body = body.replace("\n", "\r\n")
    data = body.encode()
    if draw(st.integers(0, 3)) == 2:
        data = "\ufeff".encode() + data
    if draw(st.integers(0, 9)) == 4:
        data += draw(st.sampled_from([b"\xff\xfe", b"\x00", b"\xc3\x28"]))
    return f"film.{fmt}", data


@pytest.fixture(scope="module")
def dub_gateway(server: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[
    tuple[str, Callable[[], str]]
]:  # fmt: skip
    log_path = tmp_path_factory.mktemp("dub-fuzz") / "gateway.log"
    with logged_gateway(server.grpc_url, log_path) as running:
        yield running
        assert "Traceback" not in running[1](), running[1]()[-6000:]


SUNG = ("film.srt", "1\n00:00:00,000 --> 00:00:01,000\n\u266a\u266a\n".encode())
HUGE = ("film.vtt", b"WEBVTT\n\n00:00.000 --> 99999999999999:00:00.000\nHi.\n")
EMPTY = ("film.srt", b"1\n00:00:00,000 --> 00:00:01,000\n<i></i>\n")


@EXAMPLES
@given(upload=subtitle_files(), strict=st.booleans())
@example(upload=SUNG, strict=False)
@example(upload=HUGE, strict=False)
@example(upload=EMPTY, strict=True)
def test_the_gateway_answers_every_subtitle_file_with_a_zip_or_a_4xx(
    dub_gateway: tuple[str, Callable[[], str]], upload: tuple[str, bytes], strict: bool
) -> None:
    base, read_log = dub_gateway
    data = {"strict": "true"} if strict else {}
    answer = requests.post(f"{base}/v1/audio/dub", files={"file": upload}, data=data, timeout=TIMEOUT_S)
    event(
        f"{answer.status_code}" + (f" {answer.json()['error']['code']}" if answer.status_code != 200 else "")
    )
    assert answer.status_code < 500, (answer.status_code, answer.text[:300], upload)
    if answer.status_code == 200:
        assert answer.headers["content-type"] == "application/zip"
    else:
        error = error_of(answer.content)
        assert error["type"] == "invalid_request_error" and error["code"], error
        assert error["param"] == "file", (error, upload)
    assert "Traceback" not in read_log(), read_log()[-6000:]


@EXAMPLES
@given(upload=subtitle_files())
@example(upload=SUNG)
@example(upload=HUGE)
def test_the_dub_command_exits_cleanly_on_every_subtitle_file(
    server: TritonServer, tmp_path_factory: pytest.TempPathFactory, upload: tuple[str, bytes]
) -> None:
    folder = tmp_path_factory.mktemp("dub-cli")
    cues = folder / upload[0]
    cues.write_bytes(upload[1])
    done = subprocess.run(
        [sys.executable, "-m", "triton_tts.cli", "dub", str(cues), "-o", str(folder / "dub.wav"),
         "--url", server.grpc_url, "--protocol", "grpc", "--no-progress"],
        capture_output=True, text=True, timeout=TIMEOUT_S, check=False,
    )  # fmt: skip
    event(f"exit {done.returncode}")
    assert "Traceback" not in done.stderr, done.stderr
    lines = [line for line in done.stderr.splitlines() if line.strip()]
    if done.returncode == 0:  # each cue left silent gets its line; nothing else
        assert all(line.startswith("triton-tts: ") for line in lines), done.stderr
        assert (folder / "dub.wav").stat().st_size > 44
    else:
        assert done.returncode == 1 and len(lines) == 1, (done.returncode, done.stderr)
        assert lines[0].startswith(f"triton-tts: {upload[0]}"), lines
