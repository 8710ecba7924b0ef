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
#include "support/offload.hpp"

#include <statickv/rotary.hpp>

using namespace statickv;
using namespace statickv::test;

TEST_CASE("an offloaded cache equals the plain cache over random sessions", "[offload]") {
  const CacheConfig static_config = ConfigBuilder().max_batch(4).max_len(24).max_chunk(5);
  const CacheConfig hybrid_config =
      ConfigBuilder()
          .max_batch(4)
          .max_len(24)
          .layer_types({LayerType::kSliding, LayerType::kFull, LayerType::kSliding})
          .sliding_window(4)
          .max_chunk(3);
  for (uint64_t seed : {1, 2, 3}) {
    SECTION("static, seed " + std::to_string(seed)) { random_session(static_config, seed, 45); }
    SECTION("hybrid, seed " + std::to_string(seed)) { random_session(hybrid_config, seed, 45); }
  }
}

TEST_CASE("a half-precision offloaded cache equals the plain cache", "[offload]") {
  random_session(ConfigBuilder().max_batch(3).max_len(16).dtype(at::kBFloat16).hybrid(4, 4), 7, 30);
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
  REQUIRE_THROWS_WITH(
      cache.update(0, at::randn({2, kKvHeads, 2, kDim}), at::randn({2, kKvHeads, 2, kDim}), step),
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
  REQUIRE_THROWS_WITH(quantized.validate(), Catch::Contains("CacheConfig.host_offload") &&
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
