// [cuda] Host offload on a GPU (Note [host offload]): pinned, mapped host
// buffers, copy-in on a side stream ordered with events, write-back through
// the mapped pointer. Eagerly over random sessions and captured in a CUDA
// graph, an offloaded cache equals the plain cache, and no address changes.

#include "support.hpp"
#include "support/offload.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

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
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    INFO("dtype " << dtype);
    random_session(gpu_config(dtype).max_batch(4).max_len(32).max_chunk(5), 1, 40);
    random_session(gpu_config(dtype).max_batch(4).max_len(32).hybrid(4, 3), 2, 40);
  }
}

TEST_CASE("on CUDA, the host buffers are pinned and the views are device staging buffers",
          "[cuda][offload][memcheck]") {
  StaticCache cache(gpu_config(at::kHalf).max_batch(2).max_len(16).host_offload(true));
  REQUIRE(cache.keys(0).device().is_cpu());
  REQUIRE(cache.keys(0).is_pinned());
  const StepPlan step = cache.prepare(at::arange(3, i64().device(at::kCUDA)), 2);
  const at::Tensor kv = at::randn({2, kKvHeads, 3, 64}, at::TensorOptions().dtype(at::kHalf).device(at::kCUDA));
  const KV views = cache.update(0, kv, kv, step);
  REQUIRE(views.keys.is_cuda());
  at::cuda::device_synchronize();
  REQUIRE(at::equal(cache.keys(0).narrow(2, 0, 3), kv.cpu()));
  REQUIRE(cache.device_memory_bytes() == estimate_memory(cache.config()).device);
}

TEST_CASE("an offloaded decode step captured once in a CUDA graph replays for every position",
          "[cuda][offload][graph]") {
  const at::ScalarType dtype = at::kHalf;
  const int64_t b = 3, max_len = 40, prefill = 5, layers = 3;
  const CacheConfig config = gpu_config(dtype).num_layers(layers).max_batch(4).max_len(max_len);
  StaticCache eager(config);
  StaticCache graphed(offloaded(config));
  const auto opts = at::TensorOptions().dtype(dtype).device(at::kCUDA);
  at::manual_seed(5);
  const at::Tensor q = at::randn({b, kHeads, max_len, 64}, opts);
  const at::Tensor k = at::randn({b, kKvHeads, max_len, 64}, opts);
  const at::Tensor v = at::randn({b, kKvHeads, max_len, 64}, opts);
  at::Tensor pos = at::zeros({1}, opts.dtype(at::kLong));
  at::Tensor q_in = at::zeros({b, kHeads, 1, 64}, opts);
  at::Tensor k_in = at::zeros({b, kKvHeads, 1, 64}, opts);
  at::Tensor v_in = at::zeros({b, kKvHeads, 1, 64}, opts);
  const auto decode = [&](Cache& cache) {
    StepPlan step = cache.prepare(pos, b, max_len);
    at::Tensor o;
    for (int64_t l = 0; l < layers; ++l) {
      const KV kv = cache.update(l, k_in, v_in.mul(l + 1), step);
      o = cache.attend(l, q_in, kv, step);
    }
    return o;
  };
  const auto before = addresses(graphed);
  at::cuda::CUDAGraph graph;
  at::Tensor out;
  {
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    c10::cuda::CUDAStreamGuard guard(side);
    decode(graphed);  // warm-up: creates the copier's events
    graph.capture_begin();
    out = decode(graphed);
    graph.capture_end();
  }
  at::cuda::device_synchronize();
  for (Cache* cache : {static_cast<Cache*>(&eager), static_cast<Cache*>(&graphed)}) {
    cache->reset();
    StepPlan step = cache->prepare(at::arange(prefill, opts.dtype(at::kLong)), b);
    for (int64_t l = 0; l < layers; ++l) {
      cache->update(l, k.narrow(2, 0, prefill), v.narrow(2, 0, prefill).mul(l + 1), step);
    }
  }
  for (int64_t t = prefill; t < max_len; ++t) {
    pos.fill_(t);
    q_in.copy_(q.narrow(2, t, 1));
    k_in.copy_(k.narrow(2, t, 1));
    v_in.copy_(v.narrow(2, t, 1));
    graph.replay();
    const at::Tensor want = decode(eager);
    at::cuda::device_synchronize();
    INFO("position " << t << " max diff " << max_diff(out, want));
    REQUIRE(bit_identical(out, want));
  }
  CHECK(addresses(graphed) == before);
  CHECK(on_cpu(graphed) == on_cpu(eager));
}
