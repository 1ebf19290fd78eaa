"""One key for every way in: `triton-tts serve` with TRITON_TTS_API_KEY and an admin key,
tried at each door as a caller would (docs/api.md, "Keys").

- Triton's HTTP and gRPC inference, metadata, model config and statistics need the API
  key (the first of TRITON_TTS_API_KEY's keys), health and the probes do not;
- every other Triton API (what changes state) needs the admin key;
- the gateway takes every key, and reaches Triton with the first;
- what the product calls itself carries the keys: the loopback of first chunks, the
  capacity measurement, the gateway, the CLI, perf_analyzer through benchmarks.perf;
- no key reaches a log line.
"""

from __future__ import annotations

import ipaddress
import json
import os
import socket
import subprocess
import sys
import urllib.error
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import openai
import pytest
import tritonclient.grpc as grpcclient
from tritonclient.utils import InferenceServerException

from tests.helpers import tts_inputs, wait_until
from tests.test_lifecycle import Serve
from triton_tts.client import TTSClient, Unauthorized, auth_headers
from triton_tts.ops.keys import key_headers
from triton_tts.ops.server import free_port

pytestmark = pytest.mark.server  # its own servers (module fixtures)

API_KEYS = ("first-key-4f1c", "second-key-9a2e")  # TRITON_TTS_API_KEY="first,second"
ADMIN_KEY = "admin-key-7d03"
TEXT = "The keys are checked at every door."


@pytest.fixture(scope="module")
def keyed(voice_dir: Path, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Serve, int]]:
    gateway_port = free_port()
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRITON_TTS_API_KEY", ",".join(API_KEYS))
        env.setenv("TRITON_TTS_ADMIN_KEY", ADMIN_KEY)
        serve = Serve.start(voice_dir, tmp_path_factory.mktemp("keyed"), "--gateway-port", str(gateway_port))
    try:
        wait_until(lambda: "triton-tts is ready" in serve.output(), 300, "serve with keys to be ready")
        yield serve, gateway_port
    finally:
        serve.stop()
        serve.close()


def request(url: str, headers: dict[str, str] | None = None, body: bytes | None = None) -> tuple[int, str]:
    req = urllib.request.Request(url, data=body, headers=headers or {}, method="POST" if body else "GET")
    try:
        with urllib.request.urlopen(req, timeout=60) as response:
            return int(response.status), response.read().decode("utf-8", errors="replace")
    except urllib.error.HTTPError as err:
        return err.code, err.read().decode("utf-8", errors="replace")


def infer_body() -> bytes:
    tensor = {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [TEXT]}
    return json.dumps({"inputs": [tensor]}).encode()


def test_triton_http_needs_the_first_key_and_health_stays_open(keyed: tuple[Serve, int]) -> None:
    serve, _ = keyed
    base = f"http://localhost:{serve.http_port}"
    for path in ("/v2/health/ready", "/v2/health/live", "/v2/models/tts/ready"):
        assert request(base + path)[0] == 200, path
    infer = f"{base}/v2/models/tts/infer"
    refused, message = request(infer, body=infer_body())
    assert refused == 403 and "authorization" in message
    assert request(infer, {"Authorization": "Bearer wrong"}, infer_body())[0] == 403
    # Triton compares one header value: the gateway's other keys do not open its ports
    assert request(infer, {"Authorization": f"Bearer {API_KEYS[1]}"}, infer_body())[0] == 403
    status, answer = request(infer, {"Authorization": f"Bearer {API_KEYS[0]}"}, infer_body())
    assert status == 200 and json.loads(answer)["outputs"]
    for path in ("/v2", "/v2/models/tts", "/v2/models/tts/config"):  # metadata, config
        assert request(base + path)[0] == 403, path
        assert request(base + path, {"authorization": f"Bearer {API_KEYS[0]}"})[0] == 200, path


