// Note [CPU kernels' threads]: the library's compiled CPU kernels split their
// loops over every intra-op thread LibTorch has, not the calling thread alone.

#include "support.hpp"

#include <statickv/parallel.hpp>

#include <ATen/Parallel.h>

using namespace statickv;

// cmake/statickvOpenMP.cmake compiles the libraries with OpenMP under GCC,
// whose libgomp is LibTorch's runtime; another compiler's would be a second
// runtime, so there the kernels keep to the calling thread.
#if defined(__GNUC__) && !defined(__clang__)
constexpr bool kParallelBuild = true;
#else
constexpr bool kParallelBuild = false;
#endif

TEST_CASE("statickv's compiled kernels reach each of LibTorch's intra-op threads", "[parallel]") {
  const int before = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    const int64_t reached = kernel_threads();
    at::set_num_threads(before);
    INFO("intra-op threads " << threads << ", a GCC build " << kParallelBuild);
    CHECK(reached == (kParallelBuild ? threads : 1));
  }
}
