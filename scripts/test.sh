#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (ctest).
#   bash scripts/test.sh [extra ctest arguments]
source "$(dirname "$0")/setup.sh"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" "$@"