def test_triton_grpc_needs_the_key(keyed: tuple[Serve, int]) -> None:
    serve, _ = keyed
    url = f"localhost:{serve.grpc_port}"
    raw = grpcclient.InferenceServerClient(url)
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            raw.infer("tts", tts_inputs(grpcclient, TEXT))
        assert raw.is_server_ready() and raw.is_model_ready("tts")  # health: open
        result = raw.infer("tts", tts_inputs(grpcclient, TEXT), headers=auth_headers(API_KEYS[0], "grpc"))
        assert result.as_numpy("AUDIO").size > 0
    finally:
        raw.close()
    with TTSClient(url, "grpc", api_key="wrong") as wrong, pytest.raises(Unauthorized, match="API key"):
        wrong.synthesize(TEXT)
    http_url = f"localhost:{serve.http_port}"
    with TTSClient(http_url, "http", api_key="wrong") as wrong, pytest.raises(Unauthorized):
        wrong.voices()


def test_the_client_library_carries_the_key_and_first_chunks_keep_their_path(
    keyed: tuple[Serve, int],
) -> None:
    """A stream's first chunk goes back to Triton's gRPC port with a priority (the
    loopback, triton_tts/runtime/loopback.py): it carries the key, or chunks fall back to BLS
    without priority and the log says so."""
    serve, _ = keyed
    with TTSClient(f"localhost:{serve.grpc_port}", "grpc", api_key=API_KEYS[0]) as client:
        assert [v.name for v in client.voices()]
        chunks = list(client.stream(TEXT + " " + TEXT))
        whole = client.synthesize(TEXT)
    assert chunks and chunks[-1].is_last and whole.duration_s > 1
    # the environment's key is the default (the first of a comma-separated list)
    with pytest.MonkeyPatch.context() as env:
        env.setenv("TRITON_TTS_API_KEY", ",".join(API_KEYS))
        with TTSClient(f"localhost:{serve.http_port}", "http") as client:
            assert client.synthesize(TEXT).duration_s > 1
    assert "chunks go without priority" not in serve.triton_log()


@pytest.mark.parametrize(
    ("path", "body"),
    [
        ("/v2/logging", None),
        ("/v2/logging", b'{"log_verbose_level": 1}'),
        ("/v2/trace/setting", b'{"trace_level": ["TIMESTAMPS"]}'),
        ("/v2/systemsharedmemory/status", None),
        ("/v2/systemsharedmemory/region/probe/register", b'{"key": "/probe", "offset": 0, "byte_size": 64}'),
        ("/v2/cudasharedmemory/status", None),
        ("/v2/repository/index", b"{}"),
        ("/v2/repository/models/acoustic/unload", b"{}"),
    ],
)
def test_admin_apis_need_the_admin_key(keyed: tuple[Serve, int], path: str, body: bytes | None) -> None:
    serve, _ = keyed
    url = f"http://localhost:{serve.http_port}{path}"
    status, message = request(url, {"Authorization": f"Bearer {API_KEYS[0]}"}, body)
    assert status == 403 and "triton-tts-admin" in message, (status, message)


def test_the_admin_key_opens_them_over_http_and_grpc(keyed: tuple[Serve, int]) -> None:
    serve, _ = keyed
    admin = {"triton-tts-admin": ADMIN_KEY}
    assert request(f"http://localhost:{serve.http_port}/v2/logging", admin)[0] == 200
    grpc = grpcclient.InferenceServerClient(f"localhost:{serve.grpc_port}")
    try:
        with pytest.raises(InferenceServerException, match="restricted"):
            grpc.get_log_settings(headers=auth_headers(API_KEYS[0], "grpc"))
        assert "log_verbose_level" in str(grpc.get_log_settings(headers=key_headers(None, ADMIN_KEY, "grpc")))
    finally:
        grpc.close()


def test_statistics_take_the_api_key(keyed: tuple[Serve, int]) -> None:
    """Counts and times, no secret (the metrics port shows as much): whoever may run
    inference may read them, as perf_analyzer must; without the key they stay closed."""
    serve, _ = keyed
    stats = f"http://localhost:{serve.http_port}/v2/models/tts/stats"
    assert request(stats, {})[0] == 403
    status, body = request(stats, {"Authorization": f"Bearer {API_KEYS[0]}"})
    assert status == 200 and json.loads(body)["model_stats"][0]["name"] == "tts"
    grpc = grpcclient.InferenceServerClient(f"localhost:{serve.grpc_port}")
    try:
        answer = grpc.get_inference_statistics("tts", headers=auth_headers(API_KEYS[0], "grpc"), as_json=True)
        assert answer["model_stats"][0]["name"] == "tts"
    finally:
        grpc.close()


