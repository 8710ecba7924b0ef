#!/usr/bin/env bash
# On the GPU machine: configures statickv against that machine's LibTorch (the
# PyTorch wheel its python3 imports) and the Debian packages that
# benchmarks/gpu/prep.sh unpacked into .devdeps/, then builds into build-gpu/
# with every core (only BUILD_TARGETS when set, continuing past a failing
# target). Extra arguments go to the configure step.
#
#   bash benchmarks/gpu/build.sh [-DSTATICKV_BUILD_EXAMPLES=OFF ...]
#
# A failed configure prints the tail of build-gpu/configure.log and copies
# the whole log into $OUT when OUT is set. PY overrides the Python used to
# find torch (default python3).
set -uo pipefail
cd "$(dirname "$0")/../.." || exit 1
root=$PWD
py=${PY:-python3}
[ -d .devdeps/usr ] || {
  echo "build.sh: no .devdeps/usr: run benchmarks/gpu/prep.sh on the CPU machine and send .devdeps/ along" >&2
  exit 1
}
torch_prefix=$("$py" -c 'import torch; print(torch.utils.cmake_prefix_path)') || {
  echo "build.sh: $py cannot import torch" >&2
  exit 1
}
echo "torch $("$py" -c 'import torch; print(torch.__version__, torch.version.cuda)');" \
  "nvcc: $(nvcc --version 2>/dev/null | tail -1)"
nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv,noheader 2>/dev/null || true
export LD_LIBRARY_PATH="$root/.devdeps/usr/lib/x86_64-linux-gnu:${LD_LIBRARY_PATH:-}"
gen=()
command -v ninja >/dev/null && gen=(-G Ninja)
mkdir -p build-gpu
if ! cmake -S . -B build-gpu "${gen[@]}" -DCMAKE_BUILD_TYPE=Release \
     "-DCMAKE_PREFIX_PATH=$torch_prefix;$root/.devdeps/usr" \
     -DCMAKE_CUDA_ARCHITECTURES=90 -DSTATICKV_REQUIRE_CUDA=ON "$@" > build-gpu/configure.log 2>&1; then
  tail -n 60 build-gpu/configure.log
  [ -n "${OUT:-}" ] && cp build-gpu/configure.log "$OUT/"
  exit 1
fi
# BUILD_TARGETS (space-separated): build only those (run_gpu.sh names what
# its stages run); ninja keeps going past a failing target (-k 0), so one
# broken target leaves the others built.
targets=()
# The list is read once into a variable: `ninja ... | grep -q` under
# pipefail fails whenever grep stops reading before ninja finishes writing.
defined=""
[ ${#gen[@]} -gt 0 ] && defined=$(ninja -C build-gpu -t targets all 2>/dev/null | cut -d: -f1)
for t in ${BUILD_TARGETS:-}; do
  # Only targets this configuration defines (an unknown one stops ninja).
  if [ ${#gen[@]} -eq 0 ] || grep -qx -- "$t" <<<"$defined"; then
    targets+=(--target "$t")
  else
    echo "build.sh: no target $t in this configuration; skipped"
  fi
done
keep=()
[ ${#gen[@]} -gt 0 ] && keep=(-- -k 0)
cmake --build build-gpu -j "$(nproc)" "${targets[@]}" "${keep[@]}" 2>&1 | tail -n 40
exit "${PIPESTATUS[0]}"
