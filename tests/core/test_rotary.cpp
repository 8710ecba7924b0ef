// rotary.hpp on the CPU: apply_rotary() against values worked out by hand
// and the rotation's invariants; the fused rotary write rotary_update()
// equals apply_rotary() then update() on the same steps, whole buffers
// compared (scratch slot included), and it refuses bad input before writing.

#include "support.hpp"
#include "support/rotary.hpp"

using namespace statickv;
using namespace statickv::test;

namespace {

const at::ScalarType kDtypes[] = {at::kFloat, at::kHalf, at::kBFloat16};

}  // namespace

TEST_CASE("apply_rotary is x * cos + rotate_half(x) * sin, worked out by hand", "[rotary]") {
  // head_dim 4: rotate_half((x0, x1, x2, x3)) = (-x2, -x3, x0, x1).
  const at::Tensor x = at::tensor({1.0f, 2.0f, 3.0f, 4.0f}).view({1, 1, 1, 4});
  const at::Tensor cos = at::tensor({0.5f, 0.25f, 0.5f, 0.25f}).view({1, 1, 1, 4});
  const at::Tensor sin = at::tensor({2.0f, 3.0f, 2.0f, 3.0f}).view({1, 1, 1, 4});
  const at::Tensor expected = at::tensor(
      {1 * 0.5f - 3 * 2.0f, 2 * 0.25f - 4 * 3.0f, 3 * 0.5f + 1 * 2.0f, 4 * 0.25f + 2 * 3.0f});
  CHECK(at::equal(apply_rotary(x, cos, sin), expected.view({1, 1, 1, 4})));
}

TEST_CASE("apply_rotary rotates each pair of halves, broadcasting cos and sin over heads",
          "[rotary]") {
  at::manual_seed(5);
  const at::Tensor x = at::randn({2, kHeads, 3, kDim});
  const at::Tensor theta = at::rand({2, 1, 3, kDim / 2}).mul(6.0);
  const at::Tensor cos = at::cat({theta.cos(), theta.cos()}, -1);
  const at::Tensor sin = at::cat({theta.sin(), theta.sin()}, -1);
  const at::Tensor out = apply_rotary(x, cos, sin);
  REQUIRE(out.sizes() == x.sizes());
  // (x_i, x_{i + half}) turns by theta_i: its length is kept.
  const auto pair_norm = [](const at::Tensor& t) {
    return t.narrow(-1, 0, kDim / 2).square().add(t.narrow(-1, kDim / 2, kDim / 2).square());
  };
  CHECK(at::allclose(pair_norm(out), pair_norm(x), 1e-5, 1e-5));
  // Turning back by -theta gives x again; theta = 0 leaves x exactly as it is.
  CHECK(at::allclose(apply_rotary(out, cos, sin.neg()), x, 1e-5, 1e-5));
  CHECK(at::equal(apply_rotary(x, at::ones_like(cos), at::zeros_like(sin)), x));
  CHECK_FALSE(at::allclose(out, x));
}

TEST_CASE("rotary_update equals apply_rotary then update on ragged rows with padding", "[rotary]") {
  for (at::ScalarType dtype : kDtypes) {
    // Rows of 5, 3 and 1 prompt tokens, left-padded; then per-row decode
    // with one row padded in the last step (its token goes to the scratch slot).
    const std::vector<at::Tensor> steps = {
        positions(3, {0, 1, 2, 3, 4, -1, -1, 0, 1, 2, -1, -1, -1, -1, 0}), positions(3, {5, 3, 1}),
        positions(3, {6, -1, 2})};
    expect_rotary_matches_update(ConfigBuilder().dtype(dtype), steps, 3, /*key_tol=*/0);
  }
}

TEST_CASE("rotary_update equals apply_rotary then update with shared positions on a batch prefix",
          "[rotary]") {
  for (at::ScalarType dtype : kDtypes) {
    const std::vector<at::Tensor> steps = {arange_positions(0, 4), positions({4}), positions({-1}),
                                           positions({5})};
    expect_rotary_matches_update(ConfigBuilder().dtype(dtype), steps, /*live_batch=*/2, 0);
  }
}

TEST_CASE("rotary_update writes ring slots as update does once a sliding layer wraps", "[rotary]") {
  for (at::ScalarType dtype : kDtypes) {
    // Window 4, chunk 3: a ring of 6 slots, wrapped twice by position 15.
    std::vector<at::Tensor> steps = {positions(2, {0, 1, 2, -1, 0, 1}),
                                     positions(2, {3, 4, 5, 2, 3, 4})};
    for (int64_t p = 6; p < 16; ++p) steps.push_back(positions(2, {p, p - 1}));
    const CacheConfig config = ConfigBuilder().max_len(32).hybrid(4, 3).dtype(dtype);
    expect_rotary_matches_update(config, steps, 2, 0);
  }
}

TEST_CASE("rotary_update refuses bad input before writing anything", "[rotary][errors]") {
  HybridCache cache{ConfigBuilder()};
  const StepPlan step = cache.prepare(positions(2, {0, 1}), 2);
  const Snapshot before(cache);
  const at::Tensor q = at::randn({2, 4, 1, kDim}), k = at::randn({2, kKvHeads, 1, kDim});
  const at::Tensor cs = at::randn({2, 1, 1, kDim});
  auto call = [&](const at::Tensor& query, const at::Tensor& key, const at::Tensor& cos) {
    rotary_update(cache, 0, query, key, key.clone(), cos, cs, step);
  };
  CHECK_THROWS_WITH(call(q, k, at::randn({2, 1, 2, kDim})),
                    Catch::Contains("cos: expected shape [live_batch, 1, q, head_dim]"));
  CHECK_THROWS_WITH(call(q.to(at::kHalf), k, cs), Catch::Contains("query: expected dtype Float"));
  CHECK_THROWS_WITH(call(at::randn({2, 3, 1, kDim}), k, cs),
                    Catch::Contains("query: expected heads to be a multiple of kv_heads=2"));
  CHECK_THROWS_WITH(call(q, at::randn({2, kKvHeads, 2, kDim}), cs),
                    Catch::Contains("key: expected shape"));
  CHECK(before.same_as(cache));
  cache.prepare(positions(2, {1, 2}), 2);
  CHECK_THROWS_WITH(call(q, k, cs), Catch::Contains("stale"));
}