def test_the_gateway_takes_every_key_and_reaches_triton_with_one(keyed: tuple[Serve, int]) -> None:
    _, gateway_port = keyed
    base = f"http://localhost:{gateway_port}/v1"
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=base, api_key="wrong", max_retries=0).audio.speech.create(
            model="tts-1", voice="joe", input=TEXT, response_format="wav"
        )
    for key in API_KEYS:
        speech = openai.OpenAI(base_url=base, api_key=key, max_retries=0).audio.speech.create(
            model="tts-1", voice="joe", input=TEXT, response_format="pcm"
        )
        assert np.frombuffer(speech.content, dtype=np.int16).size > 24_000  # over 1 s at 24 kHz


def test_the_cli_takes_the_key(keyed: tuple[Serve, int], tmp_path: Path) -> None:
    serve, _ = keyed
    env = {k: v for k, v in os.environ.items() if k != "TRITON_TTS_API_KEY"}
    base = [sys.executable, "-m", "triton_tts.cli", "say", TEXT, "--url", f"localhost:{serve.http_port}"]
    refused = subprocess.run(
        [*base, "-o", str(tmp_path / "no.wav")], env=env, capture_output=True, text=True, check=False
    )
    assert refused.returncode == 1 and "API key" in refused.stderr
    done = subprocess.run(
        [*base, "--api-key", API_KEYS[0], "-o", str(tmp_path / "yes.wav")],
        env=env,
        check=False,
        capture_output=True,
        text=True,
    )
    assert done.returncode == 0, done.stderr
    assert (tmp_path / "yes.wav").stat().st_size > 20_000


@pytest.mark.parametrize(
    ("protocol", "header"),
    [
        ("http", f"Authorization: Bearer {API_KEYS[0]}"),  # as users write it first
        ("grpc", f"triton-grpc-protocol-authorization:Bearer {API_KEYS[0]}"),  # docs/performance.md
    ],
)
def test_perf_analyzer_runs_with_the_api_key_alone(
    keyed: tuple[Serve, int], tmp_path: Path, protocol: str, header: str
) -> None:
    """perf_analyzer reads tts's metadata, config and Triton's statistics before it sends:
    with the API key in the form docs/performance.md gives (and without it: refused)."""
    from benchmarks import perf

    serve, _ = keyed
    data = perf.write_input_data(tmp_path / "input.json", [TEXT])
    url = f"localhost:{serve.http_port if protocol == 'http' else serve.grpc_port}"
    with pytest.raises(RuntimeError, match=r"restricted|403|Forbidden"):
        perf.run_level(url, protocol, data, "concurrency", 1, 2)
    row = perf.run_level(url, protocol, data, "concurrency", 1, 2, header_lines=[header])
    assert row["requests_per_s"] > 0


def test_no_key_reaches_a_log_line(keyed: tuple[Serve, int]) -> None:
    serve, _ = keyed
    logs = serve.output() + serve.triton_log()
    assert "triton-tts is ready" in serve.output() and "Started GRPCInferenceService" in serve.triton_log()
    for key in (*API_KEYS, ADMIN_KEY):
        assert key not in logs, f"a key is in the log: {key}"


# --- Nothing readable by other local users, and the small doors (issue 43) ---------------

OTHER_USER = 65534  # nobody: another local user, without an account of its own

# Run as OTHER_USER with the system's Python (no project import): what of the given paths
# it can read, and whether the token shows up in anything it can read of /dev/shm and of
# every process's command line and environment.
PROBE = """
import json, os, sys
paths, token = json.loads(sys.argv[1]), sys.stdin.buffer.read()  # not in its own argv
opened = []
for path in paths:
    try:
        if os.path.isdir(path):
            os.listdir(path)
        else:
            with open(path, "rb") as f:
                f.read(1)
        opened.append(path)
    except OSError:
        pass
seen = []
for folder in ["/dev/shm"] + [f"/proc/{p}" for p in os.listdir("/proc") if p.isdigit()]:
    names = os.listdir(folder) if folder == "/dev/shm" else ["cmdline", "environ"]
    for name in names:
        try:
            with open(os.path.join(folder, name), "rb") as f:
                if token in f.read():
                    seen.append(os.path.join(folder, name))
        except OSError:
            pass
print(json.dumps({"opened": opened, "token_in": seen}))
"""


