// A reset row is a fresh row (Note [a reset row is a fresh row],
// include/statickv/cache.hpp): after reset_rows, every slot of the reset rows
// equals a newly built cache's, so nothing a finished sequence left behind,
// NaN and Inf included, reaches the next sequence in that row.

#include "support.hpp"

#include <limits>

namespace {

using namespace statickv;
using statickv::test::positions;

/// A sliding layer then a full one: both layer types reset.
CacheConfig hybrid_config() {
  return statickv::test::ConfigBuilder().head_dim(4).max_batch(3).hybrid(/*window=*/4, /*chunk=*/8);
}

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();
constexpr float kInf = std::numeric_limits<float>::infinity();

/// Writes positions 0..7 of `row` (others padded) with finite keys and
/// values, except a NaN key and an Inf value at position 6.
void write_poisoned_row(HybridCache& cache, int64_t row) {
  const CacheConfig& c = cache.config();
  std::vector<int64_t> pos(static_cast<size_t>(c.max_batch * 8), -1);
  for (int64_t t = 0; t < 8; ++t) pos[static_cast<size_t>(row * 8 + t)] = t;
  const StepPlan step = cache.prepare(positions(c.max_batch, pos), c.max_batch, /*attend_len=*/8);
  for (int64_t layer = 0; layer < c.num_layers; ++layer) {
    at::Tensor k = at::randn({c.max_batch, c.num_kv_heads, 8, c.head_dim});
    at::Tensor v = at::randn_like(k);
    k[row].select(1, 6).fill_(kNaN);
    v[row].select(1, 6).fill_(kInf);
    cache.update(layer, k, v, step);
  }
}

}  // namespace

TEST_CASE("reset_rows leaves every slot of the reset rows equal to a fresh cache's",
          "[cache][reset]") {
  HybridCache cache(hybrid_config());
  const HybridCache fresh(hybrid_config());
  write_poisoned_row(cache, /*row=*/1);
  write_poisoned_row(cache, /*row=*/2);
  // The scratch slot too: plant NaN there directly.
  for (int64_t layer = 0; layer < 2; ++layer) {
    cache.keys(layer)[1].select(1, cache.capacity(layer)).fill_(kNaN);
  }
  const at::Tensor row0_keys = cache.keys(0)[0].clone();

  cache.reset_rows(positions({1, 2}));

  for (int64_t layer = 0; layer < 2; ++layer) {
    INFO("layer " << layer << " (" << cache.layer(layer).type() << ")");
    for (int64_t row : {1, 2}) {
      CHECK(at::equal(cache.keys(layer)[row], fresh.keys(layer)[row]));
      CHECK(at::equal(cache.values(layer)[row], fresh.values(layer)[row]));
      CHECK(at::equal(cache.slot_positions(layer)[row], fresh.slot_positions(layer)[row]));
    }
  }
  CHECK(at::equal(cache.seq_lengths(), positions({0, 0, 0})));
  // Rows not reset keep what they had.
  CHECK(at::equal(cache.keys(0)[0], row0_keys));
}

TEST_CASE("a NaN key and an Inf value of a reset row never reach the next sequence's attention",
          "[cache][reset]") {
  // The reproduction: 8 positions with bad values at position 6,
  // reset, then 4 clean positions attended with attend_len 8, so the old
  // slots are inside the views (masked).
  HybridCache cache(hybrid_config());
  write_poisoned_row(cache, /*row=*/0);
  cache.reset_rows(positions({0}));
  const StepPlan step =
      cache.prepare(positions(1, {0, 1, 2, 3}), /*live_batch=*/1, /*attend_len=*/8);
  for (int64_t layer = 0; layer < 2; ++layer) {
    const at::Tensor k = at::randn({1, 2, 4, 4});
    const KV kv = cache.update(layer, k, at::randn_like(k), step);
    const at::Tensor q = at::randn({1, 4, 4, 4});
    INFO("layer " << layer);
    CHECK(at::isfinite(sdpa_attention(q, kv.keys, kv.values, step.additive_mask(layer)))
              .all()
              .item<bool>());
    CHECK(at::isfinite(sdpa_attention(q, kv.keys, kv.values, step.mask(layer))).all().item<bool>());
    CHECK(at::isfinite(reference_attention(q, kv.keys, kv.values, step.mask(layer)))
              .all()
              .item<bool>());
  }
}

TEST_CASE("reset_rows keeps every buffer address and invalidates earlier steps", "[cache][reset]") {
  HybridCache cache(hybrid_config());
  const std::vector<const void*> before = statickv::test::addresses(cache);
  const StepPlan step = cache.prepare(positions({0}), /*live_batch=*/3);
  cache.reset_rows(positions({0, 2}));
  CHECK(statickv::test::addresses(cache) == before);
  const at::Tensor k = at::zeros({3, 2, 1, 4});
  statickv::test::require_error([&] { cache.update(0, k, k, step); }, {"stale"});
}
