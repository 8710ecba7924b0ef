// Bad input to the cache's entry points (prepare, update, attend, the row
// operations, steps that went stale): every one is rejected with a c10::Error
// naming the argument, the expected and the actual value, before anything is
// written. Inputs the device routes instead of rejecting (position values)
// are pinned here too: they must land in the scratch slot, never outside a
// buffer. Config validation, the mask and attention helpers, ShapeBuckets
// and GraphRunner have their own files (test_bad_input_*.cpp); checkpoint
// loading is pinned in tests/model/test_checkpoint.cpp.

#include "bad_input.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <new>

using namespace statickv;
using namespace statickv::test;
using namespace statickv::test::bad_input;

namespace {

// Bad calls of prepare().
std::vector<BadCall> prepare_calls() {
  return {
      // prepare
      {"live_batch 0",
       [](Cache& c, const StepPlan&) { c.prepare(positions({3}), 0); },
       {"live_batch", "[1, max_batch=3]", "got 0"}},
      {"live_batch > max_batch",
       [](Cache& c, const StepPlan&) { c.prepare(positions({3}), 4); },
       {"live_batch", "got 4"}},
      {"positions undefined",
       [](Cache& c, const StepPlan&) { c.prepare(at::Tensor(), 3); },
       {"cache_position", "undefined"}},
      {"positions int32",
       [](Cache& c, const StepPlan&) { c.prepare(positions({3}).to(at::kInt), 3); },
       {"cache_position", "Long", "Int"}},
      {"positions float",
       [](Cache& c, const StepPlan&) { c.prepare(positions({3}).to(at::kFloat), 3); },
       {"cache_position", "Float"}},
      {"positions rank 3",
       [](Cache& c, const StepPlan&) {
         c.prepare(at::zeros({3, 1, 1}, i64()), 3);
       },
       {"cache_position", "[q] or [live_batch, q]", "[3, 1, 1]"}},
      {"positions rows != live_batch",
       [](Cache& c, const StepPlan&) {
         c.prepare(at::zeros({2, 1}, i64()), 3);
       },
       {"cache_position", "3 rows", "[2, 1]"}},
      {"positions empty",
       [](Cache& c, const StepPlan&) { c.prepare(at::zeros({0}, i64()), 3); },
       {"cache_position", "between 1 and max_chunk", "got 0"}},
      {"chunk longer than max_chunk",
       [](Cache& c, const StepPlan&) { c.prepare(arange_positions(3, 5), 3); },
       {"cache_position", "max_chunk=4", "got 5"}},
      {"position past max_len",
       [](Cache& c, const StepPlan&) { c.prepare(positions({16}), 3); },
       {"cache_position[0, 0]", "< ", "got 16"}},
      {"position past attend_len",
       [](Cache& c, const StepPlan&) { c.prepare(positions({8}), 3, 8); },
       {"cache_position[0, 0]", "attend_len=8", "got 8"}},
      {"attend_len 0",
       [](Cache& c, const StepPlan&) { c.prepare(positions({3}), 3, 0); },
       {"attend_len", "max_len=16", "got 0"}},
      {"attend_len > max_len",
       [](Cache& c, const StepPlan&) { c.prepare(positions({3}), 3, 17); },
       {"attend_len", "got 17"}},
      {"live_batch negative",
       [](Cache& c, const StepPlan&) { c.prepare(positions({3}), -1); },
       {"live_batch", "[1, max_batch=3]", "got -1"}},
      {"positions on another device",
       [](Cache& c, const StepPlan&) { c.prepare(at::zeros({1}, on_meta(at::kLong)), 3); },
       {"cache_position", "device cpu", "meta"}},
      {"positions sparse",
       [](Cache& c, const StepPlan&) { c.prepare(positions({3}).to_sparse(), 3); },
       {"cache_position", "strided", "Sparse"}},
      {"positions [b, 0]",
       [](Cache& c, const StepPlan&) {
         c.prepare(at::zeros({3, 0}, i64()), 3);
       },
       {"cache_position", "between 1 and max_chunk", "got 0"}},
      {"positions [0, q]",
       [](Cache& c, const StepPlan&) {
         c.prepare(at::zeros({0, 1}, i64()), 3);
       },
       {"cache_position", "3 rows", "[0, 1]"}},
      {"position far past max_len",
       [](Cache& c, const StepPlan&) { c.prepare(positions({kMax}), 3); },
       {"cache_position[0, 0]", "< ", "got 9223372036854775807"}},
      {"per-row position past max_len",
       [](Cache& c, const StepPlan&) {
         c.prepare(positions(3, {3, 4, 16}), 3);
       },
       {"cache_position[2, 0]", "< ", "got 16"}},
      {"attend_len -2",
       [](Cache& c, const StepPlan&) { c.prepare(positions({3}), 3, -2); },
       {"attend_len", "-1 (max_len)", "got -2"}},
  };
}

// Bad calls of update(); `kv` (a good key and value) outlives the calls.
std::vector<BadCall> update_calls(const at::Tensor& kv) {
  return {
      // update
      {"layer -1",
       [&](Cache& c, const StepPlan& step) { c.update(-1, kv, kv, step); },
       {"layer", "[0, ", "got -1"}},
      {"layer out of range",
       [&](Cache& c, const StepPlan& step) { c.update(c.num_layers(), kv, kv, step); },
       {"layer", "got"}},
      {"key wrong dtype",
       [&](Cache& c, const StepPlan& step) { c.update(0, kv.to(at::kDouble), kv, step); },
       {"key", "dtype Float", "Double"}},
      {"value wrong dtype",
       [&](Cache& c, const StepPlan& step) { c.update(0, kv, kv.to(at::kHalf), step); },
       {"value", "dtype Float", "Half"}},
      {"key rank 3",
       [&](Cache& c, const StepPlan& step) { c.update(0, kv.squeeze(2), kv, step); },
       {"key", "[3, 2, 1, 4]", "[3, 2, 4]"}},
      {"key wrong batch",
       [&](Cache& c, const StepPlan& step) { c.update(0, kv.narrow(0, 0, 2), kv, step); },
       {"key", "[3, 2, 1, 4]", "[2, 2, 1, 4]"}},
      {"key wrong q",
       [&](Cache& c, const StepPlan& step) {
         c.update(0, at::zeros({3, 2, 2, 4}), kv, step);
       },
       {"key", "got [3, 2, 2, 4]"}},
      {"value wrong head_dim",
       [&](Cache& c, const StepPlan& step) {
         c.update(0, kv, at::zeros({3, 2, 1, 5}), step);
       },
       {"value", "got [3, 2, 1, 5]"}},
      {"key undefined",
       [&](Cache& c, const StepPlan& step) { c.update(0, at::Tensor(), kv, step); },
       {"key", "undefined"}},
      {"step of another cache",
       [&](Cache& c, const StepPlan&) {
         StaticCache other(config_for({LayerType::kFull}));
         c.update(0, kv, kv, other.prepare(positions({0}), 3));
       },
       {"step", "this cache", "another cache"}},
      {"default-constructed step",
       [&](Cache& c, const StepPlan&) { c.update(0, kv, kv, StepPlan()); },
       {"step", "this cache", "default-constructed"}},
      {"key on another device",
       [&](Cache& c, const StepPlan& step) {
         c.update(0, at::zeros({3, 2, 1, 4}, on_meta(at::kFloat)), kv, step);
       },
       {"key", "device cpu", "meta"}},
      {"value sparse",
       [&](Cache& c, const StepPlan& step) { c.update(0, kv, kv.to_sparse(), step); },
       {"value", "strided", "Sparse"}},
      {"key empty",
       [&](Cache& c, const StepPlan& step) {
         c.update(0, at::zeros({0, 2, 1, 4}), kv, step);
       },
       {"key", "[3, 2, 1, 4]", "got [0, 2, 1, 4]"}},
      {"key a view of the layer's own key buffer",
       [&](Cache& c, const StepPlan& step) { c.update(1, c.keys(1).narrow(2, 0, 1), kv, step); },
       {"key", "not share memory", "layer 1", "a view of them"}},
      {"value a view of the layer's key buffer",
       [&](Cache& c, const StepPlan& step) { c.update(0, kv, c.keys(0).narrow(2, 3, 1), step); },
       {"value", "not share memory", "layer 0"}},
      {"key requires grad",
       [&](Cache& c, const StepPlan& step) {
         c.update(0, at::zeros({3, 2, 1, 4}).requires_grad_(), kv, step);
       },
       {"key", "not require grad", "NoGradGuard", "requires_grad=true"}},
  };
}

// Bad calls of the step's and the cache's accessors, reset_rows and copy_row.
std::vector<BadCall> accessor_and_row_calls() {
  return {
      // the step's own accessors
      {"step.mask layer -1",
       [](Cache&, const StepPlan& step) { step.mask(-1); },
       {"layer", "[0, 2)", "got -1"}},
      {"step.write_slots layer out of range",
       [](Cache&, const StepPlan& step) { step.write_slots(2); },
       {"layer", "[0, 2)", "got 2"}},
      {"step.view_len layer out of range",
       [](Cache&, const StepPlan& step) { step.view_len(kMax); },
       {"layer", "got 9223372036854775807"}},
      // the cache's accessors
      {"keys layer -1",
       [](Cache& c, const StepPlan&) { c.keys(-1); },
       {"layer", "[0, 2)", "got -1"}},
      {"values layer 2", [](Cache& c, const StepPlan&) { c.values(2); }, {"layer", "got 2"}},
      {"capacity layer 2", [](Cache& c, const StepPlan&) { c.capacity(2); }, {"layer", "got 2"}},
      {"layer policy -5", [](Cache& c, const StepPlan&) { c.layer(-5); }, {"layer", "got -5"}},
      {"slot_positions layer 9",
       [](Cache& c, const StepPlan&) { c.slot_positions(9); },
       {"layer", "got 9"}},
      // row operations
      {"reset_rows out of range",
       [](Cache& c, const StepPlan&) {
         c.reset_rows(positions({0, 3}));
       },
       {"rows[1]", "[0, max_batch=3)", "got 3"}},
      {"reset_rows negative",
       [](Cache& c, const StepPlan&) { c.reset_rows(positions({-1})); },
       {"rows[0]", "got -1"}},
      {"reset_rows duplicated",
       [](Cache& c, const StepPlan&) {
         c.reset_rows(positions({1, 1}));
       },
       {"rows[1]", "distinct", "1 twice"}},
      {"reset_rows empty",
       [](Cache& c, const StepPlan&) { c.reset_rows(at::zeros({0}, i64())); },
       {"rows", "between 1 and max_batch=3", "got 0"}},
      {"reset_rows too many",
       [](Cache& c, const StepPlan&) {
         c.reset_rows(positions({0, 1, 2, 0}));
       },
       {"rows", "got 4"}},
      {"reset_rows float",
       [](Cache& c, const StepPlan&) { c.reset_rows(at::zeros({1})); },
       {"rows", "Long", "Float"}},
      {"reset_rows rank 2",
       [](Cache& c, const StepPlan&) {
         c.reset_rows(at::zeros({1, 1}, i64()));
       },
       {"rows", "1-D", "[1, 1]"}},
      {"copy_row src", [](Cache& c, const StepPlan&) { c.copy_row(3, 0); }, {"src", "got 3"}},
      {"copy_row dst", [](Cache& c, const StepPlan&) { c.copy_row(0, -2); }, {"dst", "got -2"}},
  };
}

// Bad calls of reorder() and more row operations.
std::vector<BadCall> reorder_calls() {
  return {
      {"reorder out of range",
       [](Cache& c, const StepPlan&) {
         c.reorder(positions({0, 5}));
       },
       {"indices[1]", "got 5"}},
      {"reorder too long",
       [](Cache& c, const StepPlan&) {
         c.reorder(positions({0, 1, 2, 0}));
       },
       {"indices", "max_batch=3", "got 4"}},
      {"reorder int32",
       [](Cache& c, const StepPlan&) { c.reorder(positions({0}).to(at::kInt)); },
       {"indices", "Long", "Int"}},
      {"reset_rows undefined",
       [](Cache& c, const StepPlan&) { c.reset_rows(at::Tensor()); },
       {"rows", "defined", "undefined"}},
      {"reset_rows on meta",
       [](Cache& c, const StepPlan&) { c.reset_rows(at::zeros({1}, on_meta(at::kLong))); },
       {"rows", "with data", "meta"}},
      {"reset_rows sparse",
       [](Cache& c, const StepPlan&) { c.reset_rows(positions({0}).to_sparse()); },
       {"rows", "strided", "Sparse"}},
      {"reset_rows duplicated far apart",
       [](Cache& c, const StepPlan&) {
         c.reset_rows(positions({2, 0, 2}));
       },
       {"rows[2]", "distinct", "2 twice"}},
      {"copy_row src far past max_batch",
       [](Cache& c, const StepPlan&) { c.copy_row(kMax, 0); },
       {"src", "[0, max_batch=3)", "got 9223372036854775807"}},
      {"copy_row dst past max_batch",
       [](Cache& c, const StepPlan&) { c.copy_row(1, 3); },
       {"dst", "[0, max_batch=3)", "got 3"}},
      {"reorder empty",
       [](Cache& c, const StepPlan&) { c.reorder(at::zeros({0}, i64())); },
       {"indices", "between 1 and max_batch=3", "got 0"}},
      {"reorder negative",
       [](Cache& c, const StepPlan&) {
         c.reorder(positions({1, kMin}));
       },
       {"indices[1]", "[0, max_batch=3)", "got -9223372036854775808"}},
      {"reorder rank 2",
       [](Cache& c, const StepPlan&) {
         c.reorder(at::zeros({2, 1}, i64()));
       },
       {"indices", "1-D", "[2, 1]"}},
      {"reorder undefined",
       [](Cache& c, const StepPlan&) { c.reorder(at::Tensor()); },
       {"indices", "defined", "undefined"}},
  };
}

// Bad calls of rollback(), save_row() and restore_row().
std::vector<BadCall> rollback_and_state_calls() {
  return {
      // rollback (fill() and the planned step leave every row at seq_length 4)
      {"rollback float",
       [](Cache& c, const StepPlan&) { c.rollback(at::zeros({1})); },
       {"new_lengths", "Long", "Float"}},
      {"rollback rank 2",
       [](Cache& c, const StepPlan&) {
         c.rollback(at::zeros({1, 1}, i64()));
       },
       {"new_lengths", "[live_batch]", "[1, 1]"}},
      {"rollback empty",
       [](Cache& c, const StepPlan&) { c.rollback(at::zeros({0}, i64())); },
       {"new_lengths", "between 1 and max_batch=3", "got 0"}},
      {"rollback too many",
       [](Cache& c, const StepPlan&) {
         c.rollback(std::vector<int64_t>{1, 1, 1, 1});
       },
       {"new_lengths", "max_batch=3", "got 4"}},
      {"rollback past seq_length",
       [](Cache& c, const StepPlan&) {
         c.rollback(positions({2, 5}));
       },
       {"new_lengths[1]", "[0, seq_length=4]", "got 5"}},
      {"rollback negative (host form)",
       [](Cache& c, const StepPlan&) { c.rollback(std::vector<int64_t>{kMin}); },
       {"new_lengths[0]", "[0, seq_length=4]", "got -9223372036854775808"}},
      {"rollback on meta",
       [](Cache& c, const StepPlan&) { c.rollback(at::zeros({1}, on_meta(at::kLong))); },
       {"new_lengths", "device cpu", "meta"}},
      // row save/restore (state fit: tests/core/test_row_state.cpp)
      {"save_row row past max_batch",
       [](Cache& c, const StepPlan&) { c.save_row(3); },
       {"row", "[0, max_batch=3)", "got 3"}},
      {"restore_row row negative",
       [](Cache& c, const StepPlan&) { c.restore_row(c.save_row(0), -1); },
       {"row", "[0, max_batch=3)", "got -1"}},
      {"restore_row state of no layers",
       [](Cache& c, const StepPlan&) { c.restore_row(RowState{}, 0); },
       {"state", "num_layers=2", "got 0, 0, 0 and 0"}},
      {"rollback undefined",
       [](Cache& c, const StepPlan&) { c.rollback(at::Tensor()); },
       {"new_lengths", "defined", "undefined"}},
  };
}

}  // namespace

