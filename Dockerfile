# triton-tts on the official Triton Inference Server image.
#
# Triton 24.10 ships tritonserver 2.51.0, the version this project tests against (the
# nvidia-pytriton 0.7.0 wheel), with the python, onnxruntime and tensorrt backends,
# CUDA 12.6 and TensorRT 10.5. Build and push (see README, "Deploy on Kubernetes"):
#   docker build -t REGISTRY/triton-tts:0.1.0 .
#   docker push REGISTRY/triton-tts:0.1.0
ARG TRITON_IMAGE=nvcr.io/nvidia/tritonserver:24.10-py3

# --- build: wheels for the project and its pinned dependencies (build tools stay here)
FROM ${TRITON_IMAGE} AS build
WORKDIR /src
COPY pyproject.toml README.md LICENSE ./
COPY triton_tts/ triton_tts/
COPY client/ client/
COPY export_scripts/ export_scripts/
# The package reaches client/ and export_scripts/ through links inside triton_tts/;
# replace them by the folders so the wheel holds real files.
RUN rm triton_tts/client triton_tts/export \
 && cp -r client triton_tts/client && cp -r export_scripts triton_tts/export \
 && python3 -m pip wheel --no-cache-dir --wheel-dir /wheels .

# --- runtime
FROM ${TRITON_IMAGE}
ARG DEBIAN_FRONTEND=noninteractive
RUN apt-get update \
 && apt-get install -y --no-install-recommends espeak-ng libsndfile1 \
 && rm -rf /var/lib/apt/lists/*
COPY --from=build /wheels /tmp/wheels
RUN python3 -m pip install --no-cache-dir --no-index --find-links /tmp/wheels triton-tts \
 && rm -rf /tmp/wheels
# The committed repository (configs + Python model code); `triton-tts build-repo`
# copies it next to the exported ONNX files.
COPY model_repository/ /opt/triton-tts/model_repository/

# Read-only root filesystem: every cache and temporary file goes under /tmp, which the
# chart mounts as an emptyDir (phonemizer copies libespeak-ng to a temporary directory).
ENV TRITON_TTS_REPOSITORY_TEMPLATE=/opt/triton-tts/model_repository \
    HOME=/tmp \
    TMPDIR=/tmp \
    XDG_CACHE_HOME=/tmp/.cache \
    TRITON_TTS_CACHE=/tmp/.cache \
    NUMBA_CACHE_DIR=/tmp/.cache/numba \
    HF_HOME=/tmp/.cache/huggingface \
    MPLCONFIGDIR=/tmp/.cache/matplotlib \
    PYTHONDONTWRITEBYTECODE=1 \
    PYTHONUNBUFFERED=1 \
    OMP_NUM_THREADS=1

# The Triton image's unprivileged user (uid 1000).
USER triton-server
WORKDIR /tmp
EXPOSE 8000 8001 8002
ENTRYPOINT ["tritonserver"]
CMD ["--model-repository=/models/repository", "--strict-readiness=true", "--exit-timeout-secs=30"]
