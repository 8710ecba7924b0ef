// Cache::copy_from (cache.hpp): a cache made an independent copy of another
// of the same config, for every storage mode (plain, int8, fp8, host
// offload) and both layer types. The specification: the copy holds every
// buffer and all bookkeeping bit for bit, in its own memory (no address of
// either cache changes, none is shared); decoding both afterwards gives the
// same outputs; a change to one is invisible in the other; a cache of
// another config is refused, naming the field, before anything is written.

#include "support.hpp"
#include "support/snapshot.hpp"

#include <memory>
#include <set>

namespace {

using namespace statickv;
using namespace statickv::test;

CacheConfig config_with(KvStorage storage, bool offload) {
  return ConfigBuilder()
      .max_batch(3)
      .max_len(24)
      .hybrid(/*window=*/4, /*chunk=*/4)
      .kv_storage(storage)
      .host_offload(offload);
}

/// Prefills `len` positions of rows 0..b-1 (row r shifted by r tokens, so
/// rows differ), then returns each layer's attention output of one more
/// decode token per row.
std::vector<at::Tensor> run_steps(Cache& cache, int64_t b, int64_t len, uint64_t seed) {
  const CacheConfig& c = cache.config();
  at::manual_seed(seed);
  for (int64_t start = 0; start < len; start += c.effective_max_chunk()) {
    const int64_t n = std::min(c.effective_max_chunk(), len - start);
    const StepPlan step = cache.prepare(arange_positions(start, n), b);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const at::Tensor k = at::randn({b, c.num_kv_heads, n, c.head_dim});
      cache.update(l, k, at::randn_like(k), step);
    }
  }
  std::vector<at::Tensor> out;
  const StepPlan step = cache.prepare(arange_positions(len, 1), b);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const at::Tensor k = at::randn({b, c.num_kv_heads, 1, c.head_dim});
    const KV kv = cache.update(l, k, at::randn_like(k), step);
    out.push_back(cache.attend(l, at::randn({b, kHeads, 1, c.head_dim}), kv, step).clone());
  }
  return out;
}

std::set<const void*> address_set(const Cache& cache) {
  const std::vector<const void*> all = addresses(cache);
  return std::set<const void*>(all.begin(), all.end());
}

}  // namespace

TEST_CASE("copy_from makes an independent, bit-identical copy for every storage mode",
          "[rows][copy_from]") {
  const KvStorage storage = GENERATE(from_range(all_storages()));
  const bool offload = GENERATE(false, true);
  if (offload && storage != KvStorage::kCompute) return;  // offload takes compute storage
  INFO("kv_storage=" << storage << " host_offload=" << offload);
  const CacheConfig config = config_with(storage, offload);
  HybridCache source(config), copy(config);
  run_steps(source, /*b=*/3, /*len=*/9, /*seed=*/1);
  const std::vector<const void*> source_before = addresses(source);
  const std::vector<const void*> copy_before = addresses(copy);

  copy.copy_from(source);

  CHECK(Snapshot(copy) == Snapshot(source));
  // Its own memory: no address moved, none is shared.
  CHECK(addresses(source) == source_before);
  CHECK(addresses(copy) == copy_before);
  for (const void* p : address_set(copy)) CHECK(address_set(source).count(p) == 0);

  // Both continue alike: the same next step gives the same outputs.
  const Snapshot copied(copy);
  const std::vector<at::Tensor> a = run_steps(source, 3, 4, /*seed=*/2);
  const std::vector<at::Tensor> b = run_steps(copy, 3, 4, /*seed=*/2);
  for (size_t l = 0; l < a.size(); ++l) CHECK(bit_identical(a[l], b[l]));

  // A change to one is invisible in the other.
  HybridCache again(config);
  again.copy_from(source);
  const Snapshot held(again);
  source.reset_rows(positions({0, 2}));
  run_steps(source, 1, 5, /*seed=*/3);
  CHECK(held.same_as(again));
  CHECK(Snapshot(source) != held);
}

TEST_CASE("copy_from a static cache into a static cache, and onto itself", "[rows][copy_from]") {
  const CacheConfig config = ConfigBuilder().max_batch(2).max_len(16);
  StaticCache source(config), copy(config);
  run_steps(source, 2, 7, /*seed=*/4);
  copy.copy_from(source);
  CHECK(Snapshot(copy) == Snapshot(source));
  const Snapshot before(source);
  source.copy_from(source);  // a no-op copy that still ends held steps
  CHECK(before.same_as(source));
}

TEST_CASE("copy_from makes every held step of the copy stale", "[rows][copy_from][errors]") {
  const CacheConfig config = ConfigBuilder().max_batch(2).max_len(16);
  StaticCache source(config), copy(config);
  const StepPlan held = copy.prepare(arange_positions(0, 2), 2);
  copy.copy_from(source);
  const at::Tensor k = at::randn({2, kKvHeads, 2, kDim});
  require_error([&] { copy.update(0, k, k, held); }, {"step", "stale"});
}

TEST_CASE("copy_from refuses a cache of another config, naming the field, before writing",
          "[rows][copy_from][errors]") {
  const CacheConfig base = config_with(KvStorage::kCompute, false);
  HybridCache target(base);
  run_steps(target, 3, 6, /*seed=*/5);
  const Snapshot before(target);
  struct Case {
    const char* field;
    CacheConfig config;
  };
  std::vector<Case> cases;
  auto with = [&](const char* field, auto&& change) {
    CacheConfig c = base;
    change(c);
    cases.push_back({field, c});
  };
  with("max_batch", [](CacheConfig& c) { c.max_batch = 4; });
  with("max_len", [](CacheConfig& c) { c.max_len = 32; });
  with("num_kv_heads", [](CacheConfig& c) { c.num_kv_heads = 1; });
  with("head_dim", [](CacheConfig& c) { c.head_dim = 4; });
  with("dtype", [](CacheConfig& c) { c.dtype = at::kDouble; });
  with("layer_types[0]", [](CacheConfig& c) { c.layer_types[0] = LayerType::kFull; });
  with("sliding_window", [](CacheConfig& c) { c.sliding_window = 3; });
  with("max_chunk", [](CacheConfig& c) { c.max_chunk = 3; });
  with("kv_storage", [](CacheConfig& c) { c.kv_storage = KvStorage::kInt8; });
  with("host_offload", [](CacheConfig& c) { c.host_offload = true; });
  for (const Case& c : cases) {
    INFO(c.field);
    HybridCache other(c.config);
    require_error([&] { target.copy_from(other); }, {"other", c.field});
    CHECK(before.same_as(target));
  }
}