TEST_CASE("every bad argument raises a named error and leaves the cache bit-identical",
          "[errors]") {
  const at::Tensor kv = at::zeros({3, 2, 1, 4});
  std::vector<BadCall> calls;
  for (std::vector<BadCall> group : {prepare_calls(), update_calls(kv), accessor_and_row_calls(),
                                     reorder_calls(), rollback_and_state_calls()}) {
    calls.insert(calls.end(), group.begin(), group.end());
  }
  const std::vector<std::pair<const char*, std::vector<LayerType>>> layouts = {
      {"static", {LayerType::kFull, LayerType::kFull}},
      {"hybrid", {LayerType::kSliding, LayerType::kFull}},
  };
  for (const auto& [name, types] : layouts) {
    const CacheConfig config = config_for(types).max_chunk(4);
    std::unique_ptr<Cache> cache;
    if (std::string(name) == "static") {
      cache = std::make_unique<StaticCache>(config);
    } else {
      cache = std::make_unique<HybridCache>(config);
    }
    fill(*cache);
    for (const BadCall& bad : calls) {
      // The step is planned before the snapshot: only the bad call is judged.
      const StepPlan step = cache->prepare(positions({3}), 3);
      const Snapshot before(*cache);
      INFO(name << ": " << bad.what);
      require_error([&] { bad.call(*cache, step); }, bad.fragments);
      CHECK(before.same_as(*cache));
    }
  }
}

