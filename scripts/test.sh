#!/usr/bin/env bash
# The test command: installs what is missing, builds, runs every test (ctest),
# then the same tests under ASan + UBSan, then a short fuzz run.
#   bash scripts/test.sh [extra ctest arguments]
# Environment:
#   STATICKV_SANITIZERS=0     skip the sanitizer build and run (build-asan/)
#   STATICKV_FUZZ_SECONDS=N   fuzz for N seconds (default 60; 0 skips; build-fuzz/)
# libFuzzer needs clang and its runtime; setup.sh installs them with the rest.
if [ "${STATICKV_FUZZ_SECONDS:-60}" != 0 ]; then
  export STATICKV_EXTRA_PACKAGES="clang libclang-rt-dev"
fi
source "$(dirname "$0")/setup.sh"
cd "$BUILD_DIR"
ctest --output-on-failure -j "$(nproc)" "$@"
cd "$STATICKV_ROOT"

# Sanitizers: the test executables and the fuzz corpus replay, built with
# -fsanitize=address,undefined (our code only: LibTorch is the prebuilt
# wheel). -O0 -g1 halves the compile time of -O1 -g; the tests' run time is
# LibTorch's either way. No ASAN_OPTIONS or suppressions are needed: the run
# is clean as is, leak check included.
if [ "${STATICKV_SANITIZERS:-1}" != 0 ]; then
  ASAN_DIR="$STATICKV_ROOT/build-asan"
  if [ ! -f "$ASAN_DIR/CMakeCache.txt" ]; then
    echo "== configuring $ASAN_DIR (ASan + UBSan)"
    mkdir -p "$ASAN_DIR"
    cmake -S . -B "$ASAN_DIR" "${cmake_args[@]}" -DCMAKE_BUILD_TYPE=Debug \
      "-DCMAKE_CXX_FLAGS_DEBUG=-O0 -g1" -DSTATICKV_SANITIZE=address,undefined \
      -DSTATICKV_BUILD_FUZZERS=ON -DSTATICKV_WITH_CUDA=OFF -DSTATICKV_BUILD_REFERENCE=OFF \
      -DSTATICKV_BUILD_BENCHMARKS=OFF -DSTATICKV_BUILD_EXAMPLES=OFF -DSTATICKV_INSTALL=OFF \
      >"$ASAN_DIR/configure.log" 2>&1 ||
      { tail -40 "$ASAN_DIR/configure.log"; rm -f "$ASAN_DIR/CMakeCache.txt"; exit 1; }
  fi
  echo "== building and running the tests under ASan + UBSan ($ASAN_DIR)"
  cmake --build "$ASAN_DIR" -j "$(nproc)"
  ctest --test-dir "$ASAN_DIR" --output-on-failure -j "$(nproc)"
fi

# Fuzzing: libFuzzer needs clang and its runtime (Debian: clang,
# libclang-rt-dev), installed like setup.sh's packages.
FUZZ_SECONDS=${STATICKV_FUZZ_SECONDS:-60}
if [ "$FUZZ_SECONDS" != 0 ]; then
  FUZZ_DIR="$STATICKV_ROOT/build-fuzz"
  if [ ! -f "$FUZZ_DIR/CMakeCache.txt" ]; then
    echo "== configuring $FUZZ_DIR (clang, libFuzzer)"
    mkdir -p "$FUZZ_DIR"
    cmake -S . -B "$FUZZ_DIR" "${cmake_args[@]}" -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DCMAKE_CXX_COMPILER=clang++ -DSTATICKV_BUILD_FUZZERS=ON -DSTATICKV_WITH_CUDA=OFF \
      -DSTATICKV_BUILD_REFERENCE=OFF -DSTATICKV_BUILD_BENCHMARKS=OFF \
      -DSTATICKV_BUILD_EXAMPLES=OFF -DSTATICKV_INSTALL=OFF >"$FUZZ_DIR/configure.log" 2>&1 ||
      { tail -40 "$FUZZ_DIR/configure.log"; rm -f "$FUZZ_DIR/CMakeCache.txt"; exit 1; }
  fi
  echo "== fuzzing for ${FUZZ_SECONDS}s (tests/fuzz; corpus tests/fuzz/corpus)"
  cmake --build "$FUZZ_DIR" -j "$(nproc)" --target statickv_fuzz
  # New inputs go to build-fuzz/fuzz-corpus; a failing input is saved as
  # build-fuzz/crash-<sha1> (replay it: build-fuzz/tests/fuzz/statickv_fuzz <file>).
  mkdir -p "$FUZZ_DIR/fuzz-corpus"
  "$FUZZ_DIR/tests/fuzz/statickv_fuzz" -max_total_time="$FUZZ_SECONDS" -timeout=10 -seed=1 \
    -print_final_stats=1 -artifact_prefix="$FUZZ_DIR/" \
    "$FUZZ_DIR/fuzz-corpus" tests/fuzz/corpus 2>"$FUZZ_DIR/fuzz.log" ||
    { tail -60 "$FUZZ_DIR/fuzz.log"; exit 1; }
  grep -E '^(Done|stat::number_of_executed_units|stat::peak_rss_mb)' "$FUZZ_DIR/fuzz.log"
fi
