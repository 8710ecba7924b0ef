// Bad input: every entry point rejects it with a c10::Error naming the
// argument, the expected and the actual value, before anything is written.
// One matrix per entry point (config, cache steps and row operations, mask
// and attention helpers, ShapeBuckets, GraphRunner); checkpoint loading is
// pinned in test_checkpoint.cpp. Inputs the device routes instead of
// rejecting (position values) are pinned here too: they must land in the
// scratch slot, never outside a buffer.

#include "support.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <new>

using namespace statickv;
using namespace statickv::test;

namespace {

// The shape of every cache here: 2 kv heads of 4, 3 rows, 16 positions, window 4.
ConfigBuilder config_for(std::vector<LayerType> types) {
  return ConfigBuilder()
      .layer_types(std::move(types))
      .head_dim(4)
      .max_batch(3)
      .max_len(16)
      .sliding_window(4);
}

// A cache with some real content, so "nothing changed" is a strong claim.
void fill(Cache& cache) {
  at::manual_seed(9);
  StepPlan step = cache.prepare(arange_positions(0, 3), 3);
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    cache.update(l, at::randn({3, 2, 3, 4}), at::randn({3, 2, 3, 4}), step);
  }
}

struct BadCall {
  std::string what;
  std::function<void(Cache&, const StepPlan&)> call;
  std::vector<std::string> fragments;
};

// A bad call of an entry point that owns no cache.
struct Bad {
  std::string what;
  std::function<void()> call;
  std::vector<std::string> fragments;
};

void expect_errors(const std::vector<Bad>& cases) {
  for (const Bad& bad : cases) {
    INFO(bad.what);
    require_error(bad.call, bad.fragments);
  }
}

at::TensorOptions on_meta(at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(at::kMeta);
}

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

}  // namespace

