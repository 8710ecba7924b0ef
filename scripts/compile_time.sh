#!/usr/bin/env bash
# The compile time of a consumer's translation unit against the compiled
# core and with Cache's bodies inline (docs/design.md, "The library's
# build"): a file that builds a StaticCache and runs one prepare, update
# and attend, compiled with the build's own flags (taken from the command
# of tests/core/test_rotary.cpp), ROUNDS times each way, interleaved. The
# compiled side sees cache.hpp as a consumer of the default build does; the
# inline side defines STATICKV_HEADER_ONLY.
#   scripts/compile_time.sh [BUILD_DIR] [ROUNDS]     (defaults: build, 3)
set -euo pipefail
build=${1:-build} rounds=${2:-3}
root=$(cd "$(dirname "$0")/.." && pwd)
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
cat >"$work/use.cpp" <<'CPP'
#include <statickv/statickv.hpp>
at::Tensor step_once(statickv::CacheConfig config, const at::Tensor& k, const at::Tensor& pos) {
  statickv::StaticCache cache(config);
  const statickv::StepPlan plan = cache.prepare(pos, k.size(0));
  const statickv::KV kv = cache.update(0, k, k, plan);
  return cache.attend(0, k, kv, plan);
}
CPP
cmd=$(ninja -C "$build" -t commands tests/core/statickv_tests | grep -- "-c $root/tests/core/test_rotary.cpp" | head -1)
[ -n "$cmd" ] || { echo "no compile command for tests/core/test_rotary.cpp in $build" >&2; exit 1; }
cmd=$(echo "$cmd" | sed -E -e "s| -o [^ ]+| -o $work/use.o|" -e "s| -c [^ ]+| -c $work/use.cpp|" \
  -e 's| -MD -MT [^ ]+ -MF [^ ]+||' -e 's| -DSTATICKV_HEADER_ONLY||')
seconds() { /usr/bin/time -f '%U %S' bash -c "$1" 2>&1 >/dev/null | tail -1 | awk '{printf "%.2f", $1 + $2}'; }
for ((i = 1; i <= rounds; i++)); do
  echo "round $i: compiled core $(seconds "cd $build && $cmd") s, inline $(seconds "cd $build && $cmd -DSTATICKV_HEADER_ONLY") s (user + system)"
done
