// The fused decode prepare (Note [decode prepare], docs/design.md): a step of
// one query a row is planned by one kernel, and what it plans is exactly
// what the ATen composition plans. A cache with eager masks keeps the
// composition, so two caches fed the same steps compare the two.

#include "support.hpp"

#include <statickv/detail/decode_prepare.hpp>
#include <statickv/kernel_switches.hpp>

#include <random>

namespace {

using namespace statickv;
using statickv::test::ConfigBuilder;
using statickv::test::positions;

constexpr int64_t kHeads = 2, kDim = 4;

// A decode position for one row: mostly the next one, sometimes padding,
// past max_len, or below -1 (all three are "not stored").
int64_t decode_position(std::mt19937& rng, int64_t next, int64_t max_len) {
  switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
    case 0:
      return -1;
    case 1:
      return max_len + std::uniform_int_distribution<int64_t>(0, 3)(rng);
    case 2:
      return -2 - std::uniform_int_distribution<int64_t>(0, 3)(rng);
    default:
      return next;
  }
}

// Every part of two caches' state and of their steps that prepare() plans.
void require_same_plan(Cache& fused, Cache& composed, const StepPlan& a, const StepPlan& b,
                       const at::Tensor& kv) {
  REQUIRE(at::equal(fused.seq_lengths(), composed.seq_lengths()));
  for (int64_t l = 0; l < fused.num_layers(); ++l) {
    INFO("layer " << l);
    REQUIRE(at::equal(fused.slot_positions(l), composed.slot_positions(l)));
    REQUIRE(at::equal(a.write_slots(l), b.write_slots(l)));
    REQUIRE(a.view_len(l) == b.view_len(l));
    REQUIRE(at::equal(a.mask(l), b.mask(l)));
    REQUIRE(at::equal(a.additive_mask(l), b.additive_mask(l)));
    const KV va = fused.update(l, kv, kv.neg(), a);
    const KV vb = composed.update(l, kv, kv.neg(), b);
    REQUIRE(at::equal(va.keys, vb.keys));  // the per-row write index
    REQUIRE(at::equal(va.values, vb.values));
    if (fused.config().layer_type(l) != LayerType::kFull) continue;
    const at::Tensor query = at::randn({a.live_batch(), kHeads, 1, kDim});
    const auto args_a = fused.varlen_args(l, query, va, a);
    const auto args_b = composed.varlen_args(l, query, vb, b);
    REQUIRE(at::equal(args_a.seqused_k, args_b.seqused_k));
    REQUIRE(at::equal(args_a.cum_seq_q, args_b.cum_seq_q));
  }
}

void run_steps(const CacheConfig& config, uint32_t seed) {
  CacheConfig eager = config;
  eager.eager_masks = true;
  HybridCache fused(config), composed(eager);
  std::mt19937 rng(seed);
  std::vector<int64_t> next(static_cast<size_t>(config.max_batch), 0);
  for (int64_t t = 0; t < 3 * config.max_len; ++t) {
    const int64_t b = std::uniform_int_distribution<int64_t>(1, config.max_batch)(rng);
    const bool shared = std::uniform_int_distribution<int>(0, 3)(rng) == 0;
    std::vector<int64_t> values;
    for (int64_t r = 0; r < (shared ? 1 : b); ++r) {
      values.push_back(decode_position(rng, next[static_cast<size_t>(r)], config.max_len));
      ++next[static_cast<size_t>(r)];
    }
    const at::Tensor pos = shared ? positions(values) : positions(b, values);
    const int64_t attend = std::uniform_int_distribution<int>(0, 1)(rng) == 0 ? -1 : config.max_len;
    INFO("step " << t << ", live_batch " << b << ", positions " << pos);
    const StepPlan a = fused.prepare(pos, b, attend);
    const StepPlan s = composed.prepare(pos, b, attend);
    require_same_plan(fused, composed, a, s, at::randn({b, kHeads, 1, kDim}));
  }
}

CacheConfig decode_config(bool hybrid) {
  ConfigBuilder c;
  c.max_batch(4).max_len(12).num_kv_heads(kHeads).head_dim(kDim).check_position_values(false);
  if (hybrid) c.hybrid(/*window=*/3, /*chunk=*/2);
  return c;
}

}  // namespace

TEST_CASE("the fused decode prepare plans exactly what the ATen composition plans",
          "[cache][decode_prepare]") {
  REQUIRE(kernel_enabled("decode_prepare"));  // the ctest run never switches it off
  for (bool hybrid : {false, true}) {
    for (uint32_t seed : {1u, 2u, 3u}) {
      INFO((hybrid ? "hybrid" : "static") << " cache, seed " << seed);
      run_steps(decode_config(hybrid), seed);
    }
  }
}

TEST_CASE("a decode prepare() is one launch, and a step of more queries keeps the composition",
          "[cache][decode_prepare]") {
  HybridCache cache(decode_config(/*hybrid=*/true));
  cache.prepare(positions(2, {0, 1, 0, 1}), 2);
  int64_t decode = 0, chunk = 0;
  {
    OpCounter ops;
    StepPlan step = cache.prepare(positions(2, {2, -1}), 2);
    decode = ops.launches();
    CHECK(ops.counts().launched.at("").at("statickv::decode_prepare") == 1);
  }
  {
    OpCounter ops;
    StepPlan step = cache.prepare(positions(2, {3, 4, 3, 4}), 2);
    chunk = ops.launches();
  }
  CHECK(decode == 1);
  CHECK(chunk > 10);
}
