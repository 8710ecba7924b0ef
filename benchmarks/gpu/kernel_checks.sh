#!/usr/bin/env bash
# Note [kernel switches]: each device kernel statickv owns, tested alone
# before any benchmark uses it. A kernel whose [cuda] tests fail is named in
# OFF_FILE, which run_gpu.sh exports as STATICKV_DISABLE_KERNELS for every
# later stage: the benchmarks then run the path the kernel replaced and say
# so. The failing test's own output (each prints its largest error) stays
# in the log.
#   kernel_checks.sh CUDA_TESTS_EXE OFF_FILE
# Exit 0 when every kernel passed, 1 when any was switched off, 77 without
# a GPU (the tests' own skip).
set -uo pipefail
exe=$1 off_file=$2
# name: the Catch2 filter of its tests (kernel_names() in
# include/statickv/kernel_switches.hpp lists the same names).
checks=(
  "sample_pick:[cuda][sampling]~[serving]~[speculative]"
  "rotary_write:[cuda][rotary]"
  "fp32_logits:[cuda][fp32_logits]"
  "act_mul:[cuda][act_mul]"
  "decode_prepare:[cuda][decode_prepare]"
)
: > "$off_file"
failed=0
for check in "${checks[@]}"; do
  name=${check%%:*} filter=${check#*:}
  "$exe" "$filter" --durations yes
  rc=$?
  if ((rc == 77)); then
    echo "== kernel $name: no GPU (skipped)"
    exit 77
  elif ((rc == 0)); then
    echo "== kernel $name: ok"
  else
    echo "== kernel $name: FAILED (exit $rc): switched off for the later stages"
    { [ -s "$off_file" ] && echo -n ,; echo -n "$name"; } >> "$off_file"
    failed=1
  fi
done
echo "== kernels switched off: $(cat "$off_file")"
exit "$failed"
