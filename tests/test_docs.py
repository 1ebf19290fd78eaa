"""The README and docs/ point at things that exist: files, headings, and the files the
architecture page names as the one home of each decision (no server needed); and every
command line they show is run by a test (the runnable ones here, on the session server)."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

from tests.helpers import running_gateway
from triton_tts.ops.server import TritonServer

ROOT = Path(__file__).resolve().parent.parent
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")
# A path in backticks that names a file of this repository, e.g. `triton_tts/runtime/limits.py`.
FOLDERS = "triton_tts|client|export_scripts|model_repository|benchmarks|helm|tests|scripts"
REPO_PATH = re.compile(rf"`((?:{FOLDERS})/[^`\s]*)`")


def anchors(page: Path) -> set[str]:
    """GitHub's heading anchors: lower case, punctuation dropped, spaces to hyphens."""
    found = set()
    for line in page.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            title = line.lstrip("#").strip().lower()
            found.add(re.sub(r"[^\w\- ]", "", title).replace(" ", "-"))
    return found


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_links_resolve(page: Path) -> None:
    broken = []
    for target in LINK.findall(page.read_text(encoding="utf-8")):
        if target.startswith(("http://", "https://")):
            continue
        path, _, anchor = target.partition("#")
        linked = (page.parent / path).resolve() if path else page
        if not linked.exists() or (anchor and anchor not in anchors(linked)):
            broken.append(target)
    assert not broken, f"{page.name}: {broken}"


@pytest.mark.parametrize("page", PAGES, ids=lambda p: p.name)
def test_named_files_exist(page: Path) -> None:
    missing = []
    for name in REPO_PATH.findall(page.read_text(encoding="utf-8")):
        if any(ch in name for ch in "*<>[") or name.endswith("..."):
            continue  # a pattern or a placeholder, not one file
        if not (ROOT / name.rstrip("/")).exists():
            missing.append(name)
    assert not missing, f"{page.name} names files that do not exist: {missing}"


def test_readme_stays_a_front_door() -> None:
    assert len((ROOT / "README.md").read_text(encoding="utf-8").splitlines()) <= 200


# Every command line in a shell block of the README and docs/ is run by a test, as written
# but for the addresses (the test server's free ports) and where its files go (a scratch
# folder): here (RUN_HERE), by the test named (RUN_ELSEWHERE), or not here, for the reason
# given (NOT_HERE). A new command in the docs fails the first test below until it is placed.
SHELL_BLOCK = re.compile(r"```(?:bash|sh|shell|console)\n(.*?)```", re.S)
HERE_TOO = "the same command line is run by"


def documented_commands() -> dict[str, list[str]]:
    """command line (continuations joined, comments dropped) -> the pages that show it."""
    found: dict[str, list[str]] = {}
    for page in PAGES:
        for block in SHELL_BLOCK.findall(page.read_text(encoding="utf-8")):
            for line in re.sub(r"\\\n\s*", " ", block).splitlines():
                command = re.sub(r"\s+", " ", re.sub(r"(^|\s)#\s.*$", "", line)).strip()
                if command and not command.startswith("#"):
                    found.setdefault(command, []).append(page.name)
    return found


