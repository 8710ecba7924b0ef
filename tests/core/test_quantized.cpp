// Quantized KV storage (Note [quantized storage], Note [staging buffer],
// docs/design.md): int8 and float8 e4m3 caches with one scale per token and
// kv head. The specification: a quantized cache holds exactly what a plain
// cache fed the round-tripped keys and values holds (so every routing rule
// of the plain cache carries over); its attention output is within the
// issue's bound of the same cache in the compute dtype; its bytes are what
// estimate_memory_bytes says, the staging buffer on its own; row operations
// move codes and scales together; a staged view another update() has
// overwritten is refused.

#include "support.hpp"

#include <statickv/detail/quantize.hpp>

#include <cmath>
#include <cstdio>
#include <limits>
#include <memory>

namespace {

using namespace statickv;
using namespace statickv::test;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

CacheConfig with_storage(CacheConfig config, KvStorage storage) {
  config.kv_storage = storage;
  return config;
}

/// What a quantized cache stores for x, back in float32: codes * scale.
at::Tensor round_trip(const at::Tensor& x, KvStorage storage) {
  const auto [codes, scale] = statickv::detail::quantize(x, storage);
  const at::Tensor c = storage == KvStorage::kFp8E4m3 ? codes.view(at::kFloat8_e4m3fn) : codes;
  return c.to(at::kFloat).mul(scale).to(x.scalar_type());
}

double relative_rms(const at::Tensor& got, const at::Tensor& want) {
  const at::Tensor g = got.to(at::kDouble);
  const at::Tensor w = want.to(at::kDouble);
  return (g - w).pow(2).mean().sqrt().item<double>() / w.pow(2).mean().sqrt().item<double>();
}

/// A session of ragged, padded, chunked steps with row operations between
/// them, on every layer of both caches: `step_fn(cache, pos, b)` runs a step.
template <typename StepFn>
void ragged_session(StepFn&& step_fn) {
  step_fn(positions(3, {0, 1, 2, 3, 4, 5, 0, 1, -1, -1, -1, -1, 0, 1, 2, 3, 4, -1}), 3);
  step_fn(positions(3, {6, 7, 2, 3, 5, 6}), 3);
  step_fn(positions(2, {8, -1}), 2);
  step_fn(positions({4, 5, 6, 7, 8, 9}), 3);  // shared positions, past the ring's capacity
}

}  // namespace

TEST_CASE("a quantized cache holds exactly what a plain cache fed the round-tripped values holds",
          "[quantized]") {
  const KvStorage storage = GENERATE(KvStorage::kInt8, KvStorage::kFp8E4m3);
  INFO("kv_storage " << storage);
  const CacheConfig plain_config =
      ConfigBuilder().max_batch(4).max_len(16).hybrid(/*window=*/4, /*chunk=*/6);
  auto quantized = make_cache(with_storage(plain_config, storage));
  auto plain = make_cache(plain_config);
  at::manual_seed(11);
  int64_t step_index = 0;
  ragged_session([&](const at::Tensor& pos, int64_t b) {
    const StepPlan qs = quantized->prepare(pos, b);
    const StepPlan ps = plain->prepare(pos, b);
    for (int64_t l = 0; l < 2; ++l) {
      const at::Tensor k = at::randn({b, kKvHeads, pos.size(-1), kDim}).mul_(1 + l);
      const at::Tensor v = at::randn_like(k);
      const at::Tensor query = at::randn({b, kHeads, pos.size(-1), kDim});
      const KV got = quantized->update(l, k, v, qs);
      const KV want = plain->update(l, round_trip(k, storage), round_trip(v, storage), ps);
      INFO("step " << step_index << ", layer " << l);
      // The staged views equal the plain cache's views bit for bit, every
      // slot (masked ones too), so the masks and attention agree as well.
      CHECK(bit_identical(got.keys.contiguous(), want.keys.contiguous()));
      CHECK(bit_identical(got.values.contiguous(), want.values.contiguous()));
      CHECK(at::equal(quantized->attend(l, query, got, qs), plain->attend(l, query, want, ps)));
      CHECK(at::equal(quantized->slot_positions(l), plain->slot_positions(l)));
    }
    CHECK(at::equal(quantized->seq_lengths(), plain->seq_lengths()));
    if (++step_index == 2) {  // row operations between steps
      quantized->copy_row(0, 3);
      plain->copy_row(0, 3);
      quantized->reorder(positions({2, 0, 1}));
      plain->reorder(positions({2, 0, 1}));
    }
  });
}

