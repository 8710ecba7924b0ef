// Bad input: every entry point rejects it with a c10::Error naming the
// argument, the expected and the actual value, before anything is written.

#include "support.hpp"

#include <functional>

using namespace statickv;
using namespace statickv::test;

namespace {

CacheConfig config_for(std::vector<LayerType> types) {
  CacheConfig c;
  c.num_layers = static_cast<int64_t>(types.size());
  c.num_kv_heads = 2;
  c.head_dim = 4;
  c.max_batch = 3;
  c.max_len = 16;
  c.layer_types = std::move(types);
  c.sliding_window = 4;
  return c;
}

// A cache with some real content, so "nothing changed" is a strong claim.
void fill(CacheBase& cache) {
  at::manual_seed(9);
  Step step = cache.prepare(arange_positions(0, 3), 3);
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    cache.update(l, at::randn({3, 2, 3, 4}), at::randn({3, 2, 3, 4}), step);
  }
}

struct BadCall {
  std::string what;
  std::function<void(CacheBase&, const Step&)> call;
  std::vector<std::string> fragments;
};

}  // namespace

TEST_CASE("every bad argument raises a named error and leaves the cache bit-identical",
          "[errors]") {
  const at::Tensor kv = at::zeros({3, 2, 1, 4});
  const std::vector<BadCall> calls = {
      // prepare
      {"live_batch 0",
       [](CacheBase& c, const Step&) { c.prepare(positions({3}), 0); },
       {"live_batch", "[1, max_batch=3]", "got 0"}},
      {"live_batch > max_batch",
       [](CacheBase& c, const Step&) { c.prepare(positions({3}), 4); },
       {"live_batch", "got 4"}},
      {"positions undefined",
       [](CacheBase& c, const Step&) { c.prepare(at::Tensor(), 3); },
       {"cache_position", "undefined"}},
      {"positions int32",
       [](CacheBase& c, const Step&) { c.prepare(positions({3}).to(at::kInt), 3); },
       {"cache_position", "Long", "Int"}},
      {"positions float",
       [](CacheBase& c, const Step&) { c.prepare(positions({3}).to(at::kFloat), 3); },
       {"cache_position", "Float"}},
      {"positions rank 3",
       [](CacheBase& c, const Step&) {
         c.prepare(at::zeros({3, 1, 1}, i64()), 3);
       },
       {"cache_position", "[q] or [live_batch, q]", "[3, 1, 1]"}},
      {"positions rows != live_batch",
       [](CacheBase& c, const Step&) {
         c.prepare(at::zeros({2, 1}, i64()), 3);
       },
       {"cache_position", "3 rows", "[2, 1]"}},
      {"positions empty",
       [](CacheBase& c, const Step&) { c.prepare(at::zeros({0}, i64()), 3); },
       {"cache_position", "between 1 and max_chunk", "got 0"}},
      {"chunk longer than max_chunk",
       [](CacheBase& c, const Step&) { c.prepare(arange_positions(3, 5), 3); },
       {"cache_position", "max_chunk=4", "got 5"}},
      {"position past max_len",
       [](CacheBase& c, const Step&) { c.prepare(positions({16}), 3); },
       {"cache_position[0, 0]", "< ", "got 16"}},
      {"position past attend_len",
       [](CacheBase& c, const Step&) { c.prepare(positions({8}), 3, 8); },
       {"cache_position[0, 0]", "attend_len=8", "got 8"}},
      {"attend_len 0",
       [](CacheBase& c, const Step&) { c.prepare(positions({3}), 3, 0); },
       {"attend_len", "max_len=16", "got 0"}},
      {"attend_len > max_len",
       [](CacheBase& c, const Step&) { c.prepare(positions({3}), 3, 17); },
       {"attend_len", "got 17"}},
      // update
      {"layer -1",
       [&](CacheBase& c, const Step& step) { c.update(-1, kv, kv, step); },
       {"layer", "[0, ", "got -1"}},
      {"layer out of range",
       [&](CacheBase& c, const Step& step) { c.update(c.num_layers(), kv, kv, step); },
       {"layer", "got"}},
      {"key wrong dtype",
       [&](CacheBase& c, const Step& step) { c.update(0, kv.to(at::kDouble), kv, step); },
       {"key", "dtype Float", "Double"}},
      {"value wrong dtype",
       [&](CacheBase& c, const Step& step) { c.update(0, kv, kv.to(at::kHalf), step); },
       {"value", "dtype Float", "Half"}},
      {"key rank 3",
       [&](CacheBase& c, const Step& step) { c.update(0, kv.squeeze(2), kv, step); },
       {"key", "[3, 2, 1, 4]", "[3, 2, 4]"}},
      {"key wrong batch",
       [&](CacheBase& c, const Step& step) { c.update(0, kv.narrow(0, 0, 2), kv, step); },
       {"key", "[3, 2, 1, 4]", "[2, 2, 1, 4]"}},
      {"key wrong q",
       [&](CacheBase& c, const Step& step) {
         c.update(0, at::zeros({3, 2, 2, 4}), kv, step);
       },
       {"key", "got [3, 2, 2, 4]"}},
      {"value wrong head_dim",
       [&](CacheBase& c, const Step& step) {
         c.update(0, kv, at::zeros({3, 2, 1, 5}), step);
       },
       {"value", "got [3, 2, 1, 5]"}},
      {"key undefined",
       [&](CacheBase& c, const Step& step) { c.update(0, at::Tensor(), kv, step); },
       {"key", "undefined"}},
      {"step of another cache",
       [&](CacheBase& c, const Step&) {
         StaticCache other(config_for({LayerType::kFull}));
         c.update(0, kv, kv, other.prepare(positions({0}), 3));
       },
       {"step", "this cache"}},
      // row operations
      {"reset_rows out of range",
       [](CacheBase& c, const Step&) {
         c.reset_rows(positions({0, 3}));
       },
       {"rows[1]", "[0, max_batch=3)", "got 3"}},
      {"reset_rows negative",
       [](CacheBase& c, const Step&) { c.reset_rows(positions({-1})); },
       {"rows[0]", "got -1"}},
      {"reset_rows duplicated",
       [](CacheBase& c, const Step&) {
         c.reset_rows(positions({1, 1}));
       },
       {"rows[1]", "distinct", "1 twice"}},
      {"reset_rows empty",
       [](CacheBase& c, const Step&) { c.reset_rows(at::zeros({0}, i64())); },
       {"rows", "between 1 and max_batch=3", "got 0"}},
      {"reset_rows too many",
       [](CacheBase& c, const Step&) {
         c.reset_rows(positions({0, 1, 2, 0}));
       },
       {"rows", "got 4"}},
      {"reset_rows float",
       [](CacheBase& c, const Step&) { c.reset_rows(at::zeros({1})); },
       {"rows", "Long", "Float"}},
      {"reset_rows rank 2",
       [](CacheBase& c, const Step&) {
         c.reset_rows(at::zeros({1, 1}, i64()));
       },
       {"rows", "1-D", "[1, 1]"}},
      {"copy_row src", [](CacheBase& c, const Step&) { c.copy_row(3, 0); }, {"src", "got 3"}},
      {"copy_row dst", [](CacheBase& c, const Step&) { c.copy_row(0, -2); }, {"dst", "got -2"}},
      {"reorder out of range",
       [](CacheBase& c, const Step&) {
         c.reorder(positions({0, 5}));
       },
       {"indices[1]", "got 5"}},
      {"reorder too long",
       [](CacheBase& c, const Step&) {
         c.reorder(positions({0, 1, 2, 0}));
       },
       {"indices", "max_batch=3", "got 4"}},
      {"reorder int32",
       [](CacheBase& c, const Step&) { c.reorder(positions({0}).to(at::kInt)); },
       {"indices", "Long", "Int"}},
  };

  const std::vector<std::pair<const char*, std::vector<LayerType>>> layouts = {
      {"static", {LayerType::kFull, LayerType::kFull}},
      {"hybrid", {LayerType::kSliding, LayerType::kFull}},
  };
  for (const auto& [name, types] : layouts) {
    CacheConfig config = config_for(types);
    config.max_chunk = 4;
    std::unique_ptr<CacheBase> cache;
    if (std::string(name) == "static") {
      cache = std::make_unique<StaticCache>(config);
    } else {
      cache = std::make_unique<HybridCache>(config);
    }
    fill(*cache);
    for (const BadCall& bad : calls) {
      // The step is planned before the snapshot: only the bad call is judged.
      const Step step = cache->prepare(positions({3}), 3);
      const Snapshot before(*cache);
      INFO(name << ": " << bad.what);
      require_error([&] { bad.call(*cache, step); }, bad.fragments);
      CHECK(before.same_as(*cache));
    }
  }
}

