// Host offload (CacheConfig::host_offload, Note [host offload],
// docs/design.md). On the CPU the host and the device are both the CPU and
// the offload path runs as it does on a GPU (staging ring, copy-in of the
// attended range, write-back of the written slots, kernel copies in row
// operations), with synchronous copies. The specification: an offloaded
// cache is the plain cache with its buffers somewhere else. Over random
// sessions of prefill chunks, decode steps, padding, per-row and shared
// positions, attended-length buckets and every row operation, its views,
// attention outputs and stored buffers equal the plain cache's bit for bit;
// no address changes; bad input changes nothing; its device bytes are the
// staging ring and bookkeeping only; the combinations it does not serve
// are refused by name.

#include "support.hpp"

#include <statickv/rotary.hpp>

#include <memory>
#include <random>

namespace {

using namespace statickv;
using namespace statickv::test;

std::unique_ptr<Cache> make(const CacheConfig& config) {
  if (config.has_type(LayerType::kSliding)) return std::make_unique<HybridCache>(config);
  return std::make_unique<StaticCache>(config);
}

CacheConfig offloaded(CacheConfig config) {
  config.host_offload = true;
  return config;
}

// A plain cache and an offloaded one driven by the same random calls.
class Twin {
 public:
  Twin(const CacheConfig& config, uint64_t seed)
      : plain_(make(config)), offload_(make(offloaded(config))), rng_(seed) {
    at::manual_seed(static_cast<uint64_t>(seed));
  }

  Cache& plain() { return *plain_; }
  Cache& offload() { return *offload_; }

  /// One random step on both caches, every layer: views and attention
  /// outputs compared as they come, whole buffers after.
  void step() {
    const CacheConfig& c = plain_->config();
    const int64_t b = uniform(1, c.max_batch);
    const int64_t q = coin(0.6) ? 1 : uniform(2, c.effective_max_chunk());
    const at::Tensor pos = coin(0.5) ? per_row_positions(b, q) : shared_positions(q);
    const int64_t attend = attend_len(pos);
    INFO("step positions " << pos << " live_batch " << b << " attend_len " << attend);
    const StepPlan ps = plain_->prepare(pos, b, attend);
    const StepPlan os = offload_->prepare(pos, b, attend);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const auto options = at::TensorOptions().dtype(c.dtype);
      const at::Tensor k = at::randn({b, c.num_kv_heads, q, c.head_dim}, options);
      const at::Tensor v = at::randn_like(k);
      const at::Tensor query = at::randn({b, 2 * c.num_kv_heads, q, c.head_dim}, options);
      const KV want = plain_->update(l, k, v, ps);
      const KV got = offload_->update(l, k, v, os);
      INFO("layer " << l);
      REQUIRE(bit_identical(got.keys, want.keys));
      REQUIRE(bit_identical(got.values, want.values));
      REQUIRE(bit_identical(offload_->attend(l, query, got, os), plain_->attend(l, query, want, ps)));
    }
    REQUIRE(Snapshot(*offload_) == Snapshot(*plain_));
  }

  /// One random row operation on both caches (those that throw on the plain
  /// cache, a too-deep ring rollback, must throw alike and change nothing).
  void row_operation() {
    const int64_t max_batch = plain_->config().max_batch;
    const Snapshot before(*plain_);
    switch (uniform(0, 5)) {
      case 0: {
        const at::Tensor rows = at::randperm(max_batch, i64()).narrow(0, 0, uniform(1, max_batch));
        both([&](Cache& cache) { cache.reset_rows(rows); });
        break;
      }
      case 1: {
        const int64_t src = uniform(0, max_batch - 1);
        const int64_t dst = uniform(0, max_batch - 1);
        both([&](Cache& cache) { cache.copy_row(src, dst); });
        break;
      }
      case 2: {
        const at::Tensor index = at::randint(max_batch, {uniform(1, max_batch)}, i64());
        both([&](Cache& cache) { cache.reorder(index); });
        break;
      }
      case 3: {
        const at::Tensor seq = plain_->seq_lengths();
        std::vector<int64_t> lengths;
        for (int64_t r = 0; r < uniform(1, max_batch); ++r) {
          lengths.push_back(std::max<int64_t>(0, seq[r].item<int64_t>() - uniform(0, 3)));
        }
        bool plain_threw = false;
        try {
          plain_->rollback(lengths);
        } catch (const c10::Error&) {
          plain_threw = true;
          REQUIRE(before.same_as(*plain_));
        }
        if (plain_threw) {
          REQUIRE_THROWS_AS(offload_->rollback(lengths), c10::Error);
        } else {
          offload_->rollback(lengths);
        }
        break;
      }
      case 4: {
        const int64_t src = uniform(0, max_batch - 1);
        const int64_t dst = uniform(0, max_batch - 1);
        const RowState saved = plain_->save_row(src);
        const RowState offload_saved = offload_->save_row(src);
        REQUIRE(offload_saved.length == saved.length);
        for (size_t l = 0; l < saved.keys.size(); ++l) {
          REQUIRE(bit_identical(offload_saved.keys[l], saved.keys[l]));
          REQUIRE(bit_identical(offload_saved.values[l], saved.values[l]));
          REQUIRE(bit_identical(offload_saved.positions[l], saved.positions[l]));
        }
        both([&](Cache& cache) { cache.restore_row(saved, dst); });
        break;
      }
      default:
        if (coin(0.3)) both([](Cache& cache) { cache.reset(); });
    }
    REQUIRE(Snapshot(*offload_) == Snapshot(*plain_));
  }