TEST_CASE("every bad argument raises a named error and leaves the cache bit-identical",
          "[errors]") {
  const at::Tensor kv = at::zeros({3, 2, 1, 4});
  const std::vector<BadCall> calls = {
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
      // row save/restore (state fit: tests/test_row_state.cpp)
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

TEST_CASE("every impossible config is refused by validate, both constructors and the estimate",
          "[errors][config]") {
  const CacheConfig base = config_for({LayerType::kFull, LayerType::kFull});
  struct BadConfig {
    std::string what;
    std::function<void(CacheConfig&)> mutate;
    std::vector<std::string> fragments;
  };
  const std::vector<BadConfig> cases = {
      {"num_layers 0",
       [](CacheConfig& c) {
         c.num_layers = 0;
         c.layer_types.clear();
       },
       {"CacheConfig.num_layers", "> 0", "got 0"}},
      {"num_kv_heads negative",
       [](CacheConfig& c) { c.num_kv_heads = -2; },
       {"CacheConfig.num_kv_heads", "> 0", "got -2"}},
      {"head_dim 0", [](CacheConfig& c) { c.head_dim = 0; }, {"CacheConfig.head_dim", "got 0"}},
      {"max_batch negative",
       [](CacheConfig& c) { c.max_batch = kMin; },
       {"CacheConfig.max_batch", "> 0", "got -9223372036854775808"}},
      {"max_len 0", [](CacheConfig& c) { c.max_len = 0; }, {"CacheConfig.max_len", "got 0"}},
      {"max_len past 2^40",
       [](CacheConfig& c) { c.max_len = (int64_t{1} << 40) + 1; },
       {"CacheConfig.max_len", "<= 2^40", "got 1099511627777"}},
      {"dtype Int",
       [](CacheConfig& c) { c.dtype = at::kInt; },
       {"CacheConfig.dtype", "Float, Half, BFloat16 or Double", "Int"}},
      {"dtype Bool", [](CacheConfig& c) { c.dtype = at::kBool; }, {"CacheConfig.dtype", "Bool"}},
      {"device meta",
       [](CacheConfig& c) { c.device = at::Device(at::kMeta); },
       {"CacheConfig.device", "cpu or cuda", "meta"}},
      {"layer_types too short",
       [](CacheConfig& c) { c.layer_types = {LayerType::kFull}; },
       {"CacheConfig.layer_types", "num_layers (2)", "got 1"}},
      {"layer_types holds an unknown value",
       [](CacheConfig& c) { c.layer_types[1] = static_cast<LayerType>(7); },
       {"CacheConfig.layer_types[1]", "full or sliding", "got 7"}},
      {"sliding_window 0 with a sliding layer",
       [](CacheConfig& c) {
         c.layer_types[0] = LayerType::kSliding;
         c.sliding_window = 0;
       },
       {"CacheConfig.sliding_window", "> 0 when a layer is kSliding", "got 0"}},
      {"sliding_window negative without one",
       [](CacheConfig& c) { c.sliding_window = -1; },
       {"CacheConfig.sliding_window", ">= 0", "got -1"}},
      {"max_chunk negative",
       [](CacheConfig& c) { c.max_chunk = -1; },
       {"CacheConfig.max_chunk", "[0, max_len=16]", "got -1"}},
      {"max_chunk past max_len",
       [](CacheConfig& c) { c.max_chunk = 17; },
       {"CacheConfig.max_chunk", "got 17"}},
      {"newest-wins keys past int64",
       [](CacheConfig& c) { c.max_len = int64_t{1} << 40; },  // default chunk: max_len
       {"CacheConfig.max_chunk", "max_len * max_chunk < 2^63", "max_len=1099511627776",
        "(the default)"}},
      {"buffers past 2^63 bytes",
       [](CacheConfig& c) {
         c.max_batch = int64_t{1} << 40;
         c.num_kv_heads = int64_t{1} << 20;
       },
       {"CacheConfig", "< 2^63 bytes", "max_batch=1099511627776", "num_kv_heads=1048576"}},
      {"head_dim near int64 max",
       [](CacheConfig& c) { c.head_dim = kMax; },
       {"CacheConfig", "< 2^63 bytes", "head_dim=9223372036854775807"}},
      {"num_layers near int64 max",
       [](CacheConfig& c) {
         c.num_layers = kMax / 2;
         c.layer_types.clear();
       },
       {"CacheConfig", "< 2^63 bytes", "4611686018427387903 layers"}},
  };
  for (const BadConfig& bad : cases) {
    CacheConfig config = base;
    bad.mutate(config);
    INFO(bad.what);
    require_error([&] { config.validate(); }, bad.fragments);
    require_error([&] { HybridCache cache(config); }, bad.fragments);
    require_error([&] { estimate_memory_bytes(config); }, bad.fragments);
    if (!config.has_type(LayerType::kSliding) &&
        std::all_of(config.layer_types.begin(), config.layer_types.end(),
                    [](LayerType t) { return t == LayerType::kFull; })) {
      require_error([&] { StaticCache cache(config); }, bad.fragments);
    }
  }
  CacheConfig sliding = config_for({LayerType::kFull, LayerType::kSliding});
  require_error([&] { StaticCache cache(sliding); },
                {"StaticCache", "layer_types[1]", "expected full", "sliding"});
}

TEST_CASE("configs at the int64 limits are sized without overflow", "[errors][config]") {
  // A window wider than max_len: the ring holds every position.
  const CacheConfig c = config_for({LayerType::kSliding, LayerType::kFull}).sliding_window(kMax);
  CHECK_NOTHROW(c.validate());
  CHECK(c.sliding_capacity() == c.max_len);
  HybridCache cache(c);
  CHECK(cache.capacity(0) == 16);
  CHECK(cache.memory_bytes() == estimate_memory_bytes(c));

  // Positions up to 2^40, but a 7-slot ring.
  const CacheConfig ring = config_for({LayerType::kSliding}).max_len(int64_t{1} << 40).max_chunk(4);
  CHECK(ring.sliding_capacity() == 7);
  CHECK(estimate_memory_bytes(ring) == 3 * 8 + 2 * 3 * 2 * 8 * 4 * 4 + 3 * 8 * 8 + 3 * 2 * 8);
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

TEST_CASE("mask helpers name each bad argument", "[errors][mask]") {
  const at::Tensor mask = at::ones({2, 1, 3, 5}, at::kBool);
  const at::Tensor keep_k = at::ones({2, 5}, at::kBool);
  const at::Tensor keep_q = at::ones({2, 3}, at::kBool);
  expect_errors({
      {"additive: mask undefined",
       [&] { additive_mask(at::Tensor(), at::kFloat); },
       {"mask", "Bool", "undefined"}},
      {"additive: mask float",
       [&] { additive_mask(mask.to(at::kFloat), at::kFloat); },
       {"mask", "Bool", "Float"}},
      {"additive: dtype Int",
       [&] { additive_mask(mask, at::kInt); },
       {"dtype", "Half, BFloat16, Float or Double", "Int"}},
      {"additive: dtype Long", [&] { additive_mask(mask, at::kLong); }, {"dtype", "Long"}},
      {"fold_key: mask undefined",
       [&] { fold_key_padding(at::Tensor(), keep_k); },
       {"mask", "Bool", "undefined"}},
      {"fold_key: mask int",
       [&] { fold_key_padding(mask.to(at::kInt), keep_k); },
       {"mask", "Bool", "Int"}},
      {"fold_key: mask rank 3",
       [&] { fold_key_padding(mask.squeeze(1), keep_k); },
       {"mask", "[b, 1, q, kv]", "[2, 3, 5]"}},
      {"fold_key: keep undefined",
       [&] { fold_key_padding(mask, at::Tensor()); },
       {"key_keep", "Bool", "undefined"}},
      {"fold_key: keep float",
       [&] { fold_key_padding(mask, keep_k.to(at::kFloat)); },
       {"key_keep", "Bool", "Float"}},
      {"fold_key: keep short",
       [&] {
         fold_key_padding(mask, at::ones({2, 4}, at::kBool));
       },
       {"key_keep", "[2, 5]", "[2, 4]"}},
      {"fold_key: keep rank 1",
       [&] { fold_key_padding(mask, at::ones({5}, at::kBool)); },
       {"key_keep", "[2, 5]", "got [5]"}},
      {"fold_key: keep empty",
       [&] {
         fold_key_padding(mask, at::ones({0, 5}, at::kBool));
       },
       {"key_keep", "[2, 5]", "[0, 5]"}},
      {"fold_key: keep on meta",
       [&] {
         fold_key_padding(mask, at::ones({2, 5}, on_meta(at::kBool)));
       },
       {"key_keep", "device cpu", "meta"}},
      {"fold_query: mask float",
       [&] { fold_query_padding(mask.to(at::kFloat), keep_q); },
       {"mask", "Bool", "Float"}},
      {"fold_query: mask rank 5",
       [&] { fold_query_padding(mask.unsqueeze(0), keep_q); },
       {"mask", "[b, 1, q, kv]", "[1, 2, 1, 3, 5]"}},
      {"fold_query: keep undefined",
       [&] { fold_query_padding(mask, at::Tensor()); },
       {"query_keep", "Bool", "undefined"}},
      {"fold_query: keep long",
       [&] { fold_query_padding(mask, keep_q.to(at::kLong)); },
       {"query_keep", "Bool", "Long"}},
      {"fold_query: keep batch",
       [&] {
         fold_query_padding(mask, at::ones({3, 3}, at::kBool));
       },
       {"query_keep", "[2, 3]", "[3, 3]"}},
      {"fold_query: keep on meta",
       [&] {
         fold_query_padding(mask, at::ones({2, 3}, on_meta(at::kBool)));
       },
       {"query_keep", "device cpu", "meta"}},
  });
}

TEST_CASE("attention helpers name each bad argument", "[errors][attention]") {
  const at::Tensor q = at::zeros({2, 4, 3, 8});
  const at::Tensor k = at::zeros({2, 2, 5, 8});
  const at::Tensor mask = at::ones({2, 1, 3, 5}, at::kBool);
  using Attention =
      at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
  for (const auto& [name, attention] : std::vector<std::pair<const char*, Attention>>{
           {"reference", &reference_attention}, {"sdpa", &sdpa_attention}}) {
    INFO(name);
    const Attention f = attention;
    expect_errors({
        {"query undefined",
         [&] { f(at::Tensor(), k, k, mask); },
         {"query", "[b, heads, q, head_dim]", "got []"}},
        {"query rank 3",
         [&] { f(q[0], k, k, mask); },
         {"query", "[b, heads, q, head_dim]", "[4, 3, 8]"}},
        {"keys batch",
         [&] { f(q, k.narrow(0, 0, 1), k, mask); },
         {"keys", "[2, kv_heads, kv, 8]", "[1, 2, 5, 8]"}},
        {"keys head_dim",
         [&] {
           f(q, at::zeros({2, 2, 5, 7}), k, mask);
         },
         {"keys", "[2, kv_heads, kv, 8]", "[2, 2, 5, 7]"}},
        {"keys undefined", [&] { f(q, at::Tensor(), k, mask); }, {"keys", "got []"}},
        {"values shape",
         [&] { f(q, k, k.narrow(2, 0, 4), mask); },
         {"values", "[2, 2, 5, 8]", "[2, 2, 4, 8]"}},
        {"no kv heads",
         [&] { f(q, k.narrow(1, 0, 0), k.narrow(1, 0, 0), mask); },
         {"keys", "kv_heads >= 1", "[2, 0, 5, 8]"}},
        {"heads not a multiple",
         [&] {
           f(q, at::zeros({2, 3, 5, 8}), at::zeros({2, 3, 5, 8}), mask);
         },
         {"query", "multiple of kv_heads (3)", "heads (4)"}},
        {"mask undefined", [&] { f(q, k, k, at::Tensor()); }, {"mask", "Bool", "undefined"}},
        {"mask double", [&] { f(q, k, k, mask.to(at::kDouble)); }, {"mask", "Bool", "Double"}},
        {"mask kv",
         [&] { f(q, k, k, mask.narrow(3, 0, 4)); },
         {"mask", "[2, 1, 3, 5]", "[2, 1, 3, 4]"}},
        {"mask rank 3", [&] { f(q, k, k, mask[0]); }, {"mask", "[2, 1, 3, 5]", "[1, 3, 5]"}},
        {"keys on meta",
         [&] { f(q, k.to(at::kMeta), k.to(at::kMeta), mask); },
         {"keys", "device cpu", "meta"}},
        {"values on meta",
         [&] { f(q, k, k.to(at::kMeta), mask); },
         {"values", "device cpu", "meta"}},
        {"mask on meta", [&] { f(q, k, k, mask.to(at::kMeta)); }, {"mask", "device cpu", "meta"}},
    });
  }
  expect_errors({
      {"sdpa: keys double",
       [&] { sdpa_attention(q, k.to(at::kDouble), k, mask); },
       {"keys", "dtype Float", "Double"}},
      {"sdpa: values half",
       [&] { sdpa_attention(q, k, k.to(at::kHalf), mask); },
       {"values", "dtype Float", "Half"}},
      {"sdpa: additive mask of another dtype",
       [&] { sdpa_attention(q, k, k, mask.to(at::kHalf)); },
       {"mask", "query's dtype Float", "Half"}},
  });
  // reference_attention computes in float32 whatever the inputs' dtypes.
  CHECK(reference_attention(q, k.to(at::kDouble), k.to(at::kHalf), mask).sizes() == q.sizes());
}

TEST_CASE("ShapeBuckets factories and lookups name each bad argument", "[errors][buckets]") {
  const ShapeBuckets b = ShapeBuckets::powers_of_two(64);
  expect_errors({
      {"powers_of_two max 0",
       [] { ShapeBuckets::powers_of_two(0); },
       {"ShapeBuckets.max", ">= 1", "got 0"}},
      {"powers_of_two max negative",
       [] { ShapeBuckets::powers_of_two(kMin); },
       {"ShapeBuckets.max", "got -9223372036854775808"}},
      {"powers_of_two min 0",
       [] { ShapeBuckets::powers_of_two(8, 0); },
       {"ShapeBuckets.min", "[1, max=8]", "got 0"}},
      {"powers_of_two min > max",
       [] { ShapeBuckets::powers_of_two(8, 9); },
       {"ShapeBuckets.min", "got 9"}},
      {"multiples_of step 0",
       [] { ShapeBuckets::multiples_of(0, 8); },
       {"ShapeBuckets.step", ">= 1", "got 0"}},
      {"multiples_of step negative",
       [] { ShapeBuckets::multiples_of(-3, 8); },
       {"ShapeBuckets.step", "got -3"}},
      {"multiples_of max 0",
       [] { ShapeBuckets::multiples_of(2, 0); },
       {"ShapeBuckets.max", "got 0"}},
      {"multiples_of too many",
       [] { ShapeBuckets::multiples_of(1, int64_t{1} << 40); },
       {"ShapeBuckets.step", "at most 65536 buckets", "makes 1099511627776"}},
      {"geometric ratio 1",
       [] { ShapeBuckets::geometric(1.0, 8); },
       {"ShapeBuckets.ratio", "finite value > 1", "got 1"}},
      {"geometric ratio negative",
       [] { ShapeBuckets::geometric(-2.0, 8); },
       {"ShapeBuckets.ratio", "got -2"}},
      {"geometric ratio nan",
       [] { ShapeBuckets::geometric(std::nan(""), 8); },
       {"ShapeBuckets.ratio", "got nan"}},
      {"geometric ratio inf",
       [] { ShapeBuckets::geometric(std::numeric_limits<double>::infinity(), 8); },
       {"ShapeBuckets.ratio", "got inf"}},
      {"geometric max 0", [] { ShapeBuckets::geometric(2.0, 0); }, {"ShapeBuckets.max", "got 0"}},
      {"geometric min > max",
       [] { ShapeBuckets::geometric(2.0, 8, 9); },
       {"ShapeBuckets.min", "[1, max=8]", "got 9"}},
      {"geometric too many",
       [] { ShapeBuckets::geometric(1.000001, int64_t{1} << 40); },
       {"ShapeBuckets.ratio", "at most 65536 buckets", "makes more"}},
      {"of negative",
       [] {
         ShapeBuckets::of({4, -7});
       },
       {"ShapeBuckets.sizes", ">= 1", "got -7"}},
      {"of int64 min",
       [] { ShapeBuckets::of({kMin}); },
       {"ShapeBuckets.sizes", "got -9223372036854775808"}},
      {"round_up negative", [&] { b.round_up(-1); }, {"size", "[1, 64]", "got -1"}},
      {"round_up int64 max",
       [&] { b.round_up(kMax); },
       {"size", "[1, 64]", "got 9223372036854775807"}},
      {"round_up named", [&] { b.round_up(65, "batch"); }, {"batch", "[1, 64]", "got 65"}},
      {"index_of 0", [&] { b.index_of(0); }, {"size", "[1, 64]", "got 0"}},
  });
}

TEST_CASE("ShapeBuckets factories at the int64 limits terminate with the documented sizes",
          "[errors][buckets]") {
  const ShapeBuckets pow2 = ShapeBuckets::powers_of_two(kMax);
  CHECK(pow2.count() == 64);  // 1, 2, ..., 2^62, then max
  CHECK(pow2.sizes()[62] == int64_t{1} << 62);
  CHECK(pow2.max() == kMax);
  CHECK(ShapeBuckets::multiples_of(kMax / 2, kMax).sizes() ==
        std::vector<int64_t>{kMax / 2, kMax / 2 * 2, kMax});
  CHECK(ShapeBuckets::multiples_of(1, ShapeBuckets::kMaxCount).count() == ShapeBuckets::kMaxCount);
  const ShapeBuckets doubling = ShapeBuckets::geometric(2.0, kMax);
  CHECK(doubling.sizes() == pow2.sizes());
  const ShapeBuckets slow = ShapeBuckets::geometric(1.5, kMax, 3);
  CHECK(slow.sizes().front() == 3);
  CHECK(slow.max() == kMax);
  CHECK(std::is_sorted(slow.sizes().begin(), slow.sizes().end()));
  CHECK(std::adjacent_find(slow.sizes().begin(), slow.sizes().end()) == slow.sizes().end());
  CHECK(ShapeBuckets::powers_of_two(1).sizes() == std::vector<int64_t>{1});
  CHECK(ShapeBuckets::geometric(1.5, 1).sizes() == std::vector<int64_t>{1});
}

TEST_CASE("pad_into and unpad name each bad argument", "[errors][buckets]") {
  at::Tensor padded = at::zeros({4, 8}, i64());
  const at::Tensor before = padded.clone();
  expect_errors({
      {"pad_into: input undefined",
       [&] { pad_into(padded, at::Tensor(), -1); },
       {"input", "defined", "undefined"}},
      {"pad_into: padded undefined",
       [&] {
         at::Tensor none;
         pad_into(none, positions(1, {0}), -1);
       },
       {"padded", "defined", "undefined"}},
      {"pad_into: input rank 1",
       [&] {
         pad_into(padded, positions({1, 2}), -1);
       },
       {"input", "rank 2", "[2]"}},
      {"pad_into: input too many rows",
       [&] {
         pad_into(padded, at::zeros({5, 1}, i64()), -1);
       },
       {"input", "fits in [4, 8]", "[5, 1]"}},
      {"pad_into: input too long",
       [&] {
         pad_into(padded, at::zeros({1, 9}, i64()), -1);
       },
       {"input", "fits in [4, 8]", "[1, 9]"}},
      {"pad_into: input dtype",
       [&] {
         pad_into(padded, at::zeros({1, 1}), -1);
       },
       {"input", "dtype Long", "Float"}},
      {"unpad: negative batch",
       [&] { unpad(padded, -1, 2); },
       {"unpad", "batch >= 0", "got -1 and 2"}},
      {"unpad: negative q",
       [&] { unpad(padded, 1, kMin); },
       {"unpad", "query_len >= 0", "-9223372036854775808"}},
      {"unpad: too many rows",
       [&] { unpad(padded, 5, 1); },
       {"output", "at least [5, 1, ...]", "[4, 8]"}},
      {"unpad: rank 1",
       [&] {
         unpad(positions({1, 2}), 1, 1);
       },
       {"output", "[2]"}},
      {"unpad: undefined", [&] { unpad(at::Tensor(), 1, 1); }, {"output", "got []"}},
  });
  CHECK(at::equal(padded, before));  // a refused pad_into writes nothing
}

TEST_CASE("GraphRunner names each bad argument and leaves the cache and its stats unchanged",
          "[errors][runner]") {
  const CacheConfig c = config_for({LayerType::kSliding, LayerType::kFull})
                            .head_dim(8)
                            .max_batch(4)
                            .max_len(32)
                            .max_chunk(8);
  HybridCache cache(c);
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(4);
  options.query_buckets = ShapeBuckets::powers_of_two(8);
  options.attend_buckets = ShapeBuckets::multiples_of(8, 32);
  GraphRunner runner(attention_step_inputs({}, at::kFloat), attention_step_fn(cache), options);
  runner.run({positions(2, {0, 1, 0, 1}), at::randn({2, 2, 2, 8}), at::randn({2, 2, 4, 8})}, 8);
  const at::Tensor pos = positions(1, {2, 3});
  const at::Tensor kv = at::zeros({1, 2, 2, 8});
  const at::Tensor q = at::zeros({1, 2, 4, 8});
  const Snapshot before(cache);
  const RunnerStats stats_before = runner.stats();
  expect_errors({
      {"no inputs", [&] { runner.run({}, 8); }, {"inputs", "3 tensors", "got 0"}},
      {"undefined input",
       [&] {
         runner.run({pos, at::Tensor(), q}, 8);
       },
       {"inputs[1] (kv)", "defined", "undefined"}},
      {"kv dtype",
       [&] {
         runner.run({pos, kv.to(at::kDouble), q}, 8);
       },
       {"inputs[1] (kv)", "dtype Float", "Double"}},
      {"query on meta",
       [&] {
         runner.run({pos, kv, q.to(at::kMeta)}, 8);
       },
       {"inputs[2] (query)", "device cpu", "meta"}},
      {"positions rank 1",
       [&] {
         runner.run({positions({2, 3}), kv, q}, 8);
       },
       {"inputs[0] (positions)", "[batch, q, []]", "[2]"}},
      {"kv heads",
       [&] {
         runner.run({pos, at::zeros({1, 2, 3, 8}), q}, 8);
       },
       {"inputs[1] (kv)", "[batch, q, [2, 8]]", "[1, 2, 3, 8]"}},
      {"query batch",
       [&] {
         runner.run({pos, kv, at::zeros({2, 2, 4, 8})}, 8);
       },
       {"inputs[2] (query)", "like inputs[0]", "[2, 2]"}},
      {"batch past the largest bucket",
       [&] {
         runner.run({at::zeros({5, 1}, i64()), at::zeros({5, 1, 2, 8}), at::zeros({5, 1, 4, 8})},
                    8);
       },
       {"batch (inputs' size(0))", "[1, 4]", "got 5"}},
      {"empty batch",
       [&] {
         runner.run({at::zeros({0, 1}, i64()), at::zeros({0, 1, 2, 8}), at::zeros({0, 1, 4, 8})},
                    8);
       },
       {"batch (inputs' size(0))", "got 0"}},
      {"q past the largest bucket",
       [&] {
         runner.run({at::zeros({1, 9}, i64()), at::zeros({1, 9, 2, 8}), at::zeros({1, 9, 4, 8})},
                    16);
       },
       {"q (inputs' size(1))", "[1, 8]", "got 9"}},
      {"empty q",
       [&] {
         runner.run({at::zeros({1, 0}, i64()), at::zeros({1, 0, 2, 8}), at::zeros({1, 0, 4, 8})},
                    8);
       },
       {"q (inputs' size(1))", "got 0"}},
      {"attend_len missing",
       [&] {
         runner.run({pos, kv, q});
       },
       {"attend_len", ">= 1 with attend buckets", "got -1"}},
      {"attend_len past the largest bucket",
       [&] {
         runner.run({pos, kv, q}, 40);
       },
       {"attend_len", "[1, 32]", "got 40"}},
      {"key_for batch 0", [&] { runner.key_for(0, 1, 8); }, {"batch", "got 0"}},
      {"static_inputs of an unused key",
       [&] {
         runner.static_inputs(GraphKey{3, 3, -1});
       },
       {"key", "already run or captured", "[3, 3, -1]"}},
      // the step's positions reach the cache, which refuses them before writing
      {"positions past attend_len",
       [&] {
         runner.run({positions(1, {8, 9}), kv, q}, 8);
       },
       {"cache_position[0, 0]", "attend_len=8", "got 8"}},
  });
  CHECK(before.same_as(cache));
  const RunnerStats stats_after = runner.stats();
  CHECK(stats_after.eager_runs == stats_before.eager_runs);
  int64_t runs_before = 0, runs_after = 0;
  for (const auto& k : stats_before.keys) runs_before += k.runs;
  for (const auto& k : stats_after.keys) runs_after += k.runs;
  CHECK(runs_after == runs_before);
}

TEST_CASE("GraphRunner refuses impossible specs and steps", "[errors][runner]") {
  const auto step = [](const std::vector<at::Tensor>& in, const GraphKey&) {
    return std::vector<at::Tensor>{in[0]};
  };
  const std::vector<InputSpec> specs = {{"x", at::kFloat, {3}, 0}};
  expect_errors({
      {"no inputs", [&] { GraphRunner r({}, step, {}); }, {"inputs", "at least one", "none"}},
      {"empty step", [&] { GraphRunner r(specs, nullptr, {}); }, {"step", "callable", "empty"}},
      {"negative warmup",
       [&] {
         GraphRunner::Options o;
         o.warmup_runs = -1;
         GraphRunner r(specs, step, o);
       },
       {"Options.warmup_runs", ">= 0", "got -1"}},
      {"negative trailing size",
       [&] {
         GraphRunner r({{"x", at::kFloat, {3}, 0}, {"kv", at::kFloat, {-2, 8}, 0}}, step, {});
       },
       {"inputs[1] (kv).trailing", ">= 0", "[-2, 8]"}},
  });
  GraphRunner::Options o;
  o.batch_buckets = ShapeBuckets::of({2});
  GraphRunner narrow(
      specs,
      [](const std::vector<at::Tensor>&, const GraphKey&) {
        return std::vector<at::Tensor>{at::zeros({1, 1})};
      },
      o);
  require_error(
      [&] {
        narrow.run({at::zeros({1, 1, 3})});
      },
      {"step output 0", "[2, 1, ...]", "got [1, 1]"});
  GraphRunner undefined(
      specs,
      [](const std::vector<at::Tensor>&, const GraphKey&) {
        return std::vector<at::Tensor>{at::Tensor()};
      },
      o);
  require_error([&] { undefined.run({at::zeros({1, 1, 3})}); }, {"step output 0", "got []"});
}
