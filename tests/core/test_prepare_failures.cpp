// prepare() is all or nothing (Note [prepare is all or nothing],
// include/statickv/cache.hpp): a call that throws, wherever it throws,
// leaves the buffers, the bookkeeping and the validity of earlier Steps as
// they were; and positions are the caller's own, never a view of the
// bookkeeping prepare() advances.

#include "support.hpp"

#include <statickv/detail/prepare_fault.hpp>

#include <c10/core/InferenceMode.h>

#include <stdexcept>

namespace {

using namespace statickv;
using statickv::test::positions;
using statickv::test::require_error;
using statickv::test::Snapshot;

CacheConfig hybrid_config() {
  return statickv::test::ConfigBuilder().head_dim(4).max_batch(2).hybrid(/*window=*/4, /*chunk=*/4);
}

/// Installs a fault hook that throws at one point, for one scope.
class FaultAt {
 public:
  explicit FaultAt(statickv::detail::PreparePoint point) {
    statickv::detail::prepare_fault_hook() = [point](statickv::detail::PreparePoint at) {
      if (at == point) throw std::runtime_error("injected fault");
    };
  }
  ~FaultAt() { statickv::detail::prepare_fault_hook() = nullptr; }
  FaultAt(const FaultAt&) = delete;
  FaultAt& operator=(const FaultAt&) = delete;
};

const statickv::detail::PreparePoint kPoints[] = {
    statickv::detail::PreparePoint::kBeforeBookkeeping,
    statickv::detail::PreparePoint::kAfterSeqLengths,
    statickv::detail::PreparePoint::kAfterSlotPositions,
    statickv::detail::PreparePoint::kAfterMasks};

void write_step(Cache& cache, const StepPlan& step) {
  const at::Tensor k =
      at::randn({step.live_batch(), 2, step.query_len(), 4}, at::TensorOptions().dtype(at::kFloat));
  for (int64_t layer = 0; layer < cache.num_layers(); ++layer) {
    cache.update(layer, k, k.neg(), step);
  }
}

}  // namespace

TEST_CASE("a prepare() that throws at any point changes nothing and keeps the last StepPlan valid",
          "[cache][prepare]") {
  for (statickv::detail::PreparePoint point : kPoints) {
    for (bool per_row : {false, true}) {
      INFO("fault point " << static_cast<int>(point) << ", per-row positions " << per_row);
      HybridCache cache(hybrid_config());
      write_step(cache, cache.prepare(positions(2, {0, 1, 0, 1}), 2));
      const StepPlan last = cache.prepare(positions(2, {2, 3, 2, -1}), 2);
      const Snapshot before(cache);
      {
        FaultAt fault(point);
        const at::Tensor next = per_row ? positions(2, {4, 5, 3, 4}) : positions({4, 5});
        CHECK_THROWS_WITH(cache.prepare(next, 2), "injected fault");
      }
      CHECK(before.same_as(cache));
      // The StepPlan made before the failed call still writes.
      CHECK_NOTHROW(write_step(cache, last));
      // And the cache goes on as if the failed call never happened.
      const StepPlan after = cache.prepare(positions(2, {4, 5, 3, 4}), 2);
      CHECK_NOTHROW(write_step(cache, after));
      CHECK(at::equal(cache.seq_lengths(), positions({6, 5})));
    }
  }
}

// Note [decode prepare]: one query a row is planned by one kernel, the
// step's only write; every fault point comes before it.
TEST_CASE("a decode prepare() that fails at any point changes nothing",
          "[cache][decode_prepare][prepare]") {
  for (statickv::detail::PreparePoint point : kPoints) {
    for (bool per_row : {false, true}) {
      INFO("fault point " << static_cast<int>(point) << ", per-row positions " << per_row);
      HybridCache cache(hybrid_config());
      const StepPlan last = cache.prepare(positions(2, {0, 0}), 2);
      write_step(cache, last);
      const Snapshot before(cache);
      {
        FaultAt fault(point);
        CHECK_THROWS_WITH(cache.prepare(per_row ? positions(2, {1, -1}) : positions({1}), 2),
                          "injected fault");
      }
      CHECK(before.same_as(cache));
      CHECK_NOTHROW(write_step(cache, last));
    }
  }
}

TEST_CASE("prepare() refuses positions that are a view of the cache's bookkeeping",
          "[cache][prepare]") {
  HybridCache cache(hybrid_config());
  write_step(cache, cache.prepare(positions(2, {0, 1, 0, -1}), 2));
  const Snapshot before(cache);
  const at::Tensor aliased = cache.seq_lengths().narrow(0, 0, 2).view({2, 1});
  require_error([&] { cache.prepare(aliased, 2); },
                {"cache_position", "seq_lengths()", "does not share memory", "clone()"});
  require_error(
      [&] {
        cache.prepare(cache.slot_positions(0).narrow(1, 0, 1).view({2, 1}), 2);
      },
      {"cache_position", "slot_positions()"});
  CHECK(before.same_as(cache));
  // A copy is the caller's own: prepare() advances seq_lengths, not it.
  const at::Tensor copy = aliased.clone();
  const StepPlan step = cache.prepare(copy, 2);
  CHECK(at::equal(copy, positions(2, {2, 1})));
  CHECK(at::equal(step.positions(), positions(2, {2, 1})));
  CHECK(at::equal(cache.seq_lengths(), positions({3, 2})));
}

TEST_CASE("a cache built under InferenceMode gets statickv's own error when used outside it",
          "[cache][prepare]") {
  std::unique_ptr<HybridCache> cache;
  {
    c10::InferenceMode inference;
    cache = std::make_unique<HybridCache>(hybrid_config());
    write_step(*cache, cache->prepare(positions({0}), 2));
  }
  StepPlan last;
  {
    c10::InferenceMode inference;
    last = cache->prepare(positions({1}), 2);
  }
  const Snapshot before(*cache);
  const std::vector<std::string> message = {"c10::InferenceMode", "built under it", "off"};
  require_error([&] { cache->prepare(positions({2}), 2); }, message);
  require_error([&] { write_step(*cache, last); }, message);
  require_error([&] { cache->reset_rows(positions({0})); }, message);
  require_error([&] { cache->copy_row(0, 1); }, message);
  require_error([&] { cache->reorder(positions({1, 0})); }, message);
  require_error([&] { cache->reset(); }, message);
  CHECK(before.same_as(*cache));
  c10::InferenceMode inference;
  CHECK_NOTHROW(write_step(*cache, last));  // the last StepPlan is still the current one
}
