#!/usr/bin/env bash
# The GPU run's plumbing on the CPU (benchmarks/gpu/run_gpu.sh --dry-run):
# every stage with tiny settings, then benchmarks/gpu/summaries.py check:
# each stage wrote its summary line with the run's environment, and none
# failed (77, the [cuda] tests' "no GPU", counts as skipped). The plan:
# the first attempt (tier 1) at most 340 planned seconds, 60 s short of its
# 400 (stages.py plan --check). Then the
# resume: the first run's summaries stand in for committed ones, with one
# stage's source hash changed; a second dry run must run that stage again
# and skip every other stage that passed as done.
#   check_gpu_dry_run.sh BUILD_DIR PYTHON OUT_DIR
set -uo pipefail
build=$1 py=$2 out=$3
root=$(cd "$(dirname "$0")/../.." && pwd)
rm -rf "$out" && mkdir -p "$out"
# A budget the plumbing cannot run out of while ctest runs other tests
# beside it (alone, the first dry run takes about 3 minutes); the plan's
# own limit is checked by stages.py below.
budget=900
dry_run() {  # dry_run OUT_DIR [run_gpu.sh flags...]
  local dir=$1; shift
  OUT=$dir STATICKV_BUILD_DIR=$build PY=$py bash "$root/benchmarks/gpu/run_gpu.sh" --dry-run \
    --budget "$budget" "$@" > "$dir.log" 2>&1
  local rc=$?
  grep -E '^== ' "$dir.log"
  ((rc == 0)) || { echo "run_gpu.sh --dry-run $* exited $rc"; tail -40 "$dir.log"; exit 1; }
}
# The first attempt, as if nothing were committed yet.
mkdir -p "$out/none"
dry_run "$out/first" --results-dir "$out/none"
cd "$root" || exit 1
"$py" benchmarks/gpu/summaries.py check "$out/first/summaries.jsonl" \
  --stages kernel_checks,chained,chained_8b,pick,memcheck,chained_arms,model_decode,hf_roofline,context_length,step_ops,model_decode_8b,offload,serving ||
  exit 1
"$py" benchmarks/gpu/stages.py plan --check 340 || exit 1
# The second attempt: memory's sources "changed" since the first.
mkdir -p "$out/committed"
sed -E 's/("stage": "memory".*"sources_hash": ")[0-9a-f]+/\1changed/' \
  "$out/first/summaries.jsonl" > "$out/committed/first.jsonl"
grep -q '"changed"' "$out/committed/first.jsonl" || { echo "no memory summary to change"; exit 1; }
dry_run "$out/second" --results-dir "$out/committed"
"$py" benchmarks/gpu/summaries.py check-resume "$out/second/summaries.jsonl" \
  --committed "$out/committed/first.jsonl" --ran memory