TEST_CASE("a sliding cache rejects host positions spanning more than max_chunk", "[errors]") {
  HybridCache cache(config_for({LayerType::kSliding}).max_chunk(4));
  fill(cache);
  const Snapshot before(cache);
  require_error(
      [&] {
        cache.prepare(positions(3, {3, 7, 4, 5, -1, 6}), 3);
      },
      {"cache_position[0]", "span at most max_chunk=4", "3..7"});
  CHECK(before.same_as(cache));
}

TEST_CASE("a stale step is refused after prepare, reset and every row operation",
          "[errors][step]") {
  const at::Tensor kv = at::zeros({3, 2, 1, 4});
  const std::vector<std::pair<const char*, std::function<void(Cache&)>>> invalidators = {
      {"prepare", [](Cache& c) { c.prepare(positions({3}), 3); }},
      {"reset", [](Cache& c) { c.reset(); }},
      {"reset_rows", [](Cache& c) { c.reset_rows(positions({1})); }},
      {"copy_row", [](Cache& c) { c.copy_row(0, 2); }},
      {"copy_row onto itself", [](Cache& c) { c.copy_row(1, 1); }},
      {"rollback",
       [](Cache& c) {
         c.rollback(positions({2, 3, 4}));
       }},
      {"reorder",
       [](Cache& c) {
         c.reorder(positions({2, 1, 0}));
       }},
  };
  for (const auto& [name, invalidate] : invalidators) {
    HybridCache cache(config_for({LayerType::kSliding, LayerType::kFull}));
    fill(cache);
    const StepPlan old = cache.prepare(positions({3}), 3);
    invalidate(cache);
    const Snapshot before(cache);
    INFO(name);
    require_error([&] { cache.update(0, kv, kv, old); }, {"step", "current step", "stale"});
    CHECK(before.same_as(cache));
  }
}

