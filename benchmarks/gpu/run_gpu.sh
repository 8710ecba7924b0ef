#!/usr/bin/env bash
# The prepared GPU run: one attempt of at most 400 s (--budget 400) that
# builds what its stages run, checks each kernel statickv owns, runs the
# [cuda] tests and the CUDA benchmarks in priority order, and leaves the
# results under $OUT as it goes. A second attempt resumes where the first
# stopped (benchmarks/gpu/README.md "Resuming").
#
# On the GPU machine, from a copy of the working tree with the .devdeps/
# that `bash benchmarks/gpu/prep.sh --hf-wheels 3.11,3.12,3.13` made on the
# CPU machine:
#   bash benchmarks/gpu/run_gpu.sh            (allow ~460 s)
#
# $OUT (default results/gpu-run) receives, refreshed after EVERY stage so a
# kill at the limit keeps what finished:
#   summaries.jsonl    one JSON line per stage (benchmarks/gpu/summaries.py):
#                      stage, exit status, seconds, the stage's result JSON
#                      inlined, the last lines of its log, and the commit
#                      (git describe --dirty, marked when the tree changed
#                      after prep.sh), date, torch and transformers versions
#                      and GPU name; commit it as
#                      benchmarks/results/<card>/<date>-<commit>.jsonl
#   gpu_results.tar.gz results/gpu/: every benchmark's JSON and log so far,
#                      with the chained step's kernel inventory (inventory/)
#   run.log            everything printed, stage by stage, with timings and
#                      the GPU's clocks before and after each stage
#   build.log          configure + build output (benchmarks/gpu/build.sh)
#   REPORT.md          benchmarks/report.py over the results (at the end)
#   roofline.json, offload.json  the roofline and offload summaries
#   disabled_kernels   the kernels the checks switched off (may be empty)
# Afterwards, on the CPU machine: tar xzf gpu_results.tar.gz, then
# `python3 benchmarks/report.py results/gpu` draws the plots (gnuplot).
#
# Stages, in this order, each under `timeout` with its own limit; one that
# would start with too little of the budget left is skipped (and says so).
# Tiers are attempts (benchmarks/gpu/stages.py): tier 1 fits one attempt.
#   Attempt 1: the build (only the targets the stages run, at most 1.3x the
#     measured cold build); kernel_checks (Note [kernel switches]: each
#     kernel's tests alone, a failing kernel switched off for every later
#     stage); the [cuda] tests; the chained step (Note [chained step]:
#     llama-3.2-1b bf16 at batch 1 and 16, 32+128 and 1024+128, plain and
#     fused, with the batch-1 kernel inventory; llama-3.1-8b at batch 1);
#     the pick alone; compute-sanitizer (memcheck, racecheck, synccheck) on
#     the new kernels' tests at tiny shapes.
#   Attempt 2: the chained step arm against arm on one checkpoint
#     (transformers' compiled static cache, a gpt-fast-style model file,
#     statickv: benchmarks/chained_arms.py); tensor parallelism at world 1;
#     the replayed single step
#     (model_decode); transformers' compiled static cache (hf_roofline);
#     context length and ragged decode; serving greedy and sampled;
#     statickv.hf's int8/fp8 caches; host offload.
#   Later: the rest (step_ops, the 8B replayed step, SmolLM2 shape, prompt
#     lengths, write cost, attention stack, memory, AOTInductor, the
#     Hugging Face serving and comparison, the Python seeds, memcheck of the
#     whole [memcheck] subset).
# Transformers: the wheels prep.sh carried (.devdeps/wheels, 5.24) go ahead
# of the machine's own.
#
#   --dry-run   on a CPU machine: skip the build (use $STATICKV_BUILD_DIR or
#               build-bench), run every stage on the CPU with tiny settings,
#               OUT defaults to /tmp/statickv-gpu-out, RES to $OUT/gpu. ctest's
#               gpu_dry_run runs it and fails on any stage that fails
#               (benchmarks/gpu/summaries.py check).
#   --budget S  total seconds (default 400)
#   --all       run every stage, even one a committed summary already holds
#   --only A,B  run only the stages named (and the build), in the usual
#               order: a short attempt that re-checks what a fix touched
#   --results-dir DIR
#               the committed summaries (default benchmarks/results/<card>,
#               the card from nvidia-smi: h100, h200, ...):
#               a stage whose source hash (benchmarks/gpu/stages.py, the
#               manifest prep.sh wrote to .devdeps/manifest.json) matches a
#               summary there that exited 0 is skipped as done, so a second
#               attempt starts where the first stopped; the build is skipped
#               when no stage is left
# The dry run first prints each stage's tier and planned seconds
# (stages.py plan; tier 1 plans at most 340 s: 60 s of slack in 400).
set -uo pipefail
cd "$(dirname "$0")/../.."
ROOT=$PWD
dry=0 budget=400 all=0 only="" committed=""
while (($#)); do
  case "$1" in
    --dry-run) dry=1 ;;
    --budget) budget=$2; shift ;;
    --all) all=1 ;;
    --only) only=",$2,"; shift ;;
    --results-dir) committed=$2; shift ;;
    *) echo "run_gpu.sh: unknown flag $1" >&2; exit 2 ;;
  esac
  shift
