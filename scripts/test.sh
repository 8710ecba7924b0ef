#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (ctest),
# then the same tests under ASan + UBSan, then a short fuzz run.
#   bash scripts/test.sh [extra ctest arguments]
# Environment:
#   STATICKV_SANITIZERS=0     skip the sanitizer build and run (build-asan/)
#   STATICKV_FUZZ_SECONDS=N   fuzz for N seconds (default 60; 0 skips; build-fuzz/)
#   STATICKV_CLIENTS=0        no lm-eval, aiperf, guidellm venvs in build/ (no ctests for them)
#   STATICKV_TORCH=V          a version run against torch V (2.11 to 2.15), in its own
#                             .venv-torchV/ and build-torchV/ (the default's for 2.11.0):
#                             the build, ctest without the real checkpoints (label
#                             real_model) and the consumer test; no sanitizers or
#                             fuzzing unless the two above ask
# libFuzzer needs clang and its runtime; setup.sh installs them with the rest.
ctest_select=()
if [ -n "${STATICKV_TORCH:-}" ]; then
  export STATICKV_SANITIZERS=${STATICKV_SANITIZERS:-0} STATICKV_FUZZ_SECONDS=${STATICKV_FUZZ_SECONDS:-0}
  ctest_select=(-LE real_model)
fi
if [ "${STATICKV_FUZZ_SECONDS:-60}" != 0 ]; then
  export STATICKV_EXTRA_PACKAGES="clang libclang-rt-dev"
fi
source "$(dirname "$0")/setup.sh"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" "${ctest_select[@]}" "$@"
cd "$STATICKV_ROOT"
t_ctest=$SECONDS

# Sanitizers: the test executables and the fuzz corpus replay, built with
# -fsanitize=address,undefined (our code only: LibTorch is the prebuilt
# wheel; header-only, so Cache's bodies are compiled, and checked, in each
# test). -O0 -g1 halves the compile time of -O1 -g; the tests' run time is
# LibTorch's either way. No ASAN_OPTIONS or suppressions are needed: the run
# is clean as is, leak check included.
if [ "${STATICKV_SANITIZERS:-1}" != 0 ]; then
  ASAN_DIR="$STATICKV_ROOT/build-asan$TREE_SUFFIX"
  if [ ! -f "$ASAN_DIR/CMakeCache.txt" ]; then
    echo "== configuring $ASAN_DIR (ASan + UBSan)"
    mkdir -p "$ASAN_DIR"
    cmake -S . -B "$ASAN_DIR" "${cmake_args[@]}" -DCMAKE_BUILD_TYPE=Debug \
      "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g1" -DSTATICKV_SANITIZE=address,undefined \
      -DSTATICKV_HEADER_ONLY=ON \
      -DSTATICKV_BUILD_FUZZERS=ON -DSTATICKV_WITH_CUDA=OFF -DSTATICKV_REQUIRE_CUDA=OFF \
      -DSTATICKV_BUILD_REFERENCE=OFF -DSTATICKV_BUILD_BENCHMARKS=OFF -DSTATICKV_BUILD_EXAMPLES=OFF \
      -DSTATICKV_BUILD_AOTI=OFF -DSTATICKV_INSTALL=OFF \
      >"$ASAN_DIR/configure.log" 2>&1 ||
      { tail -40 "$ASAN_DIR/configure.log"; rm -f "$ASAN_DIR/CMakeCache.txt"; exit 1; }
  fi
  echo "== building and running the tests under ASan + UBSan ($ASAN_DIR)"
  cmake --build "$ASAN_DIR" -j "$(nproc)"
  ctest --test-dir "$ASAN_DIR" --output-on-failure -j "$(nproc)"
fi

# Fuzzing: libFuzzer needs clang and its runtime (Debian: clang,
# libclang-rt-dev), installed like setup.sh's packages.
t_asan=$SECONDS

FUZZ_SECONDS=${STATICKV_FUZZ_SECONDS:-60}
if [ "$FUZZ_SECONDS" != 0 ]; then
  FUZZ_DIR="$STATICKV_ROOT/build-fuzz$TREE_SUFFIX"
  if [ ! -f "$FUZZ_DIR/CMakeCache.txt" ]; then
    echo "== configuring $FUZZ_DIR (clang, libFuzzer)"
    mkdir -p "$FUZZ_DIR"
    cmake -S . -B "$FUZZ_DIR" "${cmake_args[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DSTATICKV_BUILD_FUZZERS=ON -DSTATICKV_WITH_CUDA=OFF \
      -DSTATICKV_REQUIRE_CUDA=OFF \
      -DSTATICKV_BUILD_REFERENCE=OFF -DSTATICKV_BUILD_BENCHMARKS=OFF \
      -DSTATICKV_BUILD_EXAMPLES=OFF -DSTATICKV_BUILD_AOTI=OFF -DSTATICKV_INSTALL=OFF >"$FUZZ_DIR/configure.log" 2>&1 ||
      { tail -40 "$FUZZ_DIR/configure.log"; rm -f "$FUZZ_DIR/CMakeCache.txt"; exit 1; }
  fi
  # One libFuzzer target per file of tests/fuzz, each from its own corpus
  # (tests/fuzz/corpus/<target>), for its share of the time: the cache
  # sessions, whose state space is by far the largest, get 6/8, config and
  # buckets 1/8 each (at least a second: -max_total_time=0 means no limit).
  config_seconds=$((FUZZ_SECONDS / 8 > 0 ? FUZZ_SECONDS / 8 : 1))
  cache_seconds=$((FUZZ_SECONDS - 2 * config_seconds > 0 ? FUZZ_SECONDS - 2 * config_seconds : 1))
  echo "== fuzzing for ${FUZZ_SECONDS}s (tests/fuzz; corpora tests/fuzz/corpus/*)"
  cmake --build "$FUZZ_DIR" -j "$(nproc)" \
    --target statickv_fuzz_cache statickv_fuzz_config statickv_fuzz_buckets
  for target in cache:$cache_seconds config:$config_seconds buckets:$config_seconds; do
    name=${target%%:*}
    seconds=${target#*:}
    # New inputs go to build-fuzz/fuzz-corpus/<target>; a failing input is
    # saved as build-fuzz/<target>-crash-<sha1> (replay it:
    # build-fuzz/tests/fuzz/statickv_fuzz_<target> <file>).
    mkdir -p "$FUZZ_DIR/fuzz-corpus/$name"
    echo "-- statickv_fuzz_$name for ${seconds}s"
    "$FUZZ_DIR/tests/fuzz/statickv_fuzz_$name" -max_total_time="$seconds" -timeout=10 -seed=1 \
      -print_final_stats=1 -artifact_prefix="$FUZZ_DIR/$name-" \
      "$FUZZ_DIR/fuzz-corpus/$name" "tests/fuzz/corpus/$name" 2>"$FUZZ_DIR/fuzz-$name.log" ||
      { tail -60 "$FUZZ_DIR/fuzz-$name.log"; exit 1; }
    grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$FUZZ_DIR/fuzz-$name.log"
  done
fi
# Where the time went (CI keeps the whole run under 45 minutes on 2 cores).
echo "== seconds: installs $STATICKV_T_INSTALLED, configure and build" \
  "$((STATICKV_T_BUILT - STATICKV_T_INSTALLED)), ctest $((t_ctest - STATICKV_T_BUILT))," \
  "sanitizers $((t_asan - t_ctest)), fuzzing $((SECONDS - t_asan)); total $SECONDS"
