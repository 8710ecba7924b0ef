#!/usr/bin/env bash
# The GPU run's plumbing on the CPU (benchmarks/gpu/run_gpu.sh --dry-run):
# every stage with tiny settings, then benchmarks/gpu/summaries.py check:
# each stage wrote its summary line with the run's environment, and none
# failed (77, the [cuda] tests' "no GPU", counts as skipped).
#   check_gpu_dry_run.sh BUILD_DIR PYTHON OUT_DIR
set -uo pipefail
build=$1 py=$2 out=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out" && mkdir -p "$out"
OUT=$out STATICKV_BUILD_DIR=$build PY=$py bash "$root/benchmarks/gpu/run_gpu.sh" --dry-run \
  --budget 420 > "$out/dry_run.log" 2>&1
rc=$?
grep -E '^== ' "$out/dry_run.log"
((rc == 0)) || { echo "run_gpu.sh --dry-run exited $rc"; tail -40 "$out/dry_run.log"; exit 1; }
cd "$root" && "$py" benchmarks/gpu/summaries.py check "$out/summaries.jsonl" \
  --stages memcheck,model_decode,hf_roofline,context_length,step_ops,model_decode_8b,offload,serving