TEST_CASE(
    "quantized attention is within 1e-2 (int8) and 6e-2 (fp8) relative RMS of the "
    "compute-dtype cache",
    "[quantized][accuracy]") {
  // N(0,1) keys, values and queries; a prefill then 8 decode steps; the
  // worst step of each shape and the worst over all are printed.
  struct Shape {
    int64_t kv_heads, head_dim, len;
    at::ScalarType dtype;
  };
  const std::vector<Shape> shapes = {{2, 8, 16, at::kFloat},
                                     {2, 64, 128, at::kFloat},
                                     {8, 64, 256, at::kBFloat16},
                                     {2, 128, 512, at::kFloat},
                                     {4, 128, 128, at::kHalf}};
  for (const KvStorage storage : {KvStorage::kInt8, KvStorage::kFp8E4m3}) {
    const double bound = storage == KvStorage::kInt8 ? 1e-2 : 6e-2;
    double worst_all = 0;
    for (const Shape& s : shapes) {
      const CacheConfig config = ConfigBuilder()
                                     .num_layers(1)
                                     .num_kv_heads(s.kv_heads)
                                     .head_dim(s.head_dim)
                                     .max_batch(2)
                                     .max_len(s.len + 8)
                                     .dtype(s.dtype);
      StaticCache plain(config);
      StaticCache quantized(with_storage(config, storage));
      at::manual_seed(5);
      double worst = 0;
      for (int64_t start = 0; start < s.len + 8; start += start == 0 ? s.len : 1) {
        const int64_t q = start == 0 ? s.len : 1;
        const at::Tensor pos = arange_positions(start, q);
        const at::Tensor k = at::randn({2, s.kv_heads, q, s.head_dim}).to(s.dtype);
        const at::Tensor v = at::randn_like(k);
        const at::Tensor query = at::randn({2, 2 * s.kv_heads, q, s.head_dim}).to(s.dtype);
        const StepPlan ps = plain.prepare(pos, 2, start + q);
        const StepPlan qs = quantized.prepare(pos, 2, start + q);
        const at::Tensor want = plain.attend(0, query, plain.update(0, k, v, ps), ps);
        const at::Tensor got = quantized.attend(0, query, quantized.update(0, k, v, qs), qs);
        worst = std::max(worst, relative_rms(got, want));
      }
      std::printf(
          "kv_storage %s, %s, kv_heads %lld, head_dim %lld, %lld tokens: worst relative "
          "RMS %.3g (bound %.0e)\n",
          to_string(storage), c10::toString(s.dtype), static_cast<long long>(s.kv_heads),
          static_cast<long long>(s.head_dim), static_cast<long long>(s.len), worst, bound);
      CHECK(worst <= bound);
      worst_all = std::max(worst_all, worst);
    }
    std::printf("kv_storage %s: worst relative RMS over the shapes %.3g\n", to_string(storage),
                worst_all);
  }
}

TEST_CASE("estimate_memory_bytes is exact for quantized storage, the staging buffer on its own",
          "[quantized][memory]") {
  const KvStorage storage = GENERATE(KvStorage::kInt8, KvStorage::kFp8E4m3);
  const at::ScalarType dtype = GENERATE(at::kFloat, at::kBFloat16);
  INFO("kv_storage " << storage << ", dtype " << dtype);
  for (const CacheConfig& base : std::vector<CacheConfig>{
           ConfigBuilder().max_batch(3).max_len(40).dtype(dtype),
           ConfigBuilder().max_batch(3).max_len(40).dtype(dtype).hybrid(/*window=*/6, /*chunk=*/4),
           ConfigBuilder()
               .max_batch(3)
               .max_len(40)
               .dtype(dtype)
               .layer_types(all_sliding(3))
               .sliding_window(5)}) {
    const CacheConfig config = with_storage(base, storage);
    auto cache = make_cache(config);
    CHECK(estimate_memory_bytes(config) == cache->memory_bytes());
    bool overflow = false;
    // The staging buffer: one layer's keys and values at max_batch and the
    // largest view, in the compute dtype.
    const int64_t staging = 2 * config.max_batch * config.num_kv_heads * config.max_view_slots() *
                            config.head_dim * static_cast<int64_t>(c10::elementSize(dtype));
    CHECK(config.staging_bytes(&overflow) == staging);
    CHECK(cache->staging_bytes() == staging);
    CHECK(cache->staging().keys().size(2) == config.max_view_slots());
    CHECK_FALSE(overflow);
  }
  // With head_dim 64 the stored cache is at most 0.54x of bf16's (a
  // Llama-3.2-1B-shaped cache), the staging buffer one layer on top.
  CacheConfig llama;
  llama.num_layers = 16;
  llama.num_kv_heads = 8;
  llama.head_dim = 64;
  llama.max_batch = 8;
  llama.max_len = 4096;
  llama.dtype = at::kBFloat16;
  const double plain = static_cast<double>(estimate_memory_bytes(llama));
  bool overflow = false;
  const CacheConfig q = with_storage(llama, storage);
  const double stored = static_cast<double>(estimate_memory_bytes(q) - q.staging_bytes(&overflow));
  std::printf("kv_storage %s, head_dim 64: stored %.4fx of bf16, staging %.4fx\n",
              to_string(storage), stored / plain,
              static_cast<double>(q.staging_bytes(&overflow)) / plain);
  CHECK(stored / plain <= 0.54);
  // One bf16 layer of keys and values, without the scratch slot.
  CHECK(q.staging_bytes(&overflow) ==
        2 * 2 * llama.max_batch * llama.num_kv_heads * llama.max_len * llama.head_dim);
}