 private:
  template <typename Fn>
  void both(Fn&& fn) {
    fn(*plain_);
    fn(*offload_);
  }

  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }

  // Row r continues from its length; some rows are all padding, some
  // padded on the right, and a row that would pass max_len is cut.
  at::Tensor per_row_positions(int64_t b, int64_t q) {
    const int64_t max_len = plain_->config().max_len;
    at::Tensor pos = at::full({b, q}, -1, i64());
    for (int64_t r = 0; r < b; ++r) {
      if (coin(0.15)) continue;
      const int64_t start = plain_->seq_lengths()[r].item<int64_t>();
      const int64_t real = uniform(1, q);
      for (int64_t t = 0; t < real && start + t < max_len; ++t) pos[r][t] = start + t;
    }
    return pos;
  }

  at::Tensor shared_positions(int64_t q) {
    const int64_t start = uniform(0, plain_->config().max_len - q);
    return arange_positions(start, q);
  }

  // -1 (max_len) or a bucket that covers the step's positions.
  int64_t attend_len(const at::Tensor& pos) {
    const int64_t max_len = plain_->config().max_len;
    if (coin(0.4)) return -1;
    const int64_t needed = std::max<int64_t>(1, pos.max().item<int64_t>() + 1);
    return std::min(max_len, (needed + 3) / 4 * 4);
  }

  std::unique_ptr<Cache> plain_, offload_;
  std::mt19937_64 rng_;
};

void random_session(const CacheConfig& config, uint64_t seed, int steps) {
  Twin twin(config, seed);
  const std::vector<const void*> addresses_before = addresses(twin.offload());
  for (int i = 0; i < steps; ++i) {
    INFO("seed " << seed << ", step " << i);
    twin.step();
    if (i % 3 == 2) twin.row_operation();
  }
  REQUIRE(addresses(twin.offload()) == addresses_before);
}

}  // namespace

TEST_CASE("an offloaded cache equals the plain cache over random sessions", "[offload]") {
  const CacheConfig static_config = ConfigBuilder().max_batch(4).max_len(24).max_chunk(5);
  const CacheConfig hybrid_config =
      ConfigBuilder().max_batch(4).max_len(24).layer_types(
          {LayerType::kSliding, LayerType::kFull, LayerType::kSliding}).sliding_window(4).max_chunk(3);
  for (uint64_t seed : {1, 2, 3}) {
    SECTION("static, seed " + std::to_string(seed)) { random_session(static_config, seed, 45); }
    SECTION("hybrid, seed " + std::to_string(seed)) { random_session(hybrid_config, seed, 45); }
  }
}

TEST_CASE("a half-precision offloaded cache equals the plain cache", "[offload]") {
  random_session(ConfigBuilder().max_batch(3).max_len(16).dtype(at::kBFloat16).hybrid(4, 4), 7,
                 30);
}

TEST_CASE("an offloaded cache's views are its staging ring, valid until the next layer's update",
          "[offload]") {
  StaticCache cache(ConfigBuilder().num_layers(3).max_batch(2).max_len(8).host_offload(true));
  const StepPlan step = cache.prepare(arange_positions(0, 3), 2);
  const auto kv = [&] { return at::randn({2, kKvHeads, 3, kDim}); };
  const KV first = cache.update(0, kv(), kv(), step);
  REQUIRE(first.keys.is_alias_of(cache.offload_ring().buffer(0).keys()));
  REQUIRE(first.values.is_alias_of(cache.offload_ring().buffer(0).values()));
  REQUIRE_FALSE(first.keys.is_alias_of(cache.keys(0)));
  const at::Tensor query = at::randn({2, kHeads, 3, kDim});
  cache.attend(0, query, first, step);  // current: accepted
  // update(1) issues layer 2's copy-in, into layer 0's slot.
  const KV second = cache.update(1, kv(), kv(), step);
  REQUIRE(second.keys.is_alias_of(cache.offload_ring().buffer(1).keys()));
  REQUIRE_THROWS_WITH(cache.attend(0, query, first, step),
                      Catch::Contains("now holds layer 2") && Catch::Contains("host_offload"));
  cache.attend(1, query, second, step);
  const KV third = cache.update(2, kv(), kv(), step);  // the last layer: no copy-in follows
  REQUIRE(third.keys.is_alias_of(cache.offload_ring().buffer(0).keys()));
  cache.attend(1, query, second, step);
  cache.attend(2, query, third, step);
  cache.prepare(positions({3}), 2);  // a new step: nothing staged is current
  REQUIRE_THROWS_WITH(cache.attend(2, query, third, step), Catch::Contains("stale"));
}

