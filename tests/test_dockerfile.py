"""The container image definition, parsed with Docker's own parser (no engine here)."""

from __future__ import annotations

from pathlib import Path

import dockerfile

PROJECT_ROOT = Path(__file__).resolve().parent.parent

# Triton 2.72.0 (Python 3.12): the 2025 security fixes. The tests run 2.51.0 (the
# nvidia-pytriton wheel); docs/deployment.md, "Which Triton", says what stays unproven.
TRITON_IMAGE = "nvcr.io/nvidia/tritonserver:26.08-py3"


def stages() -> list[list[dockerfile.Command]]:
    commands = dockerfile.parse_file(str(PROJECT_ROOT / "Dockerfile"))
    result: list[list[dockerfile.Command]] = []
    for command in commands:
        if command.cmd == "FROM":
            result.append([])
        if result:
            result[-1].append(command)
    return result


def test_based_on_the_triton_release_we_ship() -> None:
    commands = dockerfile.parse_file(str(PROJECT_ROOT / "Dockerfile"))
    arg = next(c for c in commands if c.cmd == "ARG" and c.value[0].startswith("TRITON_IMAGE="))
    assert arg.value[0] == f"TRITON_IMAGE={TRITON_IMAGE}"
    assert all(s[0].value[0] == "${TRITON_IMAGE}" for s in stages())
    from importlib.metadata import version

    # the local server the tests run; the KServe v2 protocol it speaks is the image's too
    assert version("nvidia-pytriton") == "0.7.0"  # tritonserver 2.51.0
    # the client of its release (2.51, the last wheel with perf_analyzer) has a virtualenv of
    # its own (protobuf 4); this one has the lock's newer client (protobuf 6, Riva's protos)
    perf = (PROJECT_ROOT / "requirements" / "perf.txt").read_text(encoding="utf-8").split()
    assert "tritonclient==2.51.0" in perf


def test_final_stage_is_lean_non_root_and_read_only_friendly() -> None:
    final = stages()[-1]
    runs = " ".join(" ".join(c.value) for c in final if c.cmd == "RUN")
    assert "espeak-ng" in runs
    for build_tool in ("build-essential", "gcc", "g++", "python3-dev", "git "):
        assert build_tool not in runs
    assert "rm -rf /var/lib/apt/lists/*" in runs
    user = [c.value[0] for c in final if c.cmd == "USER"]
    assert user and user[-1] not in ("root", "0")
    env = {}
    for c in final:
        if c.cmd == "ENV":
            env.update(dict(zip(c.value[::2], c.value[1::2], strict=True)))
    for cache in ("HOME", "TMPDIR", "XDG_CACHE_HOME", "NUMBA_CACHE_DIR", "HF_HOME", "MPLCONFIGDIR"):
        assert env[cache].startswith("/tmp"), cache
    assert env["TRITON_TTS_HOME"].startswith("/tmp")  # voices and builds: writable
    assert "TRITON_TTS_REPOSITORY_TEMPLATE" not in env  # the template is package data
    assert [c.value for c in final if c.cmd == "EXPOSE"] == [
        ("8000", "8001", "8002", "8003", "8080", "50051")
    ]
    # the watchdog's supervisor runs tritonserver (self-healing, readiness on :8003)
    assert [c.value for c in final if c.cmd == "ENTRYPOINT"] == [("triton-tts", "serve", "--no-build")]


def test_generated_artefacts_stay_out_of_the_build_context() -> None:
    ignored = (PROJECT_ROOT / ".dockerignore").read_text(encoding="utf-8").split()
    for pattern in (".venv", "voices", "*.onnx", "*.plan", "model_repository/*/warmup"):
        assert pattern in ignored


def test_installs_exactly_the_tested_requirement_set_without_repairs() -> None:
    """The image installs requirements/image.txt (what tests/test_image_install.py serves
    with on Python 3.12), offline from the build stage's wheels, into a virtualenv whose bin/
    is first on PATH (where the Python-backend stub finds its packages); nothing patches
    the tree."""
    build, final = stages()[0], stages()[-1]
    build_runs = [" ".join(c.value) for c in build if c.cmd == "RUN"]
    assert any("-r requirements/image.txt" in run and "pip wheel" in run for run in build_runs)
    assert not any(" rm " in f" {run}" or "cp -r" in run or "ln -s" in run for run in build_runs)
    copied = [c.value[0] for c in build if c.cmd == "COPY"]
    assert "model_repository/" in copied  # the template goes into the wheel as package data
    install = next(" ".join(c.value) for c in final if c.cmd == "RUN" and "pip install" in " ".join(c.value))
    assert "--no-index" in install and "-r /tmp/image-requirements.txt" in install
    assert [c.value for c in final if c.cmd == "COPY" and "image.txt" in c.value[0]]
    venv = install.split("python3 -m venv ", 1)[1].split()[0]
    assert f"{venv}/bin/pip install" in install  # never the externally managed system Python
    env = {}
    for c in final:
        if c.cmd == "ENV":
            env.update(dict(zip(c.value[::2], c.value[1::2], strict=True)))
    assert env["PATH"].split(":")[0] == f"{venv}/bin"


def test_exposes_the_ports_the_chart_serves_on() -> None:
    """Triton's ports, the watchdog's health port and the gateway's two, HTTP and Riva's gRPC
    (the chart runs the gateway from this image with the entry point overridden): EXPOSE
    says what the chart uses."""
    import yaml

    values_file = PROJECT_ROOT / "helm" / "triton-tts" / "values.yaml"
    values = yaml.safe_load(values_file.read_text(encoding="utf-8"))
    chart = {values["triton"][port] for port in ("httpPort", "grpcPort", "metricsPort", "healthPort")}
    chart.add(values["gateway"]["port"])
    chart.add(values["gateway"]["riva"]["port"])
    (exposed,) = [c.value for c in stages()[-1] if c.cmd == "EXPOSE"]
    assert {int(port) for port in exposed} == chart
