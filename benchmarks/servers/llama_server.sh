#!/usr/bin/env bash
# llama.cpp's server for the three-server load benchmark (BENCHMARKS.md,
# "statickv-serve, transformers serve and llama-server under one load
# generator"), built once into the build tree from the llama.cpp sources
# that PyPI's llama-cpp-python sdist vendors (its tools/server; the Python
# package's own llama_cpp.server serves one request at a time), and an F32
# GGUF of a transformers checkpoint made by the converter in those sources
# with the gguf package beside it (PyPI's gguf 0.19.0 carries the same
# version number but lacks what this converter calls, LazyChunkedTensor).
#
# usage: benchmarks/servers/llama_server.sh BUILD_DIR CHECKPOINT_DIR [PYTHON]
#
# Writes BUILD_DIR/llama.cpp/bin/llama-server and
# BUILD_DIR/llama.cpp/<checkpoint name>-f32.gguf, and prints both paths on
# its last two lines. Reuses them when they exist. Needs cmake, a C++
# compiler and pip (PyPI); nothing else.
set -euo pipefail

build=${1:?usage: llama_server.sh BUILD_DIR CHECKPOINT_DIR [PYTHON]}
checkpoint=${2:?usage: llama_server.sh BUILD_DIR CHECKPOINT_DIR [PYTHON]}
python=${3:-python3}
version=0.3.36 # llama-cpp-python's sdist, which vendors llama.cpp
root=$(cd "$build" && pwd)/llama.cpp
mkdir -p "$root"
jobs=${STATICKV_LLAMA_JOBS:-$(nproc)}

sources=$root/llama_cpp_python-$version/vendor/llama.cpp
if [ ! -f "$sources/tools/server/CMakeLists.txt" ]; then
  "$python" -m pip download --quiet --no-deps --no-binary :all: \
    "llama-cpp-python==$version" -d "$root"
  tar -xzf "$root/llama_cpp_python-$version.tar.gz" -C "$root"
fi

server=$root/bin/llama-server
if [ ! -x "$server" ]; then
  cmake -S "$sources" -B "$root/build" -DCMAKE_BUILD_TYPE=Release -DLLAMA_CURL=OFF \
    -DLLAMA_OPENSSL=OFF -DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
    -DLLAMA_BUILD_TOOLS=ON -DLLAMA_BUILD_SERVER=ON -DBUILD_SHARED_LIBS=OFF >"$root/configure.log" 2>&1
  cmake --build "$root/build" --target llama-server -j "$jobs" >"$root/build.log" 2>&1
  mkdir -p "$root/bin"
  cp "$root/build/bin/llama-server" "$server"
fi

gguf=$root/$(basename "$checkpoint")-f32.gguf
if [ ! -f "$gguf" ]; then
  # The converter's own gguf-py, next to $python's numpy, torch and transformers.
  "$python" "$sources/convert_hf_to_gguf.py" "$checkpoint" --outtype f32 \
    --outfile "$gguf.partial" >"$root/convert.log" 2>&1
  mv "$gguf.partial" "$gguf"
fi
echo "$server"
echo "$gguf"
