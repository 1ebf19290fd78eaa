#!/usr/bin/env bash
# The GPU device check, as one prepared run (see docs/performance.md, "GPU device check").
# Expects: the exported vocoder at voices/joe/vocoder.onnx and onnx2torch's wheel in .whl/.
# Measures: the exported vocoder through PyTorch on CUDA (onnx2torch), parity with
# onnxruntime on CPU, throughput per batch size in FP32 and FP16, and the TensorRT
# profile's corners (up to max batch x the frame budget): latency and peak memory, and what
# admission would take of the GPU: the best batch's audio seconds per second, what the
# start-up capacity burst's batches reach, and the listeners admitted at the default headroom.
# Unproven by it: Triton's native backends and TensorRT itself (not on the lent machine).
# Then XTTS v2's decode step against batch size (benchmarks/gpu_xtts_step.py).
# Writes its JSON to ${OUT:-results}/gpu_vocoder.json and gpu_xtts_step.json.
set -euo pipefail
OUT_DIR="${OUT:-results}"
mkdir -p "$OUT_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
# The vocoder profile's frame budget for this voice, from the one place that decides it.
MAX_FRAMES=$(python3 -c "import json; from triton_tts.runtime.limits import frame_budget; \
v = json.load(open('voices/joe/voice.json')); print(frame_budget(v['sample_rate'], v['hop_length']))")
PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_vocoder_check \
  --vocoder voices/joe/vocoder.onnx --out "$OUT_DIR/gpu_vocoder.json" --max-frames "$MAX_FRAMES" "$@"
# XTTS v2's decode step against batch size (a stand-in of the exported GPT's shape, PyTorch).
PYTHONUNBUFFERED=1 python3 -m benchmarks.gpu_xtts_step --out "$OUT_DIR/gpu_xtts_step.json"