TEST_CASE("a step of a destroyed cache is refused by a new cache built at its address",
          "[errors][step]") {
  // The same storage for both caches, as an allocator reusing a freed block
  // would give: identity by address alone would accept the old step, whose
  // slots index a 64-slot buffer, in a 16-slot one.
  alignas(HybridCache) unsigned char storage[sizeof(HybridCache)];
  const CacheConfig big = config_for({LayerType::kFull}).max_len(64);
  auto* first = new (storage) HybridCache(big);
  const StepPlan old = first->prepare(positions({40}), 3);
  first->~HybridCache();
  auto* second = new (storage) HybridCache(config_for({LayerType::kFull}));
  second->prepare(positions({0}), 3);
  const Snapshot before(*second);
  require_error(
      [&] {
        second->update(0, at::zeros({3, 2, 1, 4}), at::zeros({3, 2, 1, 4}), old);
      },
      {"step", "stale"});
  CHECK(before.same_as(*second));
  second->~HybridCache();
}

TEST_CASE("a step that outlives its cache still answers its accessors", "[errors][step]") {
  StepPlan step;
  {
    HybridCache cache(config_for({LayerType::kSliding, LayerType::kFull}));
    step = cache.prepare(positions({0, 1}), 2);
  }
  CHECK(step.mask(0).sizes() == at::IntArrayRef({2, 1, 2, 7}));  // ring of 4 + 4 - 1
  CHECK(step.mask(1).sizes() == at::IntArrayRef({2, 1, 2, 16}));
  CHECK(at::equal(step.write_slots(1), positions({0, 1})));
  CHECK(step.view_len(0) == 7);
}