TEST_CASE("a quantized row that was reset is bit-identical to a fresh row, NaN scales included",
          "[quantized][reset]") {
  const KvStorage storage = GENERATE(KvStorage::kInt8, KvStorage::kFp8E4m3);
  const CacheConfig config = with_storage(
      ConfigBuilder().max_batch(3).max_len(16).hybrid(/*window=*/4, /*chunk=*/8), storage);
  HybridCache cache(config);
  const HybridCache fresh(config);
  const StepPlan step = cache.prepare(arange_positions(0, 8), 3);
  for (int64_t l = 0; l < 2; ++l) {
    at::Tensor k = at::randn({3, kKvHeads, 8, kDim});
    k[1].select(1, 6).fill_(kNaN);  // a NaN token: its scale is NaN
    cache.update(l, k, at::randn_like(k), step);
  }
  const Snapshot before(cache);
  cache.reset_rows(positions({1}));
  for (int64_t l = 0; l < 2; ++l) {
    INFO("layer " << l);
    CHECK(bit_identical(cache.keys(l)[1], fresh.keys(l)[1]));
    CHECK(bit_identical(cache.values(l)[1], fresh.values(l)[1]));
    CHECK(bit_identical(cache.key_scales(l)[1], fresh.key_scales(l)[1]));
    CHECK(bit_identical(cache.value_scales(l)[1], fresh.value_scales(l)[1]));
    CHECK(bit_identical(cache.key_scales(l)[0], before.key_scales[static_cast<size_t>(l)][0]));
    CHECK(bit_identical(cache.keys(l)[2], before.keys[static_cast<size_t>(l)][2]));
  }
}

TEST_CASE("padded tokens of a quantized cache reach only the scratch slot",
          "[quantized][padding]") {
  const KvStorage storage = GENERATE(KvStorage::kInt8, KvStorage::kFp8E4m3);
  StaticCache cache(with_storage(ConfigBuilder().max_batch(4).max_len(8), storage));
  StepPlan step = cache.prepare(arange_positions(0, 4), 4);
  for (int64_t l = 0; l < 2; ++l) {
    cache.update(l, at::randn({4, 2, 4, 8}), at::randn({4, 2, 4, 8}), step);
  }
  const Snapshot before(cache);
  // Row 0 writes position 4 and a padded token; rows 1 and 2 are padding.
  step = cache.prepare(positions(3, {4, -1, -1, -1, -5, -2}), 3);
  const at::Tensor key = at::full({3, 2, 2, 8}, 42.0);
  for (int64_t l = 0; l < 2; ++l) cache.update(l, key, key, step);
  const auto live = [](const at::Tensor& t) { return t.narrow(2, 0, 8); };  // no scratch
  for (int64_t l = 0; l < 2; ++l) {
    const auto i = static_cast<size_t>(l);
    for (const auto& [now, then] :
         {std::make_pair(cache.keys(l), before.keys[i]),
          std::make_pair(cache.values(l), before.values[i]),
          std::make_pair(cache.key_scales(l), before.key_scales[i]),
          std::make_pair(cache.value_scales(l), before.value_scales[i])}) {
      CHECK(bit_identical(live(now).narrow(0, 1, 3), live(then).narrow(0, 1, 3)));
      CHECK(bit_identical(now[0].narrow(1, 0, 4), then[0].narrow(1, 0, 4)));
      CHECK(bit_identical(now[0].narrow(1, 5, 3), then[0].narrow(1, 5, 3)));
    }
    // Position 4 of row 0 holds the constant token: codes at full scale.
    CHECK(at::allclose(cache.key_scales(l)[0].select(1, 4),
                       at::full({2, 1}, 42.0 / statickv::detail::quant_max(storage))));
  }
}