TEST_CASE("an offloaded cache writes the step's slots to its host copy", "[offload]") {
  StaticCache cache(ConfigBuilder().num_layers(2).max_batch(2).max_len(8).host_offload(true));
  const StepPlan step = cache.prepare(positions(2, {0, 1, 5, -1}), 2);
  const at::Tensor key = at::randn({2, kKvHeads, 2, kDim});
  const at::Tensor value = at::randn_like(key);
  cache.update(0, key, value, step);
  REQUIRE(cache.keys(0).device().is_cpu());
  REQUIRE(at::equal(cache.keys(0)[0].narrow(1, 0, 2), key[0]));
  REQUIRE(at::equal(cache.values(0)[1].narrow(1, 5, 1), value[1].narrow(1, 0, 1)));
  // Layer 1 not updated yet: its host copy is untouched.
  REQUIRE(cache.keys(1).abs().sum().item<double>() == 0.0);
}

TEST_CASE("bad input to an offloaded cache changes nothing", "[offload]") {
  HybridCache cache(ConfigBuilder().max_batch(2).max_len(16).hybrid(4, 4).host_offload(true));
  StepPlan step = cache.prepare(positions(2, {0, 1, 2, 0, 1, -1}), 2);
  cache.update(0, at::randn({2, kKvHeads, 3, kDim}), at::randn({2, kKvHeads, 3, kDim}), step);
  cache.update(1, at::randn({2, kKvHeads, 3, kDim}), at::randn({2, kKvHeads, 3, kDim}), step);
  const Snapshot before(cache);
  const std::vector<const void*> addresses_before = addresses(cache);
  REQUIRE_THROWS_WITH(cache.prepare(positions({0}), 3), Catch::Contains("live_batch"));
  REQUIRE_THROWS_WITH(cache.update(0, at::randn({2, kKvHeads, 2, kDim}),
                                   at::randn({2, kKvHeads, 2, kDim}), step),
                      Catch::Contains("key: expected shape"));
  REQUIRE_THROWS_WITH(cache.reorder(positions({0, 2})), Catch::Contains("indices[1]"));
  REQUIRE_THROWS_WITH(cache.rollback(std::vector<int64_t>{4}), Catch::Contains("new_lengths[0]"));
  REQUIRE(before.same_as(cache));
  REQUIRE(addresses(cache) == addresses_before);
}

TEST_CASE("an offloaded cache's device bytes are the staging ring and bookkeeping",
          "[offload][memory]") {
  // The shape: 32 layers; the device holds two layers' worth.
  const CacheConfig plain = ConfigBuilder().num_layers(32).max_batch(2).max_len(512);
  const CacheConfig config = offloaded(plain);
  const CacheConfig::Bytes bytes = estimate_memory(config);
  StaticCache cache(config);
  REQUIRE(cache.device_memory_bytes() == bytes.device);
  REQUIRE(cache.host_memory_bytes() == bytes.host);
  REQUIRE(cache.memory_bytes() == estimate_memory_bytes(config));
  REQUIRE(bytes.host == 32 * 2 * 2 * kKvHeads * 513 * kDim * 4);  // every layer's K and V
  REQUIRE(estimate_memory(plain).host == 0);
  REQUIRE(estimate_memory(plain).device == estimate_memory_bytes(plain));
  const double fraction = static_cast<double>(bytes.device) / estimate_memory_bytes(plain);
  INFO("device fraction " << fraction);
  REQUIRE(fraction > 2.0 / 32);
  REQUIRE(fraction < 2.0 / 32 * 1.1);  // bookkeeping: int64 per slot, kv_heads * head_dim floats
}

TEST_CASE("host offload refuses the combinations it does not serve, naming both options",
          "[offload][config]") {
  CacheConfig quantized = ConfigBuilder().kv_storage(KvStorage::kInt8).host_offload(true);
  REQUIRE_THROWS_WITH(quantized.validate(),
                      Catch::Contains("CacheConfig.host_offload") &&
                          Catch::Contains("kv_storage=int8"));
  const CacheConfig config = ConfigBuilder().host_offload(true);
  REQUIRE_THROWS_WITH(statickv::detail::check_rotary_config(config),
                      Catch::Contains("host_offload") && Catch::Contains("fused rotary write"));
  StaticCache cache(config);
  const StepPlan step = cache.prepare(positions({0}), 1);
  const at::Tensor kv = at::randn({1, kKvHeads, 1, kDim});
  REQUIRE_THROWS_WITH(cache.write_target(0, kv, kv, step), Catch::Contains("host_offload"));
  const KV views = cache.update(0, kv, kv, step);
  const at::Tensor query = at::randn({1, kHeads, 1, kDim});
  REQUIRE(cache.attention_path(0, query) == AttentionPath::kMasked);
  REQUIRE_THROWS_WITH(cache.attend(0, query, views, step, AttentionPath::kVarlen),
                      Catch::Contains("host offload"));
}