TEST_CASE("a default-constructed step names itself instead of crashing", "[errors][step]") {
  const StepPlan empty;
  require_error([&] { empty.mask(0); }, {"step", "made by prepare()", "default-constructed"});
  require_error([&] { empty.write_slots(0); }, {"step", "default-constructed"});
  require_error([&] { empty.view_len(0); }, {"step", "default-constructed"});
}

TEST_CASE("non-contiguous positions, keys, values and rows act like contiguous copies",
          "[errors][layout]") {
  const CacheConfig c = config_for({LayerType::kSliding, LayerType::kFull});
  HybridCache dense(c);
  HybridCache strided(c);
  at::manual_seed(3);
  // [q, b] transposed to [b, q]; keys [b, q, H, D] permuted to [b, H, q, D].
  const at::Tensor pos_t = positions(2, {0, 0, 5, 1, 1, -1}).t();
  const at::Tensor key_t = at::randn({3, 2, 2, 4}).permute({0, 2, 1, 3});
  const at::Tensor value_t = at::randn({3, 4, 2, 2}).permute({0, 3, 2, 1});
  REQUIRE_FALSE(pos_t.is_contiguous());
  REQUIRE_FALSE(key_t.is_contiguous());
  REQUIRE_FALSE(value_t.is_contiguous());
  StepPlan a = dense.prepare(pos_t.contiguous(), 3);
  StepPlan b = strided.prepare(pos_t, 3);
  for (int64_t l = 0; l < 2; ++l) {
    dense.update(l, key_t.contiguous(), value_t.contiguous(), a);
    strided.update(l, key_t, value_t, b);
  }
  CHECK(Snapshot(dense).same_as(strided));
  const at::Tensor rows = positions({2, 9, 0}).slice(0, 0, 3, 2);  // {2, 0}, stride 2
  REQUIRE_FALSE(rows.is_contiguous());
  dense.reset_rows(rows.contiguous());
  strided.reset_rows(rows);
  dense.reorder(rows.contiguous());
  strided.reorder(rows);
  CHECK(Snapshot(dense).same_as(strided));
}

