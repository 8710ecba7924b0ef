// Note [CPU kernels' threads]: the library's compiled CPU kernels split their
// loops over every intra-op thread LibTorch has, not the calling thread alone.

#include "support.hpp"

#include <statickv/parallel.hpp>

#include <ATen/Parallel.h>

using namespace statickv;

TEST_CASE("statickv's compiled kernels reach each of LibTorch's intra-op threads", "[parallel]") {
  const int before = at::get_num_threads();
  for (int threads : {1, 2, 3}) {
    at::set_num_threads(threads);
    const int64_t reached = kernel_threads();
    at::set_num_threads(before);
    INFO("intra-op threads " << threads);
    CHECK(reached == threads);
  }
}
