// [cuda] tests: the cache on a GPU, eagerly and captured in a CUDA graph.
// Built whenever LibTorch has CUDA; run where a device exists. [memcheck]
// marks the small eager ones (max_len <= 256) that benchmarks/gpu/run_gpu.sh
// also runs under compute-sanitizer memcheck with the caching allocator off
// (captures need the allocator's pools, so graph tests are not among them).

#include "support.hpp"

#include <ATen/cuda/CUDAGraph.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <iostream>

using namespace statickv;
using namespace statickv::test;

namespace {

// Every cache here: 2 layers, 2 kv heads of 64, on the first GPU.
ConfigBuilder gpu_config(int64_t max_batch, int64_t max_len, at::ScalarType dtype) {
  ConfigBuilder c;
  c.head_dim(64).device(at::Device(at::kCUDA, 0));
  return c.max_batch(max_batch).max_len(max_len).dtype(dtype);
}

at::TensorOptions on_gpu(at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(at::kCUDA, 0);
}

}  // namespace

TEST_CASE("on CUDA, decode through the cache equals recomputation", "[cuda][memcheck]") {
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
      StepPlan step =
          cache.prepare(at::arange(start, start + len, on_gpu(at::kLong)), b, start + len);
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
          "[cuda][graph][offload]") {
  const at::ScalarType dtype = at::kHalf;
  const int64_t b = 4, max_len = 32, prefill = 5;
  // Layer 0 a sliding ring of 8 + 8 - 1 slots that wraps during decode.
  // With host offload (Note [host offload]) the captured step holds the
  // side stream's copy-ins and their events; the eager twin stays plain.
  const bool offload = GENERATE(false, true);
  INFO("host_offload " << offload);
  CacheConfig config =
      gpu_config(/*max_batch=*/8, max_len, dtype).hybrid(/*window=*/8, /*chunk=*/8);
  HybridCache eager(config);
  config.host_offload = offload;
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
  auto decode = [&](Cache& cache) {
    StepPlan step = cache.prepare(pos, b);
    at::Tensor o;
    for (int64_t l = 0; l < 2; ++l) {
      KV kv = cache.update(l, k_in, v_in, step);
      o = sdpa_attention(q_in, kv.keys, kv.values, step.mask(l));
    }
    return o;
  };
  auto prefill_both = [&] {
    for (Cache* cache : {&eager, &graphed}) {
      cache->reset();
      StepPlan step = cache->prepare(at::arange(prefill, on_gpu(at::kLong)), b);
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
    // Every visible slot (layer 0's ring has 15, layer 1 has max_len).
    const int64_t slots = graphed.capacity(l);
    CHECK(at::equal(graphed.keys(l).narrow(2, 0, slots).cpu(),
                    eager.keys(l).narrow(2, 0, slots).cpu()));
  }
}

TEST_CASE("on CUDA, padded queries give finite outputs and leave live rows intact",
          "[cuda][memcheck]") {
  HybridCache cache(gpu_config(/*max_batch=*/2, /*max_len=*/16, at::kHalf));
  const at::Tensor kv = at::randn({2, 2, 4, 64}, on_gpu(at::kHalf));
  StepPlan step = cache.prepare(at::arange(4, on_gpu(at::kLong)), 2);
  cache.update(0, kv, kv, step);
  const at::Tensor before = cache.keys(0).narrow(2, 0, 16).clone();
  const at::Tensor pos = at::tensor(std::vector<int64_t>{4, -1, -1, -1}, i64()).view({2, 2}).cuda();
  step = cache.prepare(pos, 2);
  KV out = cache.update(0, at::full({2, 2, 2, 64}, 7.0, on_gpu(at::kHalf)),
                        at::full({2, 2, 2, 64}, 7.0, on_gpu(at::kHalf)), step);
  const at::Tensor o = sdpa_attention(at::randn({2, 4, 2, 64}, on_gpu(at::kHalf)), out.keys,
                                      out.values, step.mask(0));
  CHECK(at::isfinite(o).all().item<bool>());
  // The additive form gives the same live outputs and stays finite too.
  const at::Tensor query = at::randn({2, 4, 2, 64}, on_gpu(at::kHalf));
  const at::Tensor with_bool = sdpa_attention(query, out.keys, out.values, step.mask(0));
  const at::Tensor with_additive =
      sdpa_attention(query, out.keys, out.values, step.additive_mask(0));
  CHECK(at::isfinite(with_additive).all().item<bool>());
  // Row 0's first token (position 4) is the one live query.
  CHECK(at::allclose(with_additive[0].narrow(1, 0, 1).to(at::kFloat),
                     with_bool[0].narrow(1, 0, 1).to(at::kFloat), /*rtol=*/5e-3, /*atol=*/5e-3));
  CHECK(at::equal(cache.keys(0)[1].narrow(1, 0, 16), before[1]));
  CHECK(at::equal(cache.keys(0)[0].narrow(1, 0, 4), before[0].narrow(1, 0, 4)));
}

namespace {

// The runner's cache: a ring of window 16 beside a full layer, in half.
ConfigBuilder runner_gpu_config(int64_t max_batch, int64_t max_len) {
  // validate() caps max_chunk at max_len.
  return gpu_config(max_batch, max_len, at::kHalf).hybrid(16, std::min<int64_t>(64, max_len));
}

}  // namespace

TEST_CASE("GraphRunner captures the decode step once per batch bucket and serves every batch",
          "[cuda][graph][runner]") {
  const int64_t max_batch = 16, max_len = 128;
  HybridCache graphed(runner_gpu_config(max_batch, max_len));
  HybridCache eager(runner_gpu_config(max_batch, max_len));
  const AttentionStepShape shape{4, 2, 64};
  GraphRunner::Options options;
  options.device = at::Device(at::kCUDA, 0);
  options.batch_buckets = ShapeBuckets::powers_of_two(max_batch);
  options.query_buckets = ShapeBuckets::of({1});
  GraphRunner runner(attention_step_inputs(shape, at::kHalf), attention_step_fn(graphed), options);
  REQUIRE(runner.uses_graphs());
  const auto cache_addresses = addresses(graphed);
  at::manual_seed(4);
  for (int64_t live = 1; live <= max_batch; ++live) {
    for (int64_t t = 0; t < 3; ++t) {
      const at::Tensor pos = at::full({live, 1}, (live - 1) * 3 + t, on_gpu(at::kLong));
      const at::Tensor kv = at::randn({live, 1, 2, 64}, on_gpu(at::kHalf));
      const at::Tensor q = at::randn({live, 1, 4, 64}, on_gpu(at::kHalf));
      const at::Tensor got = runner.run({pos, kv, q})[0].clone();
      const at::Tensor want = attention_step(eager, pos, kv, q);
      INFO("live " << live << " max diff " << max_diff(got, want));
      REQUIRE(close(got, want, 2e-3));
    }
  }
  const RunnerStats stats = runner.stats();
  CHECK(stats.captures == options.batch_buckets.count());
  CHECK(stats.failed_captures == 0);
  CHECK(stats.replays == 3 * max_batch);
  CHECK(addresses(graphed) == cache_addresses);
  CHECK(at::equal(graphed.seq_lengths(), eager.seq_lengths()));
}

TEST_CASE("40 random prompt lengths need at most log2(max_len) + 1 prefill captures",
          "[cuda][graph][runner]") {
  const int64_t max_len = 64;
  HybridCache graphed(runner_gpu_config(/*max_batch=*/2, max_len + 8));
  HybridCache eager(runner_gpu_config(/*max_batch=*/2, max_len + 8));
  GraphRunner::Options options;
  options.device = at::Device(at::kCUDA, 0);
  options.batch_buckets = ShapeBuckets::of({2});
  options.query_buckets = ShapeBuckets::powers_of_two(max_len);
  GraphRunner runner(attention_step_inputs({4, 2, 64}, at::kHalf), attention_step_fn(graphed),
                     options);
  std::vector<const void*> first_inputs;
  at::manual_seed(5);
  for (int i = 0; i < 40; ++i) {
    const int64_t len = 1 + (i * 37) % max_len;
    graphed.reset();
    eager.reset();
    const at::Tensor pos = at::arange(len, on_gpu(at::kLong)).repeat({2, 1});
    const at::Tensor kv = at::randn({2, len, 2, 64}, on_gpu(at::kHalf));
    const at::Tensor q = at::randn({2, len, 4, 64}, on_gpu(at::kHalf));
    const at::Tensor got = runner.run({pos, kv, q})[0].clone();
    const at::Tensor want = attention_step(eager, pos, kv, q);
    INFO("length " << len << " max diff " << max_diff(got, want));
    REQUIRE(close(got, want, 2e-3));
    const GraphKey key = runner.key_for(2, len);
    if (key.query_len == max_len) {
      std::vector<const void*> now;
      for (const auto& t : runner.static_inputs(key)) now.push_back(t.data_ptr());
      if (first_inputs.empty()) first_inputs = now;
      CHECK(now == first_inputs);
    }
  }
  const RunnerStats stats = runner.stats();
  CHECK(stats.captures <= 7);  // ceil(log2(64)) + 1
  CHECK(stats.failed_captures == 0);
  CHECK(stats.replays == 40);
}

TEST_CASE("a host sync inside a captured step is reported and the runner stays usable",
          "[cuda][graph][runner]") {
  HybridCache cache(runner_gpu_config(/*max_batch=*/2, /*max_len=*/32));
  GraphRunner::Options options;
  options.device = at::Device(at::kCUDA, 0);
  options.batch_buckets = ShapeBuckets::of({2});
  options.query_buckets = ShapeBuckets::of({1});
  // A graph captured before the failing one, on a cache of its own.
  HybridCache other(runner_gpu_config(/*max_batch=*/2, /*max_len=*/32));
  GraphRunner earlier(attention_step_inputs({4, 2, 64}, at::kHalf), attention_step_fn(other),
                      options);
  const GraphRunner::StepFn syncing = [&](const std::vector<at::Tensor>& in, const GraphKey& key) {
    at::Tensor out = attention_step(cache, in[0], in[1], in[2], key.attend_len);
    if (out.abs().sum().item<float>() < 0) out = out.neg();  // .item(): a host sync
    return std::vector<at::Tensor>{out};
  };
  GraphRunner runner(attention_step_inputs({4, 2, 64}, at::kHalf), syncing, options);
  const at::Tensor pos = at::zeros({2, 1}, on_gpu(at::kLong));
  const at::Tensor kv = at::randn({2, 1, 2, 64}, on_gpu(at::kHalf));
  const at::Tensor q = at::randn({2, 1, 4, 64}, on_gpu(at::kHalf));
  (void)earlier.run({pos, kv, q});                     // captured
  const at::Tensor out = runner.run({pos, kv, q})[0];  // falls back to eager
  CHECK(at::isfinite(out).all().item<bool>());
  const RunnerStats stats = runner.stats();
  CHECK(stats.failed_captures == 1);
  CHECK(stats.eager_runs == 1);
  REQUIRE(stats.keys.size() == 1);
  INFO(stats.keys[0].capture_failure);
  CHECK(stats.keys[0].capture_failure.find("capture") != std::string::npos);
  // The device and the stream still work: a fresh eager step runs.
  CHECK(at::isfinite(runner.run({pos.add(1), kv, q})[0]).all().item<bool>());
  // So do the default generator (random ops outside a capture) and the graph
  // captured before the failure, whose replay advances that generator.
  CHECK_NOTHROW(at::randn({8}, on_gpu(at::kFloat)));
  CHECK(at::isfinite(earlier.run({pos.add(1), kv, q})[0]).all().item<bool>());
  CHECK(earlier.stats().replays == 2);
}

// ---- Cache::attend on CUDA (Note [attention paths], docs/design.md) ----

namespace {

// Positions for `b` rows whose lengths are `have`, each taking up to `chunk`
// tokens towards `target`, right-padded to the longest: a ragged chunked
// prefill step (or a decode step with chunk 1). Advances `have`.
at::Tensor ragged_step(std::vector<int64_t>& have, const std::vector<int64_t>& target,
                       int64_t chunk) {
  int64_t q = 1;
  for (size_t r = 0; r < have.size(); ++r) q = std::max(q, std::min(chunk, target[r] - have[r]));
  at::Tensor pos = at::full({static_cast<int64_t>(have.size()), q}, -1, i64());
  for (size_t r = 0; r < have.size(); ++r) {
    const int64_t take = std::max<int64_t>(0, std::min(chunk, target[r] - have[r]));
    for (int64_t t = 0; t < take; ++t) pos[static_cast<int64_t>(r)][t] = have[r] + t;
    have[r] += take;
  }
  return pos;
}

}  // namespace

TEST_CASE("captured run_in_place steps chain on the device and a capture keeps the buffers' rows",
          "[cuda][graph][runner]") {
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(4);
  options.query_buckets = ShapeBuckets::of({1});
  GraphRunner cpu(chained_step_inputs(), chained_step(), options);
  options.device = at::Device(at::kCUDA, 0);
  GraphRunner gpu(chained_step_inputs(), chained_step(), options);
  REQUIRE(gpu.uses_graphs());
  const at::Tensor ids = at::tensor({7, 9, 11}, i64()).unsqueeze(1);
  const at::Tensor pos = at::tensor({3, 4, 5}, i64()).unsqueeze(1);
  CHECK(at::equal(gpu.run({ids.cuda(), pos.cuda()})[0].cpu(), cpu.run({ids, pos})[0]));
  const void* buffer = gpu.input_buffers(1)[0].data_ptr();
  // Each batch's first step captures its key on padding, then finds the
  // rows the earlier steps wrote; the rest replay.
  for (int64_t b : {3, 1, 2, 3, 4, 3}) {
    INFO("batch " << b);
    const at::Tensor want = cpu.run_in_place(b, 1)[0];
    CHECK(at::equal(gpu.run_in_place(b, 1)[0].cpu(), want));
    CHECK(at::equal(gpu.input_buffers(1)[1].cpu(), cpu.input_buffers(1)[1]));
  }
  CHECK(gpu.input_buffers(1)[0].data_ptr() == buffer);
  const RunnerStats stats = gpu.stats();
  CHECK(stats.captures == 3);
  CHECK(stats.failed_captures == 0);
  CHECK(stats.replays == 7);
}

TEST_CASE("on CUDA, attend's varlen path equals the masked path in fp16 and bf16",
          "[cuda][attend][memcheck]") {
  for (at::ScalarType dtype : {at::kHalf, at::kBFloat16}) {
    at::manual_seed(7);
    const int64_t max_len = 256;
    HybridCache cache(gpu_config(/*max_batch=*/4, max_len, dtype).hybrid(/*window=*/32, 64));
    REQUIRE(cache.attention_path(1, at::zeros({1}, on_gpu(dtype))) == AttentionPath::kVarlen);
    REQUIRE(cache.attention_path(0, at::zeros({1}, on_gpu(dtype))) == AttentionPath::kMasked);
    // Live batch 3 of 4; ragged chunked prefill to lengths 1, 200, 77, then decode.
    std::vector<int64_t> have = {0, 0, 0};
    for (int step_i = 0; step_i < 12; ++step_i) {
      // Steps 0-3: chunks of up to 64 towards 1, 200 and 77 tokens; then decode.
      const bool prefill = step_i < 4;
      const std::vector<int64_t> target =
          prefill ? std::vector<int64_t>{1, 200, 77}
                  : std::vector<int64_t>{have[0] + 1, have[1] + 1, have[2] + 1};
      const at::Tensor pos = ragged_step(have, target, prefill ? 64 : 1).cuda();
      const int64_t b = pos.size(0), q = pos.size(1);
      StepPlan step = cache.prepare(pos, b);
      const at::Tensor real = pos.ge(0).view({b, 1, q, 1});
      for (int64_t l = 0; l < 2; ++l) {
        const at::Tensor kv = at::randn({b, 2, q, 64}, on_gpu(dtype));
        const at::Tensor query = at::randn({b, q, 4, 64}, on_gpu(dtype)).transpose(1, 2);
        const KV views = cache.update(l, kv, kv.mul(0.5), step);
        const at::Tensor got = cache.attend(l, query, views, step);
        const at::Tensor masked = cache.attend(l, query, views, step, AttentionPath::kMasked);
        INFO("dtype " << dtype << " step " << step_i << " layer " << l << " max diff "
                      << max_diff(got.mul(real), masked.mul(real)));
        REQUIRE(at::isfinite(got).all().item<bool>());
        REQUIRE(close(got.mul(real), masked.mul(real), tolerance(dtype)));
        if (l == 1) {  // the layout decision (detail::kDefaultKvLayout) against a copy
          const at::Tensor copied = statickv::detail::flash_varlen(
              cache.varlen_args(l, query, views, step, KvLayout::kPackedCopy));
          REQUIRE(close(got, copied, tolerance(dtype)));
        }
      }
    }
  }
}

namespace {

// One decode step over every layer through attend() with `path`; q_in etc.
// are the captured step's static inputs.
at::Tensor attend_decode(Cache& cache, const at::Tensor& pos, const at::Tensor& q_in,
                         const at::Tensor& kv_in, AttentionPath path) {
  StepPlan step = cache.prepare(pos, pos.size(0));
  at::Tensor out;
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    const KV views = cache.update(l, kv_in, kv_in, step);
    out = cache.attend(l, q_in, views, step, path);
  }
  return out;
}

}  // namespace