TEST_CASE("a sliding cache rejects host positions spanning more than max_chunk", "[errors]") {
  CacheConfig config = config_for({LayerType::kSliding});
  config.max_chunk = 4;
  HybridCache cache(config);
  fill(cache);
  const Snapshot before(cache);
  require_error(
      [&] {
        cache.prepare(positions(3, {3, 7, 4, 5, -1, 6}), 3);
      },
      {"cache_position[0]", "span at most max_chunk=4", "3..7"});
  CHECK(before.same_as(cache));
}

TEST_CASE("constructors reject impossible configs before allocating", "[errors]") {
  CacheConfig sliding = config_for({LayerType::kFull, LayerType::kSliding});
  require_error([&] { StaticCache cache(sliding); },
                {"StaticCache", "layer_types[1]", "expected full", "sliding"});
  sliding.sliding_window = 0;
  require_error([&] { HybridCache cache(sliding); }, {"CacheConfig.sliding_window", "got 0"});
  CacheConfig gpu = config_for({LayerType::kFull});
  gpu.device = at::Device(at::kMeta);
  require_error([&] { StaticCache cache(gpu); }, {"CacheConfig.device", "meta"});
}

TEST_CASE("mask and attention helpers name their bad arguments", "[errors]") {
  const at::Tensor mask = at::ones({2, 1, 3, 5}, at::kBool);
  require_error([&] { additive_mask(mask.to(at::kFloat), at::kFloat); }, {"mask", "Bool"});
  require_error([&] { additive_mask(mask, at::kInt); }, {"dtype", "Int"});
  require_error(
      [&] {
        fold_key_padding(mask, at::ones({2, 4}, at::kBool));
      },
      {"key_keep", "[2, 5]", "[2, 4]"});
  require_error(
      [&] {
        fold_query_padding(mask, at::ones({3, 3}, at::kBool));
      },
      {"query_keep", "[2, 3]", "[3, 3]"});
  const at::Tensor q = at::zeros({2, 4, 3, 8});
  const at::Tensor k = at::zeros({2, 3, 5, 8});
  require_error([&] { reference_attention(q, k, k, mask); }, {"query", "multiple", "3"});
  require_error(
      [&] { sdpa_attention(q, k.narrow(1, 0, 2), k.narrow(1, 0, 2), mask.narrow(3, 0, 4)); },
      {"mask", "[2, 1, 3, 5]", "[2, 1, 3, 4]"});
}