SAY = 'triton-tts say "Text" -o out.wav [--url HOST:PORT] [--protocol http|grpc] [--voice joe] [--speed 1.2] [--speaker-id 0] [--format pcm16|float] [--timeout 300]'  # noqa: E501
RUN_HERE = {
    '.venv/bin/triton-tts say "Hello from Triton. It is 9:30 on March 3rd." -o hello.wav',
    SAY,
    'triton-tts say "A long answer..." --stream -o a.wav --captions a.vtt',
    'triton-tts say "A long answer..." --stream -o - | aplay -r 22050 -f S16_LE -c 1',
    'triton-tts say "A long answer..." --stream -o answer.wav',
    'triton-tts say "Welcome back." -o welcome.wav --captions welcome.vtt',
    'triton-tts say "Hello from Kubernetes." -o hello.wav --url localhost:8000',
    "triton-tts synth --input lines.txt --out-dir wavs --concurrency 4",
    "triton-tts dub film.srt -o dub.wav --original film.wav",
    "triton-tts dub film.srt -o dub.wav [--original film.wav] [--max-speed 1.25]",
    "triton-tts dub script.txt --original film.wav -o dub.wav",
    "triton-tts voices",
    "triton-tts gateway --triton-url HOST:8001 --port 8080",
    "triton-tts gateway --triton-url HOST:8001 [--port 8080] [--voice-alias NAME=VOICE[:SPEAKER]] [--max-input-chars 4096] [--max-body-bytes 65536] [--cors-origin ORIGIN] [--timeout-s 1800] [--ws-max-sockets 512] [--ws-max-sockets-per-key 64] [--ws-idle-timeout-s 300] [--no-metrics]",  # noqa: E501
    'curl http://localhost:8080/v1/audio/speech -H "Content-Type: application/json" -d \'{"model": "tts-1", "voice": "alloy", "input": "Hello from Triton.", "response_format": "wav"}\' -o hello.wav',  # noqa: E501
    'curl -sN http://localhost:8080/v1/audio/speech -H "Content-Type: application/json" -d \'{"model": "tts-1", "input": "A long answer...", "response_format": "pcm"}\' | aplay -r 24000 -f S16_LE -c 1',  # noqa: E501
    'curl -s http://localhost:8080/v1/audio/speech/captioned -H "Content-Type: application/json" -d \'{"model": "tts-1", "input": "Welcome back.", "response_format": "wav"}\' | jq \'.words\'',  # noqa: E501
    'curl -H "Authorization: Bearer $KEY" -F file=@film.srt -F original=@film.wav -F voice=alloy http://localhost:8080/v1/audio/dub -o dub.zip',  # noqa: E501
    'triton-tts frontend "今天是2024年3月15日。" --language zh',
    'triton-tts frontend "我有2个苹果，一样好。" --voice voices/baker',
    'triton-tts frontend "我有2个苹果，一样好。电话13812345678" --language zh',
    'triton-tts frontend "It costs $3.50." --voice joe',
    "python -m triton_tts.export.vocoder_graph FILE.onnx",
    "triton-tts export piper --out voices/joe",
    "triton-tts export piper --onnx X.onnx --config X.onnx.json --out voices/NAME",
}
VOICES_TEST = "tests/test_cli_voices.py::test_joe_baker_and_an_xtts_voice_serve_together"
RUN_ELSEWHERE = {
    "triton-tts serve --voice voices/joe --voice voices/baker --voice voices/xtts": VOICES_TEST,
    'triton-tts say "Hello." --voice xtts:narrator -o xtts.wav': VOICES_TEST,
    'triton-tts say "今天天气很好，我们一起去公园散步吧。" --voice baker -o zh.wav': VOICES_TEST,
    "make serve-zh": VOICES_TEST,  # its serve line: joe and baker (and an XTTS voice)
    "triton-tts serve [--voice DIR ...] [--model-repository DIR] [--http-port ...] [--health-port 8003] [--model-config-name gpu|tensorrt] [--no-build] [--no-watchdog] [--triton-arg=--FLAG=VALUE ...] [options]": "tests/test_lifecycle.py::test_ready_only_after_every_model_has_warmed_up",  # noqa: E501
    "make serve": "tests/test_lifecycle.py::test_ready_only_after_every_model_has_warmed_up",  # its serve line  # noqa: E501
    "triton-tts build-repo [--voice DIR ...] [--out DIR] [options]": (
        "tests/test_cli_voices.py::test_build_repo_takes_xtts_and_chunk_voices_in_any_order"
    ),
    "triton-tts export int8 [--voice voices/joe] --out voices/joe-int8": "tests/test_quantize.py::int8_export",  # noqa: E501
    "triton-tts export int8 --voice voices/joe --out voices/joe-int8-flow --stages flow": (
        "tests/test_quantize.py::flow_voice"
    ),
    "triton-tts serve --voice voices/joe-int8": "tests/test_quantize.py::test_int8_vocoder_runs_in_the_cpu_stage",  # noqa: E501
    "triton-tts export coqui --checkpoint fastspeech2.pth --config config.json --vocoder-checkpoint hifigan.pth --vocoder-config hifigan.json --out voices/mine [--name mine]": "tests/helpers.py::export_random_coqui_voice",  # noqa: E501
    "triton-tts export coqui ... --precision int8": "tests/test_coqui_vits.py::test_precisions",
    "triton-tts gateway --triton-url HOST:8001 --riva-port 50051": (
        "tests/test_riva.py::test_the_config_lists_every_served_voice_as_riva_clients_read_it"
    ),
    "triton-tts gateway ... --riva-tls-cert tls.crt --riva-tls-key tls.key": (
        "tests/test_riva.py::test_tls_with_a_certificate_and_its_key"
    ),
    "triton-tts serve --gateway-port 8080 --riva-port 50051": (
        "tests/test_lifecycle.py::test_ready_only_after_every_model_has_warmed_up"
    ),
    "make kokoro": "tests/test_kokoro.py::exported",  # its export line, into a scratch folder
    "make serve VOICE=kokoro": "tests/test_kokoro.py::server",  # its serve line: kokoro, then joe
    "triton-tts export kokoro --out voices/kokoro": "tests/test_kokoro.py::exported",
    "triton-tts gate-speakers --voice kokoro --speakers af_heart,am_adam,bf_emma,bm_george --baseline joe [--texts my_sentences.txt] [--json gate.json]": (  # noqa: E501
        "tests/test_kokoro.py::test_the_speaker_gate_passes_kokoro_and_fails_broken_voices"
    ),
    "locust -f benchmarks/locustfile.py --headless -u 8 -r 8 -t 60s --host localhost:8000 --grpc-url localhost:8001": (  # noqa: E501
        "tests/test_benchmarks.py::test_locust_scenario_smoke"  # 2 users, not 8 for 60 s
    ),
}
PERF_DEFAULTS = "tests/test_defaults.py::test_perf_analyzer_runs_on_the_defaults"
PERF_KEYS = "tests/test_keys.py::test_perf_analyzer_runs_with_the_api_key_alone"
RUN_ELSEWHERE |= {
    "perf_analyzer -m tts -u localhost:8000 -i http --input-data one_sentence.json --shape TEXT:1 --concurrency-range 16": PERF_DEFAULTS,  # noqa: E501
    "perf_analyzer -m tts -u localhost:8001 -i grpc --input-data one_sentence.json --shape TEXT:1 --concurrency-range 1:64:8": PERF_DEFAULTS,  # noqa: E501
    "perf_analyzer -m tts_stream -u localhost:8001 -i grpc --streaming --input-data one_sentence.json --shape TEXT:1 --concurrency-range 64": PERF_DEFAULTS,  # noqa: E501
    'perf_analyzer -m tts -u localhost:8000 -i http -H "Authorization: Bearer $KEY" --input-data one_sentence.json --shape TEXT:1': PERF_KEYS,  # noqa: E501
    'perf_analyzer -m tts -u localhost:8001 -i grpc -H "triton-grpc-protocol-authorization:Bearer $KEY" --input-data one_sentence.json --shape TEXT:1': PERF_KEYS,  # noqa: E501
    # the max_wait_ms request parameter through tritonclient, not perf_analyzer's flag
    "perf_analyzer -m tts -u localhost:8001 -i grpc --request-parameter max_wait_ms:2000:int --input-data one_sentence.json --shape TEXT:1": "tests/test_defaults.py::test_a_deadline_the_wait_would_pass_is_refused_at_once",  # noqa: E501
}
NO_NETWORK = "downloads a model from Coqui's hub: no network here (the offline refusal: tests/test_cli.py)"
NEEDS_DOWNLOADED = "speaks a voice exported from Coqui's hub: no network here"
SUITE = "the suite itself (.ci/run runs it): a test cannot run the run it belongs to"
NOT_HERE = {
    "make test": SUITE,
    "make lint": SUITE,
    "make typecheck": SUITE,
    "make check": SUITE,
    "make test-unit": SUITE,
    ".venv/bin/pytest tests/test_streaming.py -x -q": SUITE,
    '.venv/bin/pytest -m "server and not browser"': SUITE,
    "triton-tts export coqui --model-name tts_models/en/ljspeech/vits --out voices/ljs-vits": NO_NETWORK,
    "triton-tts export coqui --model-name tts_models/en/vctk/vits --out voices/vctk": NO_NETWORK,
    "triton-tts export coqui --model-name tts_models/en/ljspeech/fast_pitch --out voices/ljs-fastpitch": NO_NETWORK,  # noqa: E501
    "triton-tts export coqui --model-name tts_models/en/ljspeech/glow-tts --vocoder-name vocoder_models/en/ljspeech/hifigan_v2 --out voices/ljs-glow": NO_NETWORK,  # noqa: E501
    "triton-tts export coqui --model-name tts_models/en/ljspeech/tacotron2-DDC --out voices/ljs-taco": NO_NETWORK,  # noqa: E501
    "triton-tts serve --voice voices/joe --voice voices/ljs-vits": NEEDS_DOWNLOADED,
    "triton-tts serve --voice voices/joe --voice voices/ljs-vits --voice voices/ljs-taco": NEEDS_DOWNLOADED,
    'triton-tts say "Hello." --voice ljs-vits -o ljs.wav': NEEDS_DOWNLOADED,
    'triton-tts say "Hello." --voice ljs-taco -o taco.wav': NEEDS_DOWNLOADED,
    "python -m triton_tts.export.tensorrt --repo build/model_repository [--print-trtexec] [--cache-dir DIR]": "GPU",  # noqa: E501
    "docker build -t registry.example.com/ml/triton-tts:0.1.0 .": "Docker",
    "docker push registry.example.com/ml/triton-tts:0.1.0": "Docker",
    "helm install tts helm/triton-tts --namespace speech --create-namespace --set image.repository=registry.example.com/ml/triton-tts --set image.tag=0.1.0": "Kubernetes",  # noqa: E501
    "helm upgrade tts helm/triton-tts -n speech --reuse-values --set gateway.apiKeySecret.name=tts-gateway-keys": (  # noqa: E501
        "Kubernetes"
    ),
    "kubectl -n speech rollout status deployment/tts-triton-tts": "Kubernetes",
    "kubectl -n speech port-forward service/tts-triton-tts 8000 8001": "Kubernetes",
    "kubectl -n speech port-forward service/tts-triton-tts 8080": "Kubernetes",
    "kubectl -n speech create secret generic tts-gateway-keys --from-literal=api-key=KEY1,KEY2": "Kubernetes",
    "helm upgrade tts helm/triton-tts -n speech --reuse-values --set gateway.riva.tls.secretName=tts-riva-tls --set gateway.riva.ingress.enabled=true --set gateway.riva.ingress.className=nginx --set 'gateway.riva.ingress.hosts[0].host=riva.example.com' --set 'gateway.riva.ingress.tls[0].secretName=riva-example-com-tls' --set 'gateway.riva.ingress.tls[0].hosts[0]=riva.example.com'": "Kubernetes (its render: tests/test_helm_chart.py)",  # noqa: E501
    "kubectl -n speech create secret tls tts-riva-tls --cert=riva.crt --key=riva.key": "Kubernetes",
    "kubectl -n speech port-forward service/tts-triton-tts 50051": "Kubernetes",
}