TEST_CASE("a captured varlen decode step replays 120 steps with per-row lengths changing",
          "[cuda][graph][attend]") {
  const int64_t b = 4, max_len = 160;
  const CacheConfig config = gpu_config(/*max_batch=*/4, max_len, at::kBFloat16);
  StaticCache graphed(config), eager(config);
  at::Tensor pos = at::full({b, 1}, -1, on_gpu(at::kLong));
  at::Tensor q_in = at::zeros({b, 4, 1, 64}, on_gpu(at::kBFloat16));
  at::Tensor kv_in = at::zeros({b, 2, 1, 64}, on_gpu(at::kBFloat16));
  at::cuda::CUDAGraph graph;
  at::Tensor out;
  {
    c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
    c10::cuda::CUDAStreamGuard guard(side);
    attend_decode(graphed, pos, q_in, kv_in, AttentionPath::kVarlen);  // warm-up: all padding
    graph.capture_begin();
    out = attend_decode(graphed, pos, q_in, kv_in, AttentionPath::kVarlen);
    graph.capture_end();
  }
  at::cuda::device_synchronize();
  // Rows join at different steps (padding until then), so their lengths
  // differ; row 2 restarts every 37 steps. (A row must hold every position
  // below its own: the masked path skips empty slots, the varlen path
  // attends to the first seqused_k slots whatever they hold.)
  const std::vector<int64_t> joins = {0, 5, 17, 40};
  std::vector<int64_t> len = {0, 0, 0, 0};
  at::manual_seed(8);
  for (int64_t t = 0; t < 120; ++t) {
    if (t % 37 == 36) {
      for (Cache* c : {static_cast<Cache*>(&graphed), static_cast<Cache*>(&eager)}) {
        c->reset_rows(at::tensor({int64_t{2}}, i64()));
      }
      len[2] = 0;
    }
    std::vector<int64_t> host(len.size());
    for (size_t r = 0; r < len.size(); ++r) {
      host[r] = t >= joins[r] && len[r] < max_len ? len[r]++ : -1;
    }
    pos.copy_(at::tensor(host, i64()).view({b, 1}));
    q_in.copy_(at::randn({b, 4, 1, 64}, on_gpu(at::kFloat)));
    kv_in.copy_(at::randn({b, 2, 1, 64}, on_gpu(at::kFloat)));
    graph.replay();
    const at::Tensor want = attend_decode(eager, pos.clone(), q_in, kv_in, AttentionPath::kVarlen);
    const at::Tensor masked =
        attend_decode(eager, pos.clone(), q_in, kv_in, AttentionPath::kMasked);
    at::cuda::device_synchronize();
    INFO("step " << t << " max diff " << max_diff(out, want));
    REQUIRE(close(out, want, 1e-3));
    // Full rows are padded: 0 on the varlen path, meaningless on the masked one.
    const at::Tensor real = pos.ge(0).view({b, 1, 1, 1});
    REQUIRE(close(out.mul(real), masked.mul(real), tolerance(at::kBFloat16)));
  }
}

