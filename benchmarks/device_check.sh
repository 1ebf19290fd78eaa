#!/usr/bin/env bash
# The GPU device check, as one prepared run (see README "GPU device check").
# Expects: the exported vocoder at voices/joe/vocoder.onnx and onnx2torch's wheel in .whl/.
# Writes its JSON to ${OUT:-results}/gpu_vocoder.json.
set -euo pipefail
OUT_DIR="${OUT:-results}"
mkdir -p "$OUT_DIR"
nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv,noheader || true
if ls .whl/*.whl >/dev/null 2>&1; then
  python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --target /tmp/site .whl/*.whl
  export PYTHONPATH=/tmp/site
fi
PYTHONUNBUFFERED=1 python3 benchmarks/gpu_vocoder_check.py \
  --vocoder voices/joe/vocoder.onnx --out "$OUT_DIR/gpu_vocoder.json" "$@"