def test_every_documented_command_is_run_by_a_test_or_says_why_not() -> None:
    documented = set(documented_commands())
    placed = RUN_HERE | set(RUN_ELSEWHERE) | set(NOT_HERE)
    assert not documented - placed, f"documented commands no test runs: {sorted(documented - placed)}"
    assert not placed - documented, f"no longer documented: {sorted(placed - documented)}"
    for command, where in RUN_ELSEWHERE.items():
        path, _, name = where.partition("::")
        assert re.search(rf"\bdef {name}\b", (ROOT / path).read_text(encoding="utf-8")), (command, where)


CLIENT_COMMANDS = ("say", "synth", "dub", "voices")
NO_SOUND_CARD = re.compile(r"\|\s*aplay\b.*$")  # played here into a file: no sound card


def as_run_here(command: str, server: TritonServer, gateway: str, voice_dir: Path) -> str:
    """The documented line with the test server's addresses, a synopsis with the first of
    each choice, and aplay's input kept in a file."""
    line = NO_SOUND_CARD.sub("> played.pcm", command)
    for _ in range(2):  # a synopsis' optional parts (one nested level): given
        line = re.sub(r"\[([^\[\]]*)\]", r"\1", line)
    line = re.sub(r"(?<=\s)([\w.-]+)\|[\w.|-]+", r"\1", line)  # http|grpc: http
    line = line.replace("HOST:PORT", server.http_url).replace("localhost:8000", server.http_url)
    line = line.replace("http://localhost:8080", gateway)
    line = line.replace("--out voices/", "--out exported/").replace("voices/", f"{ROOT / 'voices'}/")
    line = line.replace("FILE.onnx", str(voice_dir / "vocoder.onnx"))
    bin_dir = Path(sys.executable).parent
    line = re.sub(r"^(\.venv/bin/)?triton-tts ", f"{bin_dir / 'triton-tts'} ", line)
    line = re.sub(r"^python ", f"{sys.executable} ", line)
    words = line.split()
    if len(words) > 1 and words[1] in CLIENT_COMMANDS and "--url" not in words:
        url = server.grpc_url if "--stream" in words else server.http_url  # streams: gRPC's port
        line = " ".join([*words[:2], "--url", url, *words[2:]])  # spaces: single already
    return line


