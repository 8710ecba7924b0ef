// Main of the [cuda] test executable: exits 77, which ctest reports as
// skipped, on a machine without a CUDA device; runs Catch2 otherwise.
#define CATCH_CONFIG_RUNNER
#include <ATen/cuda/CUDAContext.h>
#include <catch2/catch.hpp>

#include <cstdio>

int main(int argc, char** argv) {
  if (!at::cuda::is_available()) {
    std::puts("no CUDA device: [cuda] tests skipped");
    return 77;
  }
  return Catch::Session().run(argc, argv);
}