def probe(paths: list[str], token: str, user: int | None) -> dict[str, list[str]]:
    done = subprocess.run(
        ["/usr/bin/python3", "-c", PROBE, json.dumps(paths)],
        input=token,
        user=user,
        group=user,
        capture_output=True,
        text=True,
        check=True,
        cwd="/",
    )
    return dict(json.loads(done.stdout))


def tritonserver_pid(serve: Serve) -> int:
    from tests.test_supervisor import tritonserver_of

    return tritonserver_of(serve)


def environ(pid: int) -> dict[str, str]:
    pairs = Path(f"/proc/{pid}/environ").read_bytes().decode(errors="replace").split("\0")
    return dict(pair.partition("=")[::2] for pair in pairs if "=" in pair)


def test_what_serve_makes_is_private_to_its_user(keyed: tuple[Serve, int]) -> None:
    """Another local user can open nothing serve's run made: not the run folder or any file
    in it, not Triton's log, not a Python-backend region (tritonserver has a /dev/shm of its
    own, so the machine's holds none of the run's), not the environment of tritonserver or
    a stub; and the internal token is in nothing that user can read. The same probe run
    as serve's own user opens them all (the refusals are the permissions', not the probe's)."""
    from triton_tts.ops.watchdog import stub_instances

    serve, _ = keyed
    triton = tritonserver_pid(serve)
    env = environ(triton)
    token, run_dir = env["TRITON_TTS_INTERNAL_TOKEN"], Path(env["TRITON_TTS_ADMISSION_DIR"]).parent
    prefix = next(
        a.partition("prefix-name=")[2] for a in cmdline_of(triton) if "shm-region-prefix-name=" in a
    )
    own_shm = Path(f"/proc/{triton}/root/dev/shm")
    regions = sorted(own_shm.glob(f"{prefix}*"))
    assert regions and own_shm.stat().st_dev != Path("/dev/shm").stat().st_dev
    assert not list(Path("/dev/shm").glob(f"{prefix}*"))  # none in the machine's /dev/shm
    made = [run_dir, *run_dir.rglob("*")]
    assert len(made) > 3 and all(p.stat().st_mode & 0o077 == 0 for p in [*made, serve.log]), [
        (str(p), oct(p.stat().st_mode)) for p in made if p.stat().st_mode & 0o077
    ]
    stubs = list(stub_instances(triton).values())
    paths = [str(p) for p in [*made, serve.log, *regions]]
    paths += [f"/proc/{pid}/environ" for pid in [triton, *stubs]]
    refused = probe(paths, token, OTHER_USER)
    assert refused == {"opened": [], "token_in": []}, refused
    own = probe(paths, token, None)
    assert set(own["opened"]) == set(paths) and own["token_in"], own


def cmdline_of(pid: int) -> list[str]:
    return Path(f"/proc/{pid}/cmdline").read_bytes().decode(errors="replace").split("\0")


def test_a_user_without_root_gets_a_private_shm_too() -> None:
    """What serve does for tritonserver (triton_tts.ops.process.dies_with_parent), done for a
    process of another, unprivileged user: its region, made 0644 as the Python backend
    makes them, lands in a /dev/shm of its own (a user namespace maps the user to itself),
    not in the machine's, and its files are 0600 (umask 077)."""
    from triton_tts.ops.process import dies_with_parent

    name = f"triton_tts_probe_{uuid.uuid4().hex}"
    written = Path("/tmp") / name  # a folder the other user may write in
    child = subprocess.Popen(
        [
            "/usr/bin/python3", "-c",
            "import os, sys; fd = os.open(sys.argv[1], os.O_CREAT | os.O_RDWR, 0o644); os.fchmod(fd, 0o644); "
            "open(sys.argv[2], 'w').close(); print(os.getuid(), flush=True); sys.stdin.read()",
            f"/dev/shm/{name}", str(written),
        ],
        user=OTHER_USER, group=OTHER_USER, stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
        preexec_fn=dies_with_parent(os.getpid(), False),  # noqa: PLW1509 - as serve starts tritonserver
    )  # fmt: skip
    try:
        assert child.stdout is not None and child.stdout.readline().strip() == str(OTHER_USER)
        own = Path(f"/proc/{child.pid}/root/dev/shm")
        assert (own / name).exists() and not Path(f"/dev/shm/{name}").exists()
        assert own.stat().st_mode & 0o777 == 0o700
        assert written.stat().st_mode & 0o777 == 0o600
    finally:
        child.kill()
        child.wait()
        written.unlink(missing_ok=True)
        Path(f"/dev/shm/{name}").unlink(missing_ok=True)


