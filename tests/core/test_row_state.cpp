// Row save/restore (prompt caching; include/statickv/row_state.hpp): a row
// saved with save_row and restored with restore_row into any row of a
// compatible cache is that row. The specification: restore then decode
// equals prefill then decode; a state that does not fit the cache is refused
// before anything is written.

#include "support.hpp"

#include <limits>
#include <memory>

namespace {

using namespace statickv;
using namespace statickv::test;

/// Positions 0..len-1 of `row` (every other row padded), in chunks of at
/// most max_chunk, with keys and values drawn from `seed`.
void prefill_row(Cache& cache, int64_t row, int64_t len, uint64_t seed) {
  const CacheConfig& c = cache.config();
  const int64_t chunk = c.effective_max_chunk();
  at::manual_seed(seed);
  for (int64_t start = 0; start < len; start += chunk) {
    const int64_t n = std::min(chunk, len - start);
    at::Tensor pos = at::full({row + 1, n}, -1, i64());
    pos[row].copy_(arange_positions(start, n));
    const StepPlan step = cache.prepare(pos, row + 1);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const at::Tensor k = at::randn({row + 1, c.num_kv_heads, n, c.head_dim});
      cache.update(l, k, at::randn_like(k), step);
    }
  }
}

/// One decode token in `row` (every other row padded): each layer's
/// attention output for that row, [heads, 1, head_dim].
std::vector<at::Tensor> decode_row(Cache& cache, int64_t row, uint64_t seed) {
  const CacheConfig& c = cache.config();
  at::Tensor pos = at::full({row + 1, 1}, -1, i64());
  pos[row][0] = cache.seq_lengths()[row].item<int64_t>();
  const StepPlan step = cache.prepare(pos, row + 1);
  at::manual_seed(seed);
  std::vector<at::Tensor> outputs;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    at::Tensor k = at::zeros({row + 1, c.num_kv_heads, 1, c.head_dim});
    at::Tensor query = at::zeros({row + 1, 2 * c.num_kv_heads, 1, c.head_dim});
    k[row].copy_(at::randn({c.num_kv_heads, 1, c.head_dim}));
    query[row].copy_(at::randn({2 * c.num_kv_heads, 1, c.head_dim}));
    const KV kv = cache.update(l, k, k.clone(), step);
    outputs.push_back(reference_attention(query, kv.keys, kv.values, step.mask(l))[row]);
  }
  return outputs;
}

}  // namespace

TEST_CASE("restore then decode equals prefill then decode, in another row of another cache",
          "[cache][row_state]") {
  const std::vector<std::pair<const char*, CacheConfig>> layouts = {
      {"static", ConfigBuilder().max_batch(3).max_len(32).max_chunk(4)},
      {"hybrid", ConfigBuilder().max_batch(3).max_len(32).hybrid(/*window=*/4, /*chunk=*/4)},
  };
  for (const auto& [name, config] : layouts) {
    INFO(name);
    auto source = make_cache(config);
    auto target = make_cache(config);
    prefill_row(*source, 0, 11, 5);  // wraps the ring (capacity 7)
    const RowState saved = source->save_row(0);
    // The target's row 2 held another, longer sequence with a NaN in it.
    prefill_row(*target, 2, 20, 6);
    target->keys(1)[2].select(1, 15).fill_(std::numeric_limits<float>::quiet_NaN());
    prefill_row(*target, 1, 3, 7);
    const Snapshot row1(*target);
    const void* address = target->keys(0).data_ptr();

    target->restore_row(saved.to(target->config().device), 2);

    CHECK(target->keys(0).data_ptr() == address);
    CHECK(target->seq_lengths()[2].item<int64_t>() == 11);
    for (int64_t l = 0; l < 2; ++l) {
      const auto i = static_cast<size_t>(l);
      const int64_t cap = source->capacity(l);
      CHECK(bit_identical(target->keys(l)[2].narrow(1, 0, cap),
                          source->keys(l)[0].narrow(1, 0, cap)));
      CHECK(bit_identical(target->values(l)[2].narrow(1, 0, cap),
                          source->values(l)[0].narrow(1, 0, cap)));
      CHECK(at::equal(target->slot_positions(l)[2], source->slot_positions(l)[0]));
      CHECK(bit_identical(target->keys(l)[1], row1.keys[i][1]));  // other rows untouched
    }
    for (uint64_t t = 0; t < 9; ++t) {
      const auto got = decode_row(*target, 2, 40 + t);
      const auto want = decode_row(*source, 0, 40 + t);
      for (size_t l = 0; l < got.size(); ++l) {
        INFO("decode step " << t << ", layer " << l);
        CHECK(at::isfinite(got[l]).all().item<bool>());
        CHECK(close(got[l], want[l], 1e-6));
      }
    }
  }
}

