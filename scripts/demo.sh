#!/usr/bin/env bash
# The main job: installs what is missing, builds, and runs the bundled
# benchmarks on CUDA when LibTorch sees a GPU, else on the CPU.
#   bash scripts/demo.sh [--device cpu|cuda] [--quick] [other benchmark flags]
source "$(dirname "$0")/setup.sh"
quick=0
args=()
for a in "$@"; do
  if [ "$a" = --quick ]; then quick=1; else args+=("$a"); fi
done
mkdir -p "$STATICKV_ROOT/results"
extra=()
((quick)) && extra=(--rounds 15 --calls 2)
echo
"$BUILD_DIR/benchmarks/statickv_bench_decode" "${extra[@]}" \
  --json "$STATICKV_ROOT/results/decode_step.json" "${args[@]}"
echo
"$BUILD_DIR/benchmarks/statickv_bench_memory" | tee "$STATICKV_ROOT/results/memory.txt"
echo
echo "results: $STATICKV_ROOT/results/"
