#!/usr/bin/env bash
# Formats every C++ and CUDA file in place with the repository's .clang-format.
set -euo pipefail
cd "$(dirname "$0")/.."
fmt=$(command -v clang-format-14 || command -v clang-format)
git ls-files --cached --others --exclude-standard -- '*.hpp' '*.cpp' '*.cu' '*.cuh' | xargs -r "$fmt" -i --style=file