TEST_CASE("save_row returns host copies that later steps do not change", "[cache][row_state]") {
  StaticCache cache(ConfigBuilder().max_batch(2).max_len(16));
  prefill_row(cache, 1, 5, 3);
  const RowState saved = cache.save_row(1);
  REQUIRE(saved.length == 5);
  const at::Tensor keys = saved.keys[0].clone();
  CHECK(saved.keys[0].device().is_cpu());
  CHECK(saved.keys[0].sizes() == at::IntArrayRef({kKvHeads, 5, kDim}));
  cache.reset();
  CHECK(at::equal(saved.keys[0], keys));
  CHECK(at::equal(saved.positions[1], arange_positions(0, 5)));
}

TEST_CASE(
    "save_row at a known length onto the cache's device equals the host save and reads "
    "nothing back",
    "[cache][row_state]") {
  HybridCache cache(ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4));
  prefill_row(cache, 1, 9, 3);  // wraps the ring (capacity 7)
  const RowState host = cache.save_row(1);
  RowState here;
  {
    OpCounter ops;
    here = cache.save_row(1, 9, cache.config().device);
    CHECK(ops.syncs() == 0);
    CHECK(ops.host_copies() == 0);
  }
  {
    OpCounter ops;
    (void)cache.save_row(1);  // the host form reads the length back
    CHECK(ops.syncs() == 1);
  }
  REQUIRE(here.length == 9);
  REQUIRE(here.keys.size() == host.keys.size());
  CHECK(here.types == host.types);
  for (size_t l = 0; l < here.keys.size(); ++l) {
    CHECK(bit_identical(here.keys[l], host.keys[l]));
    CHECK(bit_identical(here.values[l], host.values[l]));
    CHECK(at::equal(here.positions[l], host.positions[l]));
  }
  require_error([&] { cache.save_row(1, 8, cache.config().device); },
                {"length: expected row 1's seq_length=9", "got 8"});
  require_error([&] { cache.save_row(1, 33, cache.config().device); },
                {"length: expected a length in [0, max_len=32]", "got 33"});
  cache.reset();  // a copy: later steps do not change it
  CHECK(bit_identical(here.keys[0], host.keys[0]));
}

TEST_CASE("a state that does not fit the cache is refused and the cache is left bit-identical",
          "[cache][row_state][errors]") {
  HybridCache source(ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4));
  prefill_row(source, 0, 9, 1);
  const RowState saved = source.save_row(0);
  HybridCache target(ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4));
  prefill_row(target, 1, 6, 2);
  const Snapshot before(target);
  const auto refused = [&](const char* what, const CacheConfig& config, const RowState& state,
                           int64_t row, const std::vector<std::string>& fragments) {
    INFO(what);
    auto cache = make_cache(config);
    prefill_row(*cache, 1, 6, 2);
    const Snapshot snapshot(*cache);
    require_error([&] { cache->restore_row(state, row); }, fragments);
    CHECK(snapshot.same_as(*cache));
  };
  const CacheConfig same = target.config();
  refused("row out of range", same, saved, 2, {"row", "[0, max_batch=2)", "got 2"});
  refused("another ring capacity", ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 6), saved, 0,
          {"state.keys[0]", "ring capacity", "[2, 9, 8]", "[2, 7, 8]"});
  refused("another layer type", ConfigBuilder().max_batch(2).max_len(32), saved, 0,
          {"state.types[0]", "expected full", "got sliding"});
  refused("another head_dim", ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4).head_dim(4),
          saved, 0, {"state.keys[0]", "[2, 7, 4]"});
  refused("too long", ConfigBuilder().max_batch(2).max_len(8).hybrid(4, 4), saved, 0,
          {"state.length", "max_len=8", "got 9"});
  RowState half = saved;
  half.keys[1] = half.keys[1].to(at::kHalf);
  refused("another dtype", same, half, 0, {"state.keys", "Float", "Half"});
  RowState short_state = saved;
  short_state.values.pop_back();
  refused("a missing layer", same, short_state, 0, {"state", "num_layers=2", "got 2, 2, 2 and 1"});
  CHECK(before.same_as(target));
}
