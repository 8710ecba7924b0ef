// Main of the [cuda] test executable: exits 77, which ctest reports as
// skipped, on a machine without a CUDA device; runs Catch2 otherwise. Listing
// the tests (--list-tests) needs no device: ctest's cuda_rotary_built checks
// with it that the CUDA kernel's tests were built.
#define CATCH_CONFIG_RUNNER
#include <ATen/cuda/CUDAContext.h>
#include <catch2/catch.hpp>

#include <cstdio>
#include <cstring>

int main(int argc, char** argv) {
  bool listing = false;
  for (int i = 1; i < argc; ++i) listing = listing || std::strncmp(argv[i], "--list", 6) == 0;
  if (!listing && !at::cuda::is_available()) {
    std::puts("no CUDA device: [cuda] tests skipped");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
