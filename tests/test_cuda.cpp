// [cuda] tests: the cache on a GPU, eagerly and captured in a CUDA graph.
// Built whenever LibTorch has CUDA; run where a device exists.

#include "support.hpp"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>

using namespace statickv;
using namespace statickv::test;

namespace {

CacheConfig gpu_config(int64_t max_batch, int64_t max_len, at::ScalarType dtype) {
  CacheConfig c;
  c.num_layers = 2;
  c.num_kv_heads = 2;
  c.head_dim = 64;
  c.max_batch = max_batch;
  c.max_len = max_len;
  c.dtype = dtype;
  c.device = at::Device(at::kCUDA, 0);
  return c;
}

at::TensorOptions on_gpu(at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(at::kCUDA, 0);
}

}  // namespace

TEST_CASE("on CUDA, decode through the cache equals recomputation", "[cuda]") {
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    at::manual_seed(1);
    const int64_t b = 3, total = 40, prefill = 9;
    const at::Tensor q = at::randn({b, 4, total, 64}, on_gpu(at::kFloat)).to(dtype);
    const at::Tensor k = at::randn({b, 2, total, 64}, on_gpu(at::kFloat)).to(dtype);
    const at::Tensor v = at::randn({b, 2, total, 64}, on_gpu(at::kFloat)).to(dtype);
    const at::Tensor expected =
        recompute(q.cpu().to(at::kFloat), k.cpu().to(at::kFloat), v.cpu().to(at::kFloat));
    HybridCache cache(gpu_config(/*max_batch=*/8, /*max_len=*/64, dtype));
    std::vector<at::Tensor> outs;
    for (int64_t start = 0; start < total;) {
      const int64_t len = start == 0 ? prefill : 1;
      Step step = cache.prepare(at::arange(start, start + len, on_gpu(at::kLong)), b, start + len);
      KV kv = cache.update(0, k.narrow(2, start, len), v.narrow(2, start, len), step);
      outs.push_back(sdpa_attention(q.narrow(2, start, len), kv.keys, kv.values, step.mask(0)));
      start += len;
    }
    const at::Tensor got = at::cat(outs, 2).cpu();
    INFO("dtype " << dtype << " max diff " << max_diff(got, expected));
    CHECK(close(got, expected, tolerance(dtype)));
  }
}

TEST_CASE("a decode step captured once in a CUDA graph replays for every position",
          "[cuda][graph]") {
  const at::ScalarType dtype = at::kHalf;
  const int64_t b = 4, max_len = 32, prefill = 5;
  // Layer 0 a sliding ring of 8 + 8 - 1 slots that wraps during decode.
  CacheConfig config = gpu_config(/*max_batch=*/8, max_len, dtype);
  config.layer_types = {LayerType::kSliding, LayerType::kFull};
  config.sliding_window = 8;
  config.max_chunk = 8;
  HybridCache eager(config);
  HybridCache graphed(config);
  at::manual_seed(2);
  const at::Tensor q = at::randn({b, 4, max_len, 64}, on_gpu(dtype));
  const at::Tensor k = at::randn({b, 2, max_len, 64}, on_gpu(dtype));
  const at::Tensor v = at::randn({b, 2, max_len, 64}, on_gpu(dtype));

  // Static inputs and the step being captured.
  at::Tensor pos = at::zeros({1}, on_gpu(at::kLong));
  at::Tensor q_in = at::zeros({b, 4, 1, 64}, on_gpu(dtype));
  at::Tensor k_in = at::zeros({b, 2, 1, 64}, on_gpu(dtype));
  at::Tensor v_in = at::zeros({b, 2, 1, 64}, on_gpu(dtype));
  at::Tensor out;
  auto decode = [&](CacheBase& cache) {
    Step step = cache.prepare(pos, b);
    at::Tensor o;
    for (int64_t l = 0; l < 2; ++l) {
      KV kv = cache.update(l, k_in, v_in, step);
      o = sdpa_attention(q_in, kv.keys, kv.values, step.mask(l));
    }
    return o;
  };
  auto prefill_both = [&] {
    for (CacheBase* cache : {&eager, &graphed}) {
      cache->reset();
      Step step = cache->prepare(at::arange(prefill, on_gpu(at::kLong)), b);
      for (int64_t l = 0; l < 2; ++l) {
        cache->update(l, k.narrow(2, 0, prefill), v.narrow(2, 0, prefill), step);
      }
    }
  };

  const auto before = addresses(graphed);
  at::cuda::CUDAGraph graph;
  {
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    c10::cuda::CUDAStreamGuard guard(side);
    decode(graphed);  // warm-up on the capture stream
    graph.capture_begin();
    out = decode(graphed);
    graph.capture_end();
  }
  at::cuda::device_synchronize();
  prefill_both();

  for (int64_t t = prefill; t < max_len; ++t) {
    pos.fill_(t);
    q_in.copy_(q.narrow(2, t, 1));
    k_in.copy_(k.narrow(2, t, 1));
    v_in.copy_(v.narrow(2, t, 1));
    graph.replay();
    // The eager twin also checks the graph against the sliding mask rule.
    const at::Tensor want = decode(eager);
    at::cuda::device_synchronize();
    INFO("position " << t << " max diff " << max_diff(out, want));
    REQUIRE(close(out, want, 1e-3));
  }
  CHECK(addresses(graphed) == before);
  CHECK(at::equal(graphed.seq_lengths(), eager.seq_lengths()));
  for (int64_t l = 0; l < 2; ++l) {
    CHECK(at::equal(graphed.keys(l).narrow(2, 0, max_len), eager.keys(l).narrow(2, 0, max_len)));
  }
}

TEST_CASE("on CUDA, padded queries give finite outputs and leave live rows intact", "[cuda]") {
  HybridCache cache(gpu_config(/*max_batch=*/2, /*max_len=*/16, at::kHalf));
  const at::Tensor kv = at::randn({2, 2, 4, 64}, on_gpu(at::kHalf));
  Step step = cache.prepare(at::arange(4, on_gpu(at::kLong)), 2);
  cache.update(0, kv, kv, step);
  const at::Tensor before = cache.keys(0).narrow(2, 0, 16).clone();
  const at::Tensor pos = at::tensor(std::vector<int64_t>{4, -1, -1, -1}, i64()).view({2, 2}).cuda();
  step = cache.prepare(pos, 2);
  KV out = cache.update(0, at::full({2, 2, 2, 64}, 7.0, on_gpu(at::kHalf)),
                        at::full({2, 2, 2, 64}, 7.0, on_gpu(at::kHalf)), step);
  const at::Tensor o = sdpa_attention(at::randn({2, 4, 2, 64}, on_gpu(at::kHalf)), out.keys,
                                      out.values, step.mask(0));
  CHECK(at::isfinite(o).all().item<bool>());
  CHECK(at::equal(cache.keys(0)[1].narrow(1, 0, 16), before[1]));
  CHECK(at::equal(cache.keys(0)[0].narrow(1, 0, 4), before[0].narrow(1, 0, 4)));
}