TEST_CASE("a staged view is valid until the next layer's update, and attend refuses it after",
          "[quantized][staging]") {
  StaticCache cache(with_storage(ConfigBuilder().max_batch(2).max_len(8), KvStorage::kInt8));
  const StepPlan step = cache.prepare(arange_positions(0, 3), 2);
  const at::Tensor query = at::randn({2, kHeads, 3, kDim});
  const KV first = cache.update(0, at::randn({2, 2, 3, 8}), at::randn({2, 2, 3, 8}), step);
  CHECK(first.keys.data_ptr() == cache.staging().keys().data_ptr());  // the one staging buffer
  CHECK(cache.attend(0, query, first, step).isfinite().all().item<bool>());
  const KV second = cache.update(1, at::randn({2, 2, 3, 8}), at::randn({2, 2, 3, 8}), step);
  CHECK(second.keys.data_ptr() == first.keys.data_ptr());
  const Snapshot before(cache);
  require_error([&] { cache.attend(0, query, first, step); },
                {"kv: expected the views update(0", "staging buffer now holds layer 1",
                 "kv_storage=int8", "Note [staging buffer]"});
  CHECK(before.same_as(cache));
  CHECK(cache.attend(1, query, second, step).isfinite().all().item<bool>());
  // The next step ends every staged view.
  const StepPlan next = cache.prepare(arange_positions(3, 1), 2);
  require_error([&] { cache.attend(1, query.narrow(2, 0, 1), second, next); },
                {"staging buffer now holds nothing current"});
#ifndef NDEBUG
  // Debug builds poison the released buffer: a view read after its step is NaN.
  CHECK(second.keys.isnan().all().item<bool>());
#endif
}

TEST_CASE("quantized storage refuses what it does not support, naming both options",
          "[quantized][errors]") {
  require_error(
      [] { StaticCache cache(with_storage(ConfigBuilder().dtype(at::kDouble), KvStorage::kInt8)); },
      {"CacheConfig.kv_storage", "CacheConfig.dtype=Double", "kv_storage=int8"});
  require_error(
      [] { estimate_memory_bytes(with_storage(ConfigBuilder(), static_cast<KvStorage>(9))); },
      {"CacheConfig.kv_storage: expected compute, int8 or fp8 but got 9"});
  StaticCache cache(with_storage(ConfigBuilder().max_batch(2).max_len(8), KvStorage::kFp8E4m3));
  const StepPlan step = cache.prepare(arange_positions(0, 2), 2);
  const at::Tensor query = at::randn({2, kHeads, 2, kDim});
  const KV kv = cache.update(0, at::randn({2, 2, 2, 8}), at::randn({2, 2, 2, 8}), step);
  CHECK(cache.attention_path(0, query) == AttentionPath::kMasked);
  const Snapshot before(cache);
  require_error([&] { cache.attend(0, query, kv, step, AttentionPath::kVarlen); },
                {"path:", "quantized KV storage"});
  require_error([&] { cache.save_row(0); }, {"save_row", "kv_storage=compute", "kv_storage=fp8"});
  CacheConfig plain_config = cache.config();
  plain_config.kv_storage = KvStorage::kCompute;
  StaticCache plain(plain_config);
  const RowState state = plain.save_row(0);
  require_error([&] { cache.restore_row(state, 0); }, {"restore_row", "kv_storage=fp8"});
  require_error([&] { cache.update(1, query, query, step); }, {"key: expected shape"});
  const at::Tensor rope = at::ones({2, 1, 2, kDim});
  const at::Tensor kv_in = at::randn({2, 2, 2, 8});
  require_error([&] { rotary_update(cache, 1, query, kv_in, kv_in, rope, rope, step); },
                {"CacheConfig.kv_storage: expected compute with the fused rotary write", "fp8"});
  CHECK(before.same_as(cache));
}
