#!/usr/bin/env bash
# run_gpu.sh's aoti stage (docs/aoti.md): the cross-check Llama (made here by
# tests/reference/hf/make_reference.py), exported and compiled with AOTInductor for
# DEVICE on this machine (a CUDA package is compiled where its GPU is), then
# statickv_bench_aoti: the package vs the reference decoder, decode and prefill.
#   bash benchmarks/gpu/aoti.sh PYTHON BUILD_DIR DEVICE RESULTS_DIR
# The operator comes from the CMake build's libstatickv_ops.so, so the Python
# package need not be installed.
set -euo pipefail
PY=$1 BUILD=$2 DEV=$3 RES=$4
"$PY" tests/reference/hf/make_reference.py "$RES/aoti-hf" > "$RES/aoti_make_reference.log" 2>&1
STATICKV_OPS_LIBRARY="$BUILD/aoti/libstatickv_ops.so" "$PY" examples/aoti/export.py \
  --checkpoint "$RES/aoti-hf/llama" --out "$RES/aoti-llama-$DEV.pt2" --device "$DEV" \
  --max-batch 4 --max-len 40 --max-chunk 16
"$BUILD/benchmarks/statickv_bench_aoti" --device "$DEV" --checkpoint "$RES/aoti-hf/llama" \
  --package "$RES/aoti-llama-$DEV.pt2" --max-batch 4 --max-len 40 --max-chunk 16 \
  --rounds 20 --calls 20 --json "$RES/aoti.json"
