#!/usr/bin/env bash
# GPU benchmark of the served pipeline: the `gpu` (ONNX Runtime CUDA) and `tensorrt`
# (FP16 engines) variants side by side, with a concurrency sweep (perf_analyzer) and
# first-chunk latency (streaming), on one GPU node.
#
# Run inside the Triton image this project targets (nvcr.io/nvidia/tritonserver:26.08-py3,
# which has tritonserver with the onnxruntime and tensorrt backends, and trtexec), from a
# checkout with `pip install -e .[bench]` done and voices exported (`triton-tts export ...`):
#
#   bash benchmarks/gpu_bench.sh                       # the default voice
#   VOICES="voices/joe voices/ljs-vits" bash benchmarks/gpu_bench.sh
#   LEVELS="1 8 32" bash benchmarks/gpu_bench.sh       # concurrency sweep
#
# Results: ${OUT:-results/gpu}/<variant>/ (perf_analyzer report + plots, streaming.json).
set -euo pipefail
OUT_DIR="${OUT:-results/gpu}"
VOICES="${VOICES:-voices/joe}"
LEVELS="${LEVELS:-1 2 4 8 16 32 64}"
TRTEXEC="${TRTEXEC:-/usr/src/tensorrt/bin/trtexec}"
REPO="$(mktemp -d)/model_repository"
HTTP_PORT=8000 GRPC_PORT=8001 METRICS_PORT=8002

nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader
voice_args=()
for v in $VOICES; do voice_args+=(--voice "$v"); done
triton-tts build-repo "${voice_args[@]}" --out "$REPO" --max-batch-size 64
# FP16 engines for every voice's native stages (min/opt/max profiles, see export_scripts/triton_tts/export/tensorrt.py)
python3 -m triton_tts.export.tensorrt --repo "$REPO" --max-batch-size 64 --fp16 acoustic vocoder \
  --trtexec "$TRTEXEC"

for variant in gpu tensorrt; do
  mkdir -p "$OUT_DIR/$variant"
  tritonserver --model-repository "$REPO" --model-config-name "$variant" --strict-readiness true \
    --http-port $HTTP_PORT --grpc-port $GRPC_PORT --metrics-port $METRICS_PORT \
    >"$OUT_DIR/$variant/tritonserver.log" 2>&1 &
  server=$!
  trap 'kill $server 2>/dev/null || true' EXIT
  for _ in $(seq 1 300); do
    curl -sf localhost:$HTTP_PORT/v2/health/ready >/dev/null && break
    sleep 1
  done
  curl -sf localhost:$HTTP_PORT/v2/health/ready >/dev/null || { echo "$variant: server not ready"; exit 1; }
  # shellcheck disable=SC2086
  python3 -m benchmarks.perf --url-grpc localhost:$GRPC_PORT --url-http localhost:$HTTP_PORT \
    --levels $LEVELS --out "$OUT_DIR/$variant/perf"
  python3 -m benchmarks.streaming --url-grpc localhost:$GRPC_PORT --url-http localhost:$HTTP_PORT \
    --levels 1 8 32 --no-memory --out "$OUT_DIR/$variant/streaming.json"
  kill $server
  wait $server || true
done
echo "results in $OUT_DIR"