TEST_CASE("device-routed positions that cannot be stored go to the scratch slot",
          "[errors][routing]") {
  // As on CUDA: position values are never read on the host, so nothing is
  // rejected; every index a kernel sees must still be inside its buffer.
  const CacheConfig c =
      config_for({LayerType::kSliding, LayerType::kFull}).max_len(32).check_position_values(false);
  HybridCache cache(c);
  REQUIRE(cache.capacity(0) == 7);  // window 4 + chunk 4 - 1
  const at::Tensor pos = positions(3, {
                                          kMax, kMin, 32, -1,  // nothing storable
                                          0, 0, 0, 0,          // one position four times
                                          1, 8, 15, 3,         // 1, 8, 15 share ring slot 1
                                      });
  const StepPlan step = cache.prepare(pos, 3);
  const at::Tensor key = at::arange(3 * 2 * 4 * 4, f32()).view({3, 2, 4, 4});
  cache.update(0, key, key, step);
  cache.update(1, key, key, step);
  CHECK(at::equal(step.write_slots(0), positions(3, {7, 7, 7, 7, 7, 7, 7, 0, 7, 7, 1, 3})));
  CHECK(at::equal(step.write_slots(1), positions(3, {32, 32, 32, 32, 32, 32, 32, 0, 1, 8, 15, 3})));
  CHECK(at::equal(cache.seq_lengths(), positions({0, 1, 16})));
  CHECK(at::equal(cache.slot_positions(0)[0], at::full({7}, -1, i64())));
  CHECK(at::equal(cache.slot_positions(0)[2], positions({-1, 15, -1, 3, -1, -1, -1})));
  // Ties go to the later token: row 1 keeps its fourth key at position 0.
  CHECK(at::equal(cache.keys(1)[1].select(1, 0), key[1].select(1, 3)));
  // Nothing storable attends to anything.
  CHECK_FALSE(step.mask(1)[0].any().item<bool>());
}