done
start=$SECONDS
if ((dry)); then
  OUT=${OUT:-/tmp/statickv-gpu-out}
  BUILD=${STATICKV_BUILD_DIR:-$ROOT/build-bench}
  PY=${PY:-$ROOT/.venv/bin/python}
  DEV=cpu
else
  OUT=${OUT:-$ROOT/results/gpu-run}
  BUILD=$ROOT/build-gpu
  PY=${PY:-python3}
  DEV=cuda
fi
mkdir -p "$OUT"
# The card's short name (h100, h200, ...): results are per card.
card() {
  local name
  name=$(nvidia-smi --query-gpu=name --format=csv,noheader 2>/dev/null | head -1 | tr 'A-Z' 'a-z')
  name=$(grep -oE '(h100|h200|b200|gh200|a100|l40s|l4)' <<<"$name" | head -1)
  echo "${name:-gpu}"
}
if [ -z "$committed" ]; then
  if ((dry)); then committed=$ROOT/benchmarks/results/dry-run; else committed=$ROOT/benchmarks/results/$(card); fi
fi
if ((dry)); then RES=${RES:-$OUT/gpu}; else RES=${RES:-$ROOT/results/gpu}; fi
rm -rf "$RES" && mkdir -p "$RES"
SUMMARIES=$OUT/summaries.jsonl
: > "$SUMMARIES"
LOG=$OUT/run.log

left() { echo $((budget - (SECONDS - start))); }
# What each stage runs: the build builds the targets of the stages left to
# run (not done, and named by --only when given) and nothing else.
declare -A TARGETS_OF=(
  [cuda_tests]=statickv_cuda_tests [memcheck]=statickv_cuda_tests
  [tp_cuda_tests]=statickv_tp_cuda_tests [hf_roofline]=statickv-demo
  [model_decode]=statickv_bench_model [model_decode_8b]=statickv_bench_model
  [smollm2_decode_b8]=statickv_bench_model [smollm2_decode_b64]=statickv_bench_model
  [context_length]=statickv_bench_context [step_ops]=statickv_bench_step
  [offload]=statickv_bench_offload [prompt_lengths]=statickv_bench_prompts
  [write_cost]=statickv_bench_write [decode_step]=statickv_bench_decode
  [memory]=statickv_bench_memory [serving]=statickv_bench_serving
  [serving_sampled]=statickv_bench_serving [hf_serving]=statickv_bench_serving
  [aoti]="statickv_bench_aoti statickv_ops" [hf_compare]=statickv-serve
  [kernel_checks]=statickv_cuda_tests [memcheck_all]=statickv_cuda_tests
  [chained]=statickv_bench_chained_decode [chained_8b]=statickv_bench_chained_decode
  [pick]=statickv_bench_pick [chained_arms]=statickv_bench_chained_decode)