def listening(port: int) -> set[str]:
    """The local addresses a TCP socket listens on at ``port`` (/proc/net/tcp, tcp6: each
    32-bit word in the host's order; an IPv4-mapped IPv6 address as its IPv4 one)."""
    found = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        for line in Path(table).read_text(encoding="ascii").splitlines()[1:]:
            local, state = line.split()[1], line.split()[3]
            address, _, hex_port = local.partition(":")
            if state == "0A" and int(hex_port, 16) == port:  # 0A: LISTEN
                raw = b"".join(bytes.fromhex(address[i : i + 8])[::-1] for i in range(0, len(address), 8))
                ip = ipaddress.ip_address(raw)
                found.add(str(getattr(ip, "ipv4_mapped", None) or ip))
    return found


def test_serve_listens_on_this_machine_only_unless_told(keyed: tuple[Serve, int]) -> None:
    """Triton's HTTP, gRPC and metrics ports, the health port and the gateway: 127.0.0.1
    by default (serve --host; the chart and the image say 0.0.0.0)."""
    serve, gateway_port = keyed
    metrics = next(
        int(a.partition("=")[2])
        for a in cmdline_of(tritonserver_pid(serve))
        if a.startswith("--metrics-port=")
    )
    for port in (serve.http_port, serve.grpc_port, metrics, serve.health_port, gateway_port):
        assert listening(port) == {"127.0.0.1"}, (port, listening(port))


@pytest.mark.parametrize("length", [b"-5", b"x", b"5, 6", b"0x10", b""])
def test_a_malformed_content_length_gets_the_error_json(keyed: tuple[Serve, int], length: bytes) -> None:
    """uvicorn refuses what it cannot parse before any middleware: with the error JSON."""
    _, gateway_port = keyed
    with socket.create_connection(("127.0.0.1", gateway_port), timeout=30) as sock:
        sock.sendall(
            b"POST /v1/audio/speech HTTP/1.1\r\nHost: tts\r\nContent-Type: application/json\r\n"
            b"Authorization: Bearer "
            + API_KEYS[0].encode()
            + b"\r\nContent-Length: "
            + length
            + b"\r\n\r\n{}"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    head, _, body = answer.partition(b"\r\n\r\n")
    assert head.startswith(b"HTTP/1.1 400 ") and b"content-type: application/json" in head.lower(), answer
    error = json.loads(body)["error"]
    assert error["code"] == "malformed_request" and error["type"] == "invalid_request_error", error


@pytest.mark.parametrize("voice", ["jo\x00e", "jo\u202ee", "jo\x1b[2Je"])
def test_a_control_character_in_voice_comes_back_escaped(keyed: tuple[Serve, int], voice: str) -> None:
    """Through Triton (the model's message) and the gateway (its own check): the caller's
    value is echoed with its control and format characters escaped, never raw."""
    serve, gateway_port = keyed
    escaped = voice.encode("unicode_escape").decode("ascii")
    tensors = [
        {"name": "TEXT", "shape": [1, 1], "datatype": "BYTES", "data": [TEXT]},
        {"name": "VOICE", "shape": [1, 1], "datatype": "BYTES", "data": [voice]},
    ]
    status, message = request(
        f"http://localhost:{serve.http_port}/v2/models/tts/infer",
        {"Authorization": f"Bearer {API_KEYS[0]}"},
        json.dumps({"inputs": tensors}).encode(),
    )
    assert status == 400 and escaped in json.loads(message)["error"] and voice not in message, message
    speech = {"model": "tts-1", "voice": voice, "input": TEXT, "response_format": "wav"}
    status, message = request(
        f"http://localhost:{gateway_port}/v1/audio/speech",
        {"Authorization": f"Bearer {API_KEYS[0]}", "Content-Type": "application/json"},
        json.dumps(speech).encode(),
    )
    error = json.loads(message)["error"]["message"]
    assert status in (400, 404) and escaped in error and voice not in error, error
