// StepPlan (include/statickv/step.hpp), the plan Cache::prepare() makes: what
// it reports of the step it was given (positions, live batch, lengths,
// per_row), the write slots and view lengths of each layer type, and the
// bool and additive masks, written out by hand, including an older step's
// masks after the cache has moved on (Note [lazy masks]).

#include "support.hpp"

using namespace statickv;
using namespace statickv::test;

namespace {

/// A sliding layer (window 4, a ring of 4 + 3 - 1 = 6 slots), then a full
/// one of max_len 16, for 2 rows.
CacheConfig two_types() { return ConfigBuilder().max_batch(2).hybrid(/*window=*/4, /*chunk=*/3); }

/// Rows of bools, 0 or 1, as a [rows, cols] bool tensor.
at::Tensor rows_of(int64_t rows, std::vector<int64_t> values) {
  return positions(rows, std::move(values)).to(at::kBool);
}

}  // namespace

TEST_CASE("a step reports the positions, live batch and lengths prepare was given", "[step]") {
  HybridCache cache(two_types());
  const at::Tensor per_row = positions(2, {0, 1, 2, 0, 1, -1});
  const StepPlan a = cache.prepare(per_row, 2);
  CHECK(at::equal(a.positions(), per_row));
  CHECK(a.live_batch() == 2);
  CHECK(a.query_len() == 3);
  CHECK(a.attend_len() == 16);  // the default: max_len
  CHECK(a.per_row());
  const at::Tensor shared = positions({3});
  const StepPlan b = cache.prepare(shared, 1, /*attend_len=*/8);
  CHECK(at::equal(b.positions(), shared));
  CHECK(b.positions().sizes() == at::IntArrayRef({1}));
  CHECK(b.live_batch() == 1);
  CHECK(b.query_len() == 1);
  CHECK(b.attend_len() == 8);
  CHECK_FALSE(b.per_row());
}

TEST_CASE("write_slots gives each layer's slots and sends what is not stored to scratch",
          "[step]") {
  HybridCache cache(two_types());
  const StepPlan step = cache.prepare(positions(2, {5, 6, 7, 0, -1, 1}), 2);
  CHECK(at::equal(step.write_slots(0), positions(2, {5, 0, 1, 0, 6, 1})));   // p % 6, pad: 6
  CHECK(at::equal(step.write_slots(1), positions(2, {5, 6, 7, 0, 16, 1})));  // p, pad: 16
  const StepPlan shared = cache.prepare(positions({8, 9}), 2);
  CHECK(at::equal(shared.write_slots(0), positions({2, 3})));  // [q] when positions are [q]
  CHECK(at::equal(shared.write_slots(1), positions({8, 9})));
  // Unchecked host positions past max_len are routed to the scratch slot.
  CacheConfig unchecked = two_types();
  unchecked.check_position_values = false;
  HybridCache routed(unchecked);
  const StepPlan past = routed.prepare(positions({15, 16}), 1);
  CHECK(at::equal(past.write_slots(0), positions({3, 6})));
  CHECK(at::equal(past.write_slots(1), positions({15, 16})));
  require_error([&] { step.write_slots(2); }, {"layer", "[0, 2)", "got 2"});
}

TEST_CASE("view_len is attend_len for full layers and the ring's capacity for sliding ones",
          "[step]") {
  HybridCache cache(two_types());
  const StepPlan bounded = cache.prepare(positions({0, 1}), 2, /*attend_len=*/8);
  CHECK(bounded.view_len(0) == 6);
  CHECK(bounded.view_len(1) == 8);
  const StepPlan unbounded = cache.prepare(positions({2}), 2);
  CHECK(unbounded.view_len(0) == 6);
  CHECK(unbounded.view_len(1) == 16);
  require_error([&] { unbounded.view_len(-1); }, {"layer", "got -1"});
}

TEST_CASE("mask lets a query see stored positions up to its own and within the window",
          "[step][mask]") {
  HybridCache cache(two_types());
  const StepPlan prefill = cache.prepare(positions(2, {0, 1, 2, 0, 1, -1}), 2, /*attend_len=*/4);
  CHECK(prefill.mask(1).sizes() == at::IntArrayRef({2, 1, 3, 4}));
  CHECK(prefill.mask(1).scalar_type() == at::kBool);
  CHECK(at::equal(prefill.mask(1)[0][0], rows_of(3, {1, 0, 0, 0, 1, 1, 0, 0, 1, 1, 1, 0})));
  // Row 1's padded query sees nothing.
  CHECK(at::equal(prefill.mask(1)[1][0], rows_of(3, {1, 0, 0, 0, 1, 1, 0, 0, 0, 0, 0, 0})));
  CHECK(prefill.mask(0).sizes() == at::IntArrayRef({2, 1, 3, 6}));  // the whole ring
  // Row 0 at position 4 (3 skipped): the full layer sees 0, 1, 2 and 4; the
  // sliding layer only 4 - p < 4, so 1, 2 and 4 (ring slots 1, 2, 4).
  const StepPlan decode = cache.prepare(positions(2, {4, 2}), 2, /*attend_len=*/8);
  CHECK(at::equal(decode.mask(1)[0][0], rows_of(1, {1, 1, 1, 0, 1, 0, 0, 0})));
  CHECK(at::equal(decode.mask(0)[0][0], rows_of(1, {0, 1, 1, 0, 1, 0})));
  CHECK(at::equal(decode.mask(0)[1][0], rows_of(1, {1, 1, 1, 0, 0, 0})));  // 0, 1 and 2
  require_error([&] { decode.mask(2); }, {"layer", "got 2"});
}

TEST_CASE("additive_mask is the step's mask as 0 or the cache dtype's lowest finite value",
          "[step][mask]") {
  HybridCache cache(ConfigBuilder().max_batch(2).dtype(at::kHalf).hybrid(4, 3));
  const StepPlan step = cache.prepare(positions(2, {0, 1, 2, 0, 1, -1}), 2);
  for (int64_t l : {0, 1}) {
    INFO("layer " << l);
    const at::Tensor& additive = step.additive_mask(l);
    CHECK(additive.scalar_type() == at::kHalf);
    CHECK(additive.sizes() == step.mask(l).sizes());
    const at::Tensor expected =
        at::where(step.mask(l), at::zeros({}, at::kHalf), at::full({}, -65504.0, at::kHalf));
    CHECK(at::equal(additive, expected));
  }
  require_error([&] { step.additive_mask(3); }, {"layer", "got 3"});
}

TEST_CASE("a held step's masks describe its own state after later steps and row operations",
          "[step][mask]") {
  CacheConfig eager_config = two_types();
  eager_config.eager_masks = true;
  HybridCache lazy(two_types()), eager(eager_config);
  const at::Tensor first = positions(2, {0, 1, 2, 0, 1, -1});
  const StepPlan held = lazy.prepare(first, 2);
  const StepPlan built = eager.prepare(first, 2);  // masks built in prepare()
  lazy.prepare(positions(2, {3, 2}), 2);           // the cache moves on, then a row operation
  lazy.reset_rows(positions({0}));
  for (int64_t l : {0, 1}) {
    INFO("layer " << l);
    CHECK(at::equal(held.mask(l), built.mask(l)));
    CHECK(at::equal(held.additive_mask(l), built.additive_mask(l)));
  }
  require_error([] { StepPlan().write_slots(0); }, {"step", "default-constructed"});
}