# selected NAME: --only names the stage, or there is no --only.
selected() { [ -z "$only" ] || [[ $only == *",$1,"* ]]; }
# wanted NAME: the stage is left to run (not done, and selected).
wanted() { [ -z "${DONE[$1]:-}" ] && selected "$1"; }
# deadline_s MAX MARGIN: for a stage whose timeout is min(MAX, left - 10),
# as stage() gives it, a deadline MARGIN seconds short of it (at least 20).
deadline_s() {
  local l t
  l=$(left)
  t=$((l - 10 < $1 ? l - 10 : $1))
  echo $((t > $2 + 20 ? t - $2 : 20))
}
gpu_targets() {
  local name
  for name in "${!TARGETS_OF[@]}"; do
    wanted "$name" && echo "${TARGETS_OF[$name]}"
  done | tr ' ' '\n' | sort -u | tr '\n' ' '
}
# Hugging Face: the transformers wheels prep.sh --hf-wheels carried (the
# pinned 5.24) go ahead of the machine's own, installed once into a private
# folder put first on PYTHONPATH; without them, the machine's own.
hf_python() {
  if ls .devdeps/wheels/transformers-*.whl >/dev/null 2>&1; then
    echo "== installing the carried transformers wheels (.devdeps/wheels) ahead of the machine's"
    local pkgs
    pkgs=$(ls .devdeps/wheels | sed -E 's/-[0-9].*//' | sort -u | tr '\n' ' ')
    # shellcheck disable=SC2086  # one package name per word
    "$PY" -m pip install -q --no-index --no-deps --find-links .devdeps/wheels \
      --target /tmp/statickv-hf-py $pkgs && export PYTHONPATH="/tmp/statickv-hf-py:${PYTHONPATH:-}"
  fi
}
# After each stage: its summary line, then the tarball of everything so far.
summarize() {
  "$PY" benchmarks/gpu/summaries.py add "$SUMMARIES" --env "$ENV_JSON" "$@" ||
    echo "== (could not write the summary of $*)"
  tar -C "$(dirname "$RES")" -czf "$OUT/gpu_results.tar.gz" "$(basename "$RES")" 2>/dev/null || true
}
# Each stage's source hash and whether a committed summary holds it
# (benchmarks/gpu/stages.py status): "NAME HASH done WHERE" or "NAME HASH
# pending", one line a stage.
MANIFEST=$ROOT/.devdeps/manifest.json
declare -A HASH=() DONE=()
load_status() {
  local name hash state where mode=()
  ((dry)) && mode=(--dry-run)
  while read -r name hash state where; do
    HASH[$name]=$hash
    [ "$state" = done ] && [ "$name" != build ] && ((!all)) && DONE[$name]=$where
  done < <("$PY" benchmarks/gpu/stages.py status --results "$committed" --manifest "$MANIFEST" "${mode[@]}")
  # hf_serving replays the trace the serving stage writes: serving runs
  # again while hf_serving is left.
  [ -z "${DONE[hf_serving]:-}" ] && unset 'DONE[serving]'
  return 0
}
# stage NAME NEED MAX COMMAND...: runs COMMAND under timeout min(MAX, left - 10)
# when at least NEED seconds are left and no committed summary holds it;
# its output goes to results/gpu/NAME.txt.
stage() {
  local name=$1 need=$2 max=$3; shift 3
  if ! selected "$name"; then
    echo "== $name: not in --only"
    return 0
  fi
  if [ -n "${DONE[$name]:-}" ]; then
    echo "== $name: DONE (${DONE[$name]} holds its sources ${HASH[$name]}; --all runs it again)"
    summarize --stage "$name" --skipped "done: ${DONE[$name]}" --sources-hash "${HASH[$name]}"
    return 0
  fi
  local l; l=$(left)
  if ((l < need)); then
    echo "== $name: SKIPPED ($l s left, needs $need)"
    summarize --stage "$name" --skipped "$l s left, needs $need"
    return 0
  fi
  local t=$((l - 10 < max ? l - 10 : max))
  echo "== $name (timeout ${t}s, $l s left): $*"
  clocks "before $name"
  local t0=$SECONDS
  timeout --kill-after=10 "$t" "$@" > "$RES/$name.txt" 2>&1
  local rc=$?
  clocks "after $name"
  tail -n 40 "$RES/$name.txt"
  echo "== $name: exit $rc after $((SECONDS - t0)) s"
  summarize --stage "$name" --exit "$rc" --seconds "$((SECONDS - t0))" \
    --result "$RES/$name.json" --log "$RES/$name.txt" --sources-hash "${HASH[$name]:-unknown}"
  return 0
}