TEST_CASE("on CUDA, the fused decode prepare plans what the CPU composition plans",
          "[cuda][decode_prepare][memcheck]") {
  // Note [decode prepare]: the CUDA kernel against the CPU cache's ATen
  // composition (eager masks keep it), over random decode steps with
  // padding, positions past max_len and shared positions.
  for (bool hybrid : {false, true}) {
    ConfigBuilder gpu = gpu_config(/*max_batch=*/5, /*max_len=*/24, at::kFloat);
    gpu.check_position_values(false);
    if (hybrid) gpu.hybrid(/*window=*/4, /*chunk=*/2);
    CacheConfig cpu_config = gpu;
    cpu_config.device = at::kCPU;
    cpu_config.eager_masks = true;
    HybridCache fused(gpu), composed(cpu_config);
    at::manual_seed(3);
    int64_t mismatches = 0;
    for (int64_t t = 0; t < 40; ++t) {
      const int64_t b = 1 + t % 5;
      at::Tensor pos = at::randint(-3, 30, {t % 7 == 0 ? 1 : b, 1}, at::TensorOptions(at::kLong));
      if (t % 7 == 0) pos = pos.view({1});
      const int64_t attend = t % 2 == 0 ? -1 : 24;
      const StepPlan a = fused.prepare(pos.to(at::kCUDA), b, attend);
      const StepPlan s = composed.prepare(pos, b, attend);
      mismatches += !at::equal(fused.seq_lengths().cpu(), composed.seq_lengths());
      for (int64_t l = 0; l < fused.num_layers(); ++l) {
        mismatches += !at::equal(fused.slot_positions(l).cpu(), composed.slot_positions(l));
        mismatches += !at::equal(a.write_slots(l).cpu(), s.write_slots(l));
        mismatches += !at::equal(a.mask(l).cpu(), s.mask(l));
        const at::Tensor kv = at::randn({b, 2, 1, 64});
        const KV va = fused.update(l, kv.to(at::kCUDA), kv.to(at::kCUDA), a);
        const KV vb = composed.update(l, kv, kv, s);
        mismatches += !at::equal(va.keys.cpu(), vb.keys);
      }
    }
    INFO((hybrid ? "hybrid" : "static") << " cache: " << mismatches << " mismatched tensors");
    CHECK(mismatches == 0);
  }
}
