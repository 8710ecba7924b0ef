// [cuda] Host offload on a GPU (Note [host offload]): pinned, mapped host
// buffers, copy-in on a side stream ordered with events, write-back through
// the mapped pointer. Eagerly over random sessions an offloaded cache
// equals the plain cache and no address changes; the captured decode step
// is tests/cuda/test_cuda.cpp's, run with and without offload.

#include "support.hpp"
#include "support/offload.hpp"

#include <ATen/cuda/CUDAContext.h>

using namespace statickv;
using namespace statickv::test;

namespace {

ConfigBuilder gpu_config(at::ScalarType dtype) {
  ConfigBuilder c;
  c.head_dim(64).device(at::Device(at::kCUDA, 0)).dtype(dtype);
  return c;
}

}  // namespace

TEST_CASE("on CUDA, an offloaded cache equals the plain cache over random sessions",
          "[cuda][offload][memcheck]") {
  // Short enough for compute-sanitizer's memcheck stage (40 steps took 44 s
  // under it on the H200): the mapped host memory is read and written by
  // kernels here. The bf16 test below runs longer sessions.
  random_session(gpu_config(at::kFloat).max_batch(4).max_len(32).max_chunk(5), 1, 10);
  random_session(gpu_config(at::kFloat).max_batch(4).max_len(32).hybrid(4, 3), 2, 10);
}

TEST_CASE("on CUDA, a bf16 offloaded cache equals the plain cache over longer random sessions",
          "[cuda][offload]") {
  random_session(gpu_config(at::kBFloat16).max_batch(4).max_len(64).max_chunk(5), 3, 60);
  random_session(gpu_config(at::kBFloat16).max_batch(4).max_len(64).hybrid(4, 3), 4, 60);
}

TEST_CASE("on CUDA, the host buffers are pinned and the views are device staging buffers",
          "[cuda][offload][memcheck]") {
  StaticCache cache(gpu_config(at::kHalf).max_batch(2).max_len(16).host_offload(true));
  REQUIRE(cache.keys(0).device().is_cpu());
  REQUIRE(cache.keys(0).is_pinned());
  const StepPlan step = cache.prepare(at::arange(3, i64().device(at::kCUDA)), 2);
  const at::Tensor kv =
      at::randn({2, kKvHeads, 3, 64}, at::TensorOptions().dtype(at::kHalf).device(at::kCUDA));
  const KV views = cache.update(0, kv, kv, step);
  REQUIRE(views.keys.is_cuda());
  at::cuda::device_synchronize();
  REQUIRE(at::equal(cache.keys(0).narrow(2, 0, 3), kv.cpu()));
  REQUIRE(cache.device_memory_bytes() == estimate_memory(cache.config()).device);
}