# The commit the summaries record (the manifest's, marked when the tree
# changed after prep.sh: benchmarks/gpu/summaries.py env).
env_commit() {
  "$PY" -c 'import json, sys; print(json.loads(sys.argv[1]).get("commit", "unknown"))' \
    "$ENV_JSON" 2>/dev/null || echo unknown
}
# The GPU's clocks, temperature and power, for the log beside each stage.
clocks() {
  ((dry)) && return 0
  echo "== clocks $1: $(nvidia-smi --query-gpu=clocks.sm,clocks.mem,temperature.gpu,power.draw \
    --format=csv,noheader 2>&1 | head -1)"
}

main() {
hf_python
envflags=(--manifest "$MANIFEST"); ((dry)) && envflags+=(--dry-run)
ENV_JSON=$("$PY" benchmarks/gpu/summaries.py env "${envflags[@]}" 2>/dev/null || echo '{}')
"$PY" benchmarks/gpu/stages.py plan
load_status
# The build is never done by itself: it runs while any other stage is left.
pending=$(( ${#HASH[@]} - 1 - ${#DONE[@]} ))
echo "== resume: ${#DONE[@]} stages done in $committed, $pending to run$( ((all)) && echo ' (--all)')"
echo "== statickv GPU run $(date -u +%FT%TZ), budget ${budget}s, dry-run $dry: $ENV_JSON"
git log -1 --format='commit %H %s' 2>/dev/null || true
nvidia-smi --query-gpu=name,memory.total,driver_version,clocks.max.sm,clocks.max.mem --format=csv 2>&1 | head -3
"$PY" -c 'import torch, sys; print("python", sys.version.split()[0], "torch", torch.__version__, "cuda", torch.version.cuda, "gpu", torch.cuda.is_available() and torch.cuda.get_device_name(0))'
command -v nvcc >/dev/null && nvcc --version | tail -1
nproc

if ((!dry)) && ((pending == 0)); then
  echo "== build: SKIPPED (every stage is done; --all runs them again)"
elif ((!dry)) && [ -z "$(gpu_targets)" ]; then
  echo "== build: SKIPPED (no stage left to run needs a CMake target)"
elif ((!dry)); then
  echo "== build (benchmarks/gpu/build.sh): $(gpu_targets)"
  t0=$SECONDS
  [ -d .devdeps/usr ] || { echo "no .devdeps/usr: run benchmarks/gpu/prep.sh on the CPU machine and send .devdeps/ along"; return 1; }
  export LD_LIBRARY_PATH="$ROOT/.devdeps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
  # 1.3x the measured cold build (80 s on the H200 with 16 cores).
  PY=$PY BUILD_TARGETS="$(gpu_targets)" timeout "${BUILD_LIMIT:-105}" bash benchmarks/gpu/build.sh \
    -DSTATICKV_BUILD_EXAMPLES=OFF > "$OUT/build.log" 2>&1
  rc=$?
  tail -n 25 "$OUT/build.log"
  echo "== build: exit $rc after $((SECONDS - t0)) s"
  summarize --stage build --exit "$rc" --seconds "$((SECONDS - t0))" --log "$OUT/build.log"
  # A failed build may still have built most targets; run what exists.
fi
B=$BUILD/benchmarks
have() { [ -x "$1" ] || { echo "== missing $1 (not built)"; return 1; }; }

# Note [kernel switches]: each kernel's tests alone, first; a kernel that
# fails is switched off (STATICKV_DISABLE_KERNELS) for every later stage.
if have "$BUILD/tests/cuda/statickv_cuda_tests"; then
  stage kernel_checks 15 60 bash benchmarks/gpu/kernel_checks.sh \
    "$BUILD/tests/cuda/statickv_cuda_tests" "$OUT/disabled_kernels"
  if [ -s "$OUT/disabled_kernels" ]; then
    export STATICKV_DISABLE_KERNELS
    STATICKV_DISABLE_KERNELS=$(cat "$OUT/disabled_kernels")
    echo "== kernels switched off for the later stages: $STATICKV_DISABLE_KERNELS"
  fi
fi
if ((!dry)); then
  have "$BUILD/tests/cuda/statickv_cuda_tests" &&
    stage cuda_tests 30 90 "$BUILD/tests/cuda/statickv_cuda_tests" "[cuda]" --durations yes
fi
if ((dry)); then
  model=(--shape tiny --dtype fp32 --context 64 --max-len 128 --rounds 3 --calls 2 --fused)
  model8b=(--shape tiny --dtype fp32 --context 64 --max-len 128 --rounds 2 --calls 2 --fused)
  roofargs=(--shapes tiny --prompt-len 16 --new-tokens 8 --rounds 1 --compile-backend eager
            --cuda-parts-on-cpu)
  prompts=(--shape tiny --max-len 64 --prompts 8 --reps 1)
  context=(--max-len 512 --rounds 3 --calls 2 --layers 2)
  step=(--shape tiny,tiny-gemma3 --dtype fp32 --batch 1 --context 16 --time --rounds 2 --calls 1)
  hfargs=(--shapes tiny --prompt-len 16 --new-tokens 8 --rounds 2)
  write=(--rounds 3 --calls 5 --layers 2 --context 64 --max-len 128 --window 32)
  decode=(--rounds 3 --calls 2 --layers 2 --context 64 --max-len 256)
  smollm2=(--shape tiny --dtype fp32 --context 32 --max-len 64 --rounds 2 --calls 2)
  offload=(--shape tiny --dtype fp32 --cells 1x64,2x32 --rounds 2 --calls 1)
  serving=(--shape tiny --requests 20 --rate 50 --max-len 256 --max-prompt 64 --max-new 32)
  sampled=(--shape tiny --requests 16 --rate 0 --max-batch 16 --max-len 256 --max-prompt 64
           --max-new 32 --sampling --rounds 1)
  chained=(--shape tiny --dtype fp32 --batch 1,4 --contexts 8+8,32+8 --rounds 2)
  chained8b=(--shape tiny --dtype fp32 --batch 1 --contexts 8+8 --rounds 2)
  pick=(--vocab 4096 --batch 1,4 --rounds 2 --calls 5)
  arms=(--shape tiny --batches 1,2 --contexts 8+8 --rounds 2 --compile-backend eager)
else
  # --fused: every variant beside its fused twin, and the kernels of a
  # captured batch-1 step per path.
  model=(--shape llama-3.2-1b --dtype bf16 --context 1024 --max-len 2048 --rounds 12 --calls 10
         --fused)
  # The 8B shape at batch 1 only (a max_batch 1 cache; 16 GB of random bf16 weights).
  model8b=(--shape llama-3.1-8b --dtype bf16 --context 1024 --max-len 2048 --max-batch 1
           --no-full-batch --rounds 5 --calls 5 --fused)
  roofargs=(--shapes llama-3.2-1b --prompt-len 128 --new-tokens 64 --rounds 2)
  prompts=(--shape llama-3.2-1b --dtype bf16 --max-len 2048 --prompts 64 --reps 2)
  # bf16 with graphs: Cache::attend's varlen path beside the masked one, and
  # the 16-row ragged variant (lengths 128..8192).
  context=(--graphs --dtype bf16 --max-len 8192 --rounds 20 --calls 10)
  # Each family's shape (random weights), plain against fused: launches,
  # the kernel and memcpy nodes of a captured step, eager step times.
  step=(--shape llama-3.2-1b:2,llama-3.2-1b,smollm2-135m,gemma3-270m --dtype bf16 --batch 1,16
        --context 512 --time --rounds 10 --calls 5)
  hfargs=(--shapes llama-3.2-1b --prompt-len 128 --new-tokens 64 --rounds 3 --new-lengths 37,300,1000)
  write=(--rounds 20 --calls 50)
  decode=(--rounds 30 --calls 10)
  # SmolLM2-135M's shape with random weights (the real ones cannot travel):
  # batch 1 and 8 (--max-batch 8), batch 64 (--max-batch 64), bf16, graphs.
  smollm2=(--shape smollm2-135m --dtype bf16 --context 512 --max-len 1024 --rounds 10 --calls 10)
  # Host offload: the 8B shape, batch 1 at 4k..128k and batch 16 at 4k..16k
  # (the default cells; at most 32 GiB pinned), CUDA graphs.
  offload=(--shape llama-3.1-8b --dtype bf16 --rounds 5 --calls 2)
  serving=(--shape llama-3.2-1b --dtype bf16 --requests 200 --rate 30 --max-batch 16 --max-len 1024
           --max-prompt 512 --max-new 256)
  # Note [sampling head]: half the requests sampled against all greedy, batch 16, capacity.
  sampled=(--shape llama-3.2-1b --dtype bf16 --requests 64 --rate 0 --max-batch 16 --max-len 1024
           --max-prompt 256 --max-new 128 --sampling --rounds 3)
  # Note [chained step]: the anchor's 32+128 and context 1024, batch 1 and
  # 16, plain and fused; the 8B shape at batch 1.
  chained=(--shape llama-3.2-1b --dtype bf16 --batch 1,16 --contexts 32+128,1024+128
           --paths plain,fused --rounds 5)
  chained8b=(--shape llama-3.1-8b --dtype bf16 --batch 1 --contexts 32+128,1024+128
             --paths plain,fused --rounds 3)
  pick=(--vocab 128256 --batch 1,16 --rounds 7 --calls 50)
  # One workload (each cell compiles each Python arm once), batch 1 first.
  arms=(--shape llama-3.2-1b --batches 1,16 --contexts 32+128 --rounds 5)
fi
# Note [chained step]: dependent steps with the pick inside, fed back on
# the device; the batch-1 steps' kernel inventory goes to $RES/inventory.
have "$B/statickv_bench_chained_decode" &&
  stage chained 60 110 "$B/statickv_bench_chained_decode" --device "$DEV" "${chained[@]}" \
    --inventory "$RES/inventory" --json "$RES/chained.json"
have "$B/statickv_bench_chained_decode" &&
  stage chained_8b 40 75 "$B/statickv_bench_chained_decode" --device "$DEV" "${chained8b[@]}" \
    --json "$RES/chained_8b.json"
have "$B/statickv_bench_pick" &&
  stage pick 10 40 "$B/statickv_bench_pick" --device "$DEV" "${pick[@]}" --json "$RES/pick.json"
# compute-sanitizer on the new kernels' tests at tiny shapes (the sampling
# head's pick and its greedy grid, act_mul, the decode prepare): memcheck, racecheck and synccheck,
# with the caching allocator off so every out-of-bounds read lands outside
# a cudaMalloc block. In a dry run the same filter runs without the
# sanitizer (it exits 77 without a GPU: plumbing only).
sanitizer=$(command -v compute-sanitizer || echo /usr/local/cuda/bin/compute-sanitizer)
new_kernels='[cuda][sampling]~[serving]~[speculative],[cuda][act_mul],[cuda][decode_prepare]'
if have "$BUILD/tests/cuda/statickv_cuda_tests"; then
  if ((dry)); then
    stage memcheck 10 30 "$BUILD/tests/cuda/statickv_cuda_tests" "$new_kernels"
  elif [ -x "$sanitizer" ]; then
    stage memcheck 45 90 bash -c 'for tool in memcheck racecheck synccheck; do
        echo "== compute-sanitizer --tool $tool"
        env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$0" --tool "$tool" --error-exitcode 1 \
          "$1" "$2" --durations yes || exit 1
      done' "$sanitizer" "$BUILD/tests/cuda/statickv_cuda_tests" "$new_kernels"
  else
    echo "== memcheck: SKIPPED (no compute-sanitizer)"
  fi
fi
# Attempt 2 starts here. The chained step arm against arm on one seeded
# checkpoint (benchmarks/chained_arms.py): transformers' static cache
# compiled with reduce-overhead, a gpt-fast-style model file, statickv; a
# table after every cell, so a cut stage keeps what it measured.
if "$PY" -c 'import transformers' 2>/dev/null && have "$B/statickv_bench_chained_decode"; then
  stage chained_arms 90 150 "$PY" benchmarks/chained_arms.py --bench "$B/statickv_bench_chained_decode" \
    --device "$DEV" "${arms[@]}" --workdir /tmp/statickv-hf --json "$RES/chained_arms.json"
fi
if ((!dry)); then
  # Tensor parallelism, world 1 through NCCL (docs/tensor_parallel.md): seconds.
  have "$BUILD/tests/tp/statickv_tp_cuda_tests" &&
    stage tp_cuda_tests 15 60 "$BUILD/tests/tp/statickv_tp_cuda_tests" "[cuda]" --durations yes
fi
have "$B/statickv_bench_model" &&
  stage model_decode 40 75 "$B/statickv_bench_model" --device "$DEV" "${model[@]}" --json "$RES/model_decode.json"
# Decode tokens/s at batch 1 and 16, transformers' static cache with
# its compiled decode step against statickv-demo (plain and fused), and
# dynamo's recompiles for a new prompt length. Saved after every batch.
if "$PY" -c 'import transformers' 2>/dev/null && have "$BUILD/apps/statickv-demo"; then
  # The recompile count (optional) starts only before a deadline 40 s short
  # of the stage's timeout; each batch's figures are saved as they come.
  stage hf_roofline 90 170 "$PY" benchmarks/hf_compare.py --parts roofline \
    --deadline-s "$(deadline_s 170 40)" \
    --demo "$BUILD/apps/statickv-demo" --device "$DEV" "${roofargs[@]}" \
    --roofline-batches 1,16 --workdir /tmp/statickv-hf --json "$RES/hf_roofline.json"
fi
have "$B/statickv_bench_context" &&
  stage context_length 30 60 "$B/statickv_bench_context" --device "$DEV" "${context[@]}" --json "$RES/context_length.json"
# Continuous batching (Scheduler) vs static batching (Generator) on one trace.
have "$B/statickv_bench_serving" &&
  stage serving 40 120 "$B/statickv_bench_serving" --device "$DEV" "${serving[@]}" --json "$RES/serving.json" \
    --trace-out "$RES/serving_trace.json"
have "$B/statickv_bench_serving" &&
  stage serving_sampled 60 120 "$B/statickv_bench_serving" --device "$DEV" "${sampled[@]}" \
    --json "$RES/serving_sampled.json"

# Host offload: decode with the cache offloaded to pinned host memory against
# the device cache, and the link's own bandwidth; summary copied to $OUT.
if have "$B/statickv_bench_offload"; then
  stage offload 60 90 "$B/statickv_bench_offload" --device "$DEV" "${offload[@]}" \
    --json "$RES/offload.json"
  [ -f "$RES/offload.json" ] && "$PY" -c 'import json, sys; d = json.load(open(sys.argv[1]));
d["commit"] = sys.argv[2]; json.dump(d, open(sys.argv[3], "w"), indent=2)' \
    "$RES/offload.json" "$(env_commit)" "$OUT/offload.json"
fi
have "$B/statickv_bench_step" &&
  stage step_ops 60 150 "$B/statickv_bench_step" --device "$DEV" "${step[@]}" --json "$RES/step_ops.json"
have "$B/statickv_bench_model" &&
  stage model_decode_8b 45 60 "$B/statickv_bench_model" --device "$DEV" "${model8b[@]}" \
    --json "$RES/model_decode_8b.json"
if have "$B/statickv_bench_model"; then
  for rows in 8 64; do
    stage "smollm2_decode_b$rows" 30 60 "$B/statickv_bench_model" --device "$DEV" "${smollm2[@]}" \
      --max-batch "$rows" --json "$RES/smollm2_decode_b$rows.json"
  done
fi
have "$B/statickv_bench_prompts" &&
  stage prompt_lengths 60 120 "$B/statickv_bench_prompts" --device "$DEV" "${prompts[@]}" --json "$RES/prompt_lengths.json"

have "$B/statickv_bench_write" &&
  stage write_cost 20 40 "$B/statickv_bench_write" --device "$DEV" "${write[@]}" --json "$RES/write_cost.json"
have "$B/statickv_bench_decode" &&
  stage decode_step 20 40 "$B/statickv_bench_decode" --device "$DEV" "${decode[@]}" --json "$RES/decode_step.json"
have "$B/statickv_bench_memory" &&
  stage memory 5 20 "$B/statickv_bench_memory" --json "$RES/memory.json"
# An AOTInductor package (compiled here, for this device; its checkpoint is
# made by transformers) vs the reference decoder.
if "$PY" -c 'import transformers' 2>/dev/null && have "$B/statickv_bench_aoti"; then
  stage aoti 90 180 bash benchmarks/gpu/aoti.sh "$PY" "$BUILD" "$DEV" "$RES"
fi
# Hugging Face's continuous batching on the trace the serving stage replayed.
if "$PY" -c 'import transformers' 2>/dev/null && [ -f "$RES/serving_trace.json" ]; then
  stage hf_serving 60 120 "$PY" benchmarks/hf_serving.py --trace "$RES/serving_trace.json" \
    --shape "${serving[1]}" --device "$DEV" --workdir /tmp/statickv-hf --json "$RES/hf_serving.json"
fi
if "$PY" -c 'import transformers' 2>/dev/null && have "$BUILD/apps/statickv-serve"; then
  # Its optional parts (torch.compile, new lengths) start only before a
  # deadline a minute short of the stage's timeout; results are saved after
  # every part, so a kill at the timeout keeps what finished.
  stage hf_compare 90 240 "$PY" benchmarks/hf_compare.py --exe "$BUILD/apps/statickv-serve" \
    --device "$DEV" "${hfargs[@]}" --deadline-s "$(deadline_s 240 60)" \
    --workdir /tmp/statickv-hf --json "$RES/hf_compare.json"
else
  echo "== hf_compare: SKIPPED (no transformers for $PY: run prep.sh --hf-wheels <python version>)"
fi

# The seed scenarios from Python (statickv.hf; mode="reduce-overhead" on
# CUDA), after everything else: the package is built against this machine's
# torch first (a minute or two), and the stage runs only with time to spare.
if "$PY" -c 'import transformers' 2>/dev/null && (($(left) > 200)); then
  if { wanted hf_seeds || wanted hf_quantized; } &&
    ! "$PY" -c 'import statickv' 2>/dev/null; then
    echo "== building the Python package into /tmp/statickv-py"
    MAX_JOBS=$(nproc) timeout 150 "$PY" -m pip install -q --no-build-isolation --no-deps \
      --target /tmp/statickv-py . >"$RES/python_build.txt" 2>&1 &&
      export PYTHONPATH="/tmp/statickv-py:${PYTHONPATH:-}"
  fi
  seedargs=(--new-tokens 16 --seed-prompt-buckets "32")
  # Plumbing only: three of the 16 prompt lengths, one set of prompt buckets.
  ((dry)) && seedargs=(--new-tokens 4 --compile-backend eager --seed-lengths 3
    --seed-prompt-buckets "32,64,96,128")
  "$PY" -c 'import statickv' 2>/dev/null &&
    stage hf_seeds 120 240 "$PY" benchmarks/hf_compare.py --parts seeds --device "$DEV" \
      "${seedargs[@]}" --workdir /tmp/statickv-hf --json "$RES/hf_seeds.json"
  # statickv.hf's int8/fp8 caches on CUDA: the operator against the CPU's
  # bytes, and CUDA graphs (reduce-overhead) against eager.
  "$PY" -c 'import statickv' 2>/dev/null &&
    stage hf_quantized 60 120 "$PY" -m pytest -q -p no:cacheprovider -k cuda -rs \
      tests/python/test_hf_quantized.py
fi

# compute-sanitizer memcheck over the [memcheck] subset of the [cuda] tests
# (the cache and attention tests with max_len <= 256, eager: the varlen
# path's strided key view and offsets are the reads it checks), with the
# caching allocator off so every out-of-bounds read lands outside a
# cudaMalloc block. In a dry run the same test filter runs without the
# sanitizer (it exits 77 without a GPU: plumbing only).
if have "$BUILD/tests/cuda/statickv_cuda_tests"; then
  if ((dry)); then
    stage memcheck_all 10 30 "$BUILD/tests/cuda/statickv_cuda_tests" "[memcheck]"
  elif [ -x "$sanitizer" ]; then
    stage memcheck_all 60 110 env PYTORCH_NO_CUDA_MEMORY_CACHING=1 "$sanitizer" --tool memcheck \
      --error-exitcode 1 "$BUILD/tests/cuda/statickv_cuda_tests" "[memcheck]" --durations yes
  else
    echo "== memcheck: SKIPPED (no compute-sanitizer)"
  fi
fi


commit=$(env_commit)
"$PY" benchmarks/report.py "$RES" --title "statickv on $DEV ($(date -u +%F))" \
  --roofline "$OUT/roofline.json" --commit "$commit" &&
  cp "$RES/REPORT.md" "$OUT/REPORT.md"
tar -C "$(dirname "$RES")" -czf "$OUT/gpu_results.tar.gz" "$(basename "$RES")"
echo "== done in $((SECONDS - start)) s; $OUT: $(ls "$OUT" | tr '\n' ' ')"
}

main 2>&1 | tee "$LOG"