@pytest.fixture(scope="module")
def command_files(server: TritonServer, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """What the documented commands read: lines.txt, film.srt, film.wav (speech), script.txt,
    X.onnx and X.onnx.json (a Piper voice)."""
    import soundfile as sf
    import tritonclient.http as httpclient

    from tests.helpers import synthesize
    from triton_tts.export.piper import bundled_joe_paths

    folder = tmp_path_factory.mktemp("documented")
    (folder / "lines.txt").write_text("The first line.\nThe second line.\n", encoding="utf-8")
    srt = (
        "1\n00:00:00,500 --> 00:00:02,500\nGood morning.\n\n2\n00:00:03,000 --> 00:00:05,000\nSee you soon.\n"
    )
    (folder / "film.srt").write_text(srt, encoding="utf-8")
    (folder / "script.txt").write_text("Good morning.\nSee you soon.\n", encoding="utf-8")
    client = httpclient.InferenceServerClient(server.http_url, network_timeout=300)
    try:
        speech, rate = synthesize(client, "Good morning to you all. See you again very soon, friends.")
    finally:
        client.close()
    sf.write(folder / "film.wav", speech, rate)
    onnx, config = bundled_joe_paths()
    (folder / "X.onnx").symlink_to(onnx)
    (folder / "X.onnx.json").symlink_to(config)
    return folder


@pytest.mark.parametrize("command", sorted(RUN_HERE))
def test_documented_command_runs(
    command: str, server: TritonServer, gateway: str, voice_dir: Path, command_files: Path, tmp_path: Path
) -> None:
    for made in command_files.iterdir():
        (tmp_path / made.name).symlink_to(made)
    if command.startswith("triton-tts gateway"):  # a server of its own: up, ready, stopped cleanly
        words = as_run_here(command, server, gateway, voice_dir).split()[2:]
        given = {"--triton-url", "--port"}
        options = [w for i, w in enumerate(words) if w not in given and (i == 0 or words[i - 1] not in given)]
        options = [
            w.replace("NAME=VOICE:SPEAKER", "nova=joe").replace("ORIGIN", "http://a.test") for w in options
        ]
        with running_gateway(server.grpc_url, *options) as base:
            assert base
        return
    line = as_run_here(command, server, gateway, voice_dir)
    env = {**os.environ, "KEY": "documented-key"}
    # The docs' own shell line, pipes and all.
    done = subprocess.run(  # noqa: S602
        line, shell=True, cwd=tmp_path, env=env, capture_output=True, text=True, timeout=300, check=False
    )
    assert done.returncode == 0, f"{line}\n{done.stdout[-2000:]}\n{done.stderr[-3000:]}"
    if "aplay" in command:
        assert (tmp_path / "played.pcm").stat().st_size > 1000  # PCM, as aplay would read it
    for written in re.findall(r"(?:-o|--captions|--out-dir|--out) (\S+)", line):
        path = tmp_path / written
        if written != "-":  # a file with something in it, or a folder with files
            assert (path.is_file() and path.stat().st_size > 0) or any(path.rglob("*.*")), written
