# triton-tts on the official Triton Inference Server image.
#
# Triton 26.08 (tritonserver 2.72.0, Ubuntu 24.04 with Python 3.12, CUDA 13.4) with the
# python, onnxruntime and tensorrt backends: a release with the 2025 security fixes (HTTP
# chunked handling, CVE-2025-23310/23311; the Python backend's shared-memory chain,
# CVE-2025-23319/23320/23334) that 24.10 (2.51) lacks. The tests run the nvidia-pytriton
# wheel's tritonserver 2.51.0 and serve this image's requirement set on Python 3.12
# (tests/test_image_install.py); what that leaves unproven: docs/deployment.md, "Which
# Triton". Build and push (see docs/deployment.md):
#   docker build -t REGISTRY/triton-tts:0.1.0 .
#   docker push REGISTRY/triton-tts:0.1.0
ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:26.08-py3

# --- build: wheels of the image's requirement set and of the project (build tools stay here)
FROM ${TRITON_IMAGE} AS build
WORKDIR /src
# The exact set tests/test_image_install.py installs on Python 3.12 (this image's Python).
COPY requirements/image.txt requirements/image.txt
RUN python3 -m pip wheel --no-cache-dir --use-pep517 --wheel-dir /wheels -r requirements/image.txt
COPY pyproject.toml README.md LICENSE ./
COPY triton_tts/ triton_tts/
COPY client/ client/
COPY export_scripts/ export_scripts/
COPY model_repository/ model_repository/
RUN python3 -m pip wheel --no-cache-dir --no-deps --wheel-dir /wheels .
# Silero VAD's wheel, for the vad model's graph only (its dependencies are torch's).
COPY requirements/vad.txt requirements/vad.txt
RUN python3 -m pip download --no-cache-dir --no-deps --dest /vad -r requirements/vad.txt

# --- runtime
FROM ${TRITON_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends espeak-ng libsndfile1 python3-venv \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /tmp/wheels
COPY --from=build /vad /opt/triton-tts-vad
COPY requirements/image.txt /tmp/image-requirements.txt
# A virtualenv of the image's Python, as the image test installs it: Ubuntu 24.04's Python
# is externally managed (PEP 668), and pip cannot replace the packages Debian put there.
# Its bin/ comes first on PATH, where the Python-backend stub finds its packages (the stub
# ignores PYTHONPATH). The repository template (configs + model code) is package data.
RUN python3 -m venv /opt/triton-tts \
 && /opt/triton-tts/bin/pip install --no-cache-dir --no-index --find-links /tmp/wheels \
      -r /tmp/image-requirements.txt 'triton-tts[serve]' \
 && rm -rf /tmp/wheels /tmp/image-requirements.txt

# Read-only root filesystem: every cache and temporary file goes under /tmp, which the
# chart mounts as an emptyDir (phonemizer copies libespeak-ng to a temporary directory).
ENV PATH=/opt/triton-tts/bin:$PATH \
    VIRTUAL_ENV=/opt/triton-tts \
    TRITON_TTS_HOME=/tmp/triton-tts \
    HOME=/tmp \
    TMPDIR=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    TRITON_TTS_CACHE=/tmp/.cache \
    NUMBA_CACHE_DIR=/tmp/.cache/numba \
    HF_HOME=/tmp/.cache/huggingface \
    MPLCONFIGDIR=/tmp/.cache/matplotlib \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1 \
    TRITON_TTS_VAD_MODEL=/opt/triton-tts-vad

# The Triton image's unprivileged user (uid 1000).
USER triton-server
WORKDIR /tmp
# 8000-8002: Triton's HTTP, gRPC and metrics; 8003: the watchdog's health port; 8080: the
# OpenAI-compatible gateway; 50051: the gateway's Riva TTS API (gRPC, --riva-port).
EXPOSE 8000 8001 8002 8003 8080 50051
# tritonserver (the image's) under `triton-tts serve`: a watchdog reloads a model whose
# Python-backend instance died, and :8003/ready says whether every instance is alive.
# The same image runs the gateway (it comes with the wheel; no GPU, no model) with the
# entry point overridden, as the Helm chart does:
#   docker run --entrypoint triton-tts IMAGE gateway --host 0.0.0.0 --triton-url TRITON_HOST:8001
# (its Riva port too: --riva-port, 50051 unless told; TLS with --riva-tls-cert/--riva-tls-key)
ENTRYPOINT ["triton-tts", "serve", "--no-build"]
# --host=0.0.0.0: serve's ports (Triton's, health) listen on 127.0.0.1 unless told, and
# a container's are reached from outside it.
CMD ["--model-repository=/models/repository", "--host=0.0.0.0", "--triton-arg=--exit-timeout-secs=30"]
