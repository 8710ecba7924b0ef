// The Scheduler's pool of saved prefixes (reference/engine/src/serving/prefix_pool.hpp,
// Note [prefix cache] in docs/serving.md), apart from the Scheduler: the
// chained block hashes (FNV-1a values computed outside C++), the longest
// match and its limits, what an insert keeps and drops, LRU eviction under
// the byte budget, and the bytes of a snapshot counted from its shapes.
// The states are real rows of small caches (Cache::save_row).

#include "serving/prefix_pool.hpp"
#include "support.hpp"

#include <cstdint>
#include <vector>

using namespace statickv;
using namespace statickv::test;
using statickv::reference::serving_detail::block_hashes;
using statickv::reference::serving_detail::PrefixMatch;
using statickv::reference::serving_detail::PrefixPool;
using statickv::reference::serving_detail::state_bytes;

namespace {

using Ids = std::vector<int64_t>;

/// first, first + 1, ..., n ids.
Ids run(int64_t first, int64_t n) {
  Ids out;
  for (int64_t i = 0; i < n; ++i) out.push_back(first + i);
  return out;
}
Ids prefix(const Ids& ids, int64_t n) { return {ids.begin(), ids.begin() + n}; }
Ids then(Ids ids, const Ids& more) {
  ids.insert(ids.end(), more.begin(), more.end());
  return ids;
}

CacheConfig full_config() { return ConfigBuilder().max_batch(1).max_len(32); }

/// Row 0 of a fresh cache holding positions 0..length-1 (keys from `seed`), saved.
RowState saved_row(int64_t length, uint64_t seed, const CacheConfig& config = full_config()) {
  auto cache = make_cache(config);
  at::manual_seed(seed);
  const int64_t chunk = config.effective_max_chunk();
  for (int64_t start = 0; start < length; start += chunk) {
    const int64_t n = std::min(chunk, length - start);
    const StepPlan step = cache->prepare(arange_positions(start, n).view({1, n}), 1);
    for (int64_t l = 0; l < config.num_layers; ++l) {
      const at::Tensor k = at::randn({1, config.num_kv_heads, n, config.head_dim},
                                     at::TensorOptions().dtype(config.dtype));
      cache->update(l, k, at::randn_like(k), step);
    }
  }
  return cache->save_row(0);
}

/// Bytes of a full_config() row of `length`: 2 layers, each keys and values
/// [kKvHeads, length, kDim] float32 and positions [length] int64.
int64_t full_bytes(int64_t length) { return 2 * (2 * kKvHeads * length * kDim * 4 + length * 8); }

/// Saves `tokens` as a row of full_config().
void put(PrefixPool& pool, const Ids& tokens, uint64_t seed = 1) {
  pool.insert(tokens, saved_row(static_cast<int64_t>(tokens.size()), seed));
}

int64_t reused(PrefixPool& pool, const Ids& prompt) {
  const PrefixMatch m = pool.find(prompt);
  CHECK((m.state == nullptr) == (m.reused == 0));
  return m.reused;
}

constexpr int64_t kFar = 1000;  // a max_rollback that never limits

}  // namespace

TEST_CASE("block_hashes chains FNV-1a over whole blocks, each hash covering the blocks before",
          "[prefix_pool]") {
  const Ids ids = {1, 2, 3, 4, 5, 6};
  // Computed in Python: FNV-1a (64-bit) over the ids, carried from block to block.
  const std::vector<uint64_t> expected = {11125486474286715500ULL, 9228107187407362555ULL,
                                          2951027553797236500ULL};
  CHECK(block_hashes(ids, 6, 2) == expected);
  CHECK(block_hashes({7}, 1, 1) == std::vector<uint64_t>{4953164456164915532ULL});
  // Only the complete blocks of ids[0, n).
  CHECK(block_hashes(ids, 5, 2) == std::vector<uint64_t>{expected[0], expected[1]});
  CHECK(block_hashes(ids, 4, 2) == std::vector<uint64_t>{expected[0], expected[1]});
  CHECK(block_hashes(ids, 1, 2).empty());
  CHECK(block_hashes(ids, 0, 2).empty());
  CHECK(block_hashes(ids, 6, 7).empty());
  CHECK(block_hashes(ids, 6, 6).size() == 1);
  // A change in block 0 changes every hash; one in block 2 only the last.
  const auto first = block_hashes({9, 2, 3, 4, 5, 6}, 6, 2);
  const auto last = block_hashes({1, 2, 3, 4, 5, 9}, 6, 2);
  for (size_t i = 0; i < 3; ++i) CHECK(first[i] != expected[i]);
  CHECK(last[0] == expected[0]);
  CHECK(last[1] == expected[1]);
  CHECK(last[2] != expected[2]);
  // Equal blocks after different prefixes hash apart.
  CHECK(block_hashes({1, 2, 9, 9}, 4, 2)[1] != block_hashes({3, 4, 9, 9}, 4, 2)[1]);
}

TEST_CASE("find reuses the longest shared prefix, at least a block, leaving a token to prefill",
          "[prefix_pool]") {
  PrefixPool pool(/*budget_bytes=*/1 << 20, /*block=*/4, /*max_rollback=*/kFar);
  const Ids t = run(100, 12);
  const RowState state = saved_row(12, 3);
  const at::Tensor keys = state.keys[0].clone();
  pool.insert(t, state);
  const PrefixMatch whole = pool.find(then(t, {7}));
  REQUIRE(whole.state != nullptr);
  CHECK(whole.reused == 12);
  CHECK(whole.state->length == 12);
  CHECK(at::equal(whole.state->keys[0], keys));
  CHECK(reused(pool, t) == 11);                                // the last token is prefilled
  CHECK(reused(pool, then(prefix(t, 10), {7, 8})) == 10);      // not a multiple of the block
  CHECK(reused(pool, then(prefix(t, 5), {7, 8, 9})) == 5);     // one block and a token
  CHECK(reused(pool, prefix(t, 5)) == 4);                      // exactly a block
  CHECK(reused(pool, then(prefix(t, 3), {7, 8, 9, 1})) == 0);  // less than a block
  CHECK(reused(pool, prefix(t, 4)) == 0);              // a block, but one token must be left
  CHECK(reused(pool, then({7}, prefix(t, 11))) == 0);  // differs at the first token
  CHECK(reused(pool, {}) == 0);
  CHECK(reused(pool, {100}) == 0);
  CHECK(pool.entries() == 1);
}

TEST_CASE("find takes the entry that shares the most with the prompt", "[prefix_pool]") {
  PrefixPool pool(/*budget_bytes=*/1 << 20, /*block=*/4, /*max_rollback=*/kFar);
  const Ids p = run(100, 8);
  put(pool, then(p, {1, 1, 1, 1}), 1);
  put(pool, then(p, {2, 2, 2, 2, 2, 2, 2, 2}), 2);
  put(pool, run(500, 8), 3);
  REQUIRE(pool.entries() == 3);
  const PrefixMatch b = pool.find(then(p, {2, 2, 2, 2, 2, 2, 9}));
  REQUIRE(b.state != nullptr);
  CHECK(b.reused == 14);
  CHECK(b.state->length == 16);
  const PrefixMatch a = pool.find(then(p, {1, 1, 1, 1, 7}));
  REQUIRE(a.state != nullptr);
  CHECK(a.reused == 12);
  CHECK(a.state->length == 12);
  const PrefixMatch shared = pool.find(then(p, {3}));
  REQUIRE(shared.state != nullptr);
  CHECK(shared.reused == 8);
  CHECK(reused(pool, then(run(500, 4), {0})) == 4);
}

TEST_CASE("an entry more than max_rollback longer than the shared part is no match",
          "[prefix_pool]") {
  PrefixPool pool(/*budget_bytes=*/1 << 20, /*block=*/4, /*max_rollback=*/3);
  const Ids t = run(100, 12);
  put(pool, t);
  CHECK(reused(pool, then(prefix(t, 9), {7})) == 9);  // rolled back by 3
  CHECK(reused(pool, then(prefix(t, 8), {7})) == 0);  // by 4: too deep
  // A shorter entry within reach serves instead (12 does not cover 8: 4 apart).
  put(pool, prefix(t, 8), 2);
  REQUIRE(pool.entries() == 2);
  const PrefixMatch m = pool.find(then(prefix(t, 8), {7}));
  REQUIRE(m.state != nullptr);
  CHECK(m.reused == 8);
  CHECK(m.state->length == 8);
}

TEST_CASE("insert keeps no sequence an entry covers and drops the entries it covers",
          "[prefix_pool]") {
  PrefixPool pool(/*budget_bytes=*/1 << 20, /*block=*/4, /*max_rollback=*/kFar);
  const Ids t = run(100, 16);
  put(pool, prefix(t, 12), 1);
  CHECK(pool.bytes() == full_bytes(12));
  put(pool, prefix(t, 8), 2);  // a prefix of an entry: covered, not saved
  CHECK(pool.entries() == 1);
  CHECK(pool.bytes() == full_bytes(12));
  CHECK(pool.find(then(prefix(t, 8), {1})).state->length == 12);
  put(pool, t, 3);  // extends the entry: the entry is dropped
  CHECK(pool.entries() == 1);
  CHECK(pool.bytes() == full_bytes(16));
  CHECK(pool.find(then(prefix(t, 12), {1})).state->length == 16);
  put(pool, prefix(t, 3), 4);  // shorter than a block: not saved
  CHECK(pool.entries() == 1);
  put(pool, run(300, 6), 5);  // unrelated: saved beside it
  CHECK(pool.entries() == 2);
  CHECK(pool.bytes() == full_bytes(16) + full_bytes(6));
  CHECK(pool.evictions() == 0);

  // Covering reaches only max_rollback tokens.
  PrefixPool near(/*budget_bytes=*/1 << 20, /*block=*/4, /*max_rollback=*/2);
  put(near, prefix(t, 12), 1);
  put(near, prefix(t, 8), 2);  // 4 shorter: not covered
  CHECK(near.entries() == 2);
  put(near, prefix(t, 10), 3);  // 2 shorter than 12: covered
  CHECK(near.entries() == 2);
  put(near, prefix(t, 14), 4);  // covers 12 (2 longer), not 8 (6 longer)
  CHECK(near.entries() == 2);
  CHECK(near.bytes() == full_bytes(8) + full_bytes(14));
  CHECK(near.find(then(prefix(t, 12), {1})).state->length == 14);
  CHECK(near.find(then(prefix(t, 8), {1})).state->length == 8);
}

TEST_CASE("insert evicts least recently used entries to keep the byte budget", "[prefix_pool]") {
  const int64_t one = full_bytes(8);
  PrefixPool pool(/*budget_bytes=*/3 * one, /*block=*/4, /*max_rollback=*/kFar);
  CHECK(pool.budget() == 3 * one);
  const Ids a = run(100, 8), b = run(200, 8), c = run(300, 8), d = run(400, 8), e = run(500, 8);
  put(pool, a);
  put(pool, b);
  put(pool, c);
  CHECK(pool.entries() == 3);
  CHECK(pool.bytes() == 3 * one);          // exactly the budget: all kept
  CHECK(reused(pool, then(a, {0})) == 8);  // a is now the most recently used
  put(pool, d);                            // evicts b, the least recently used
  CHECK(pool.evictions() == 1);
  CHECK(pool.entries() == 3);
  CHECK(pool.bytes() == 3 * one);
  CHECK(reused(pool, then(b, {0})) == 0);
  // Order now, most recent first: d, a, c. A covered insert refreshes its entry.
  put(pool, prefix(c, 6));
  CHECK(pool.entries() == 3);
  put(pool, e);  // evicts a
  CHECK(pool.evictions() == 2);
  CHECK(reused(pool, then(a, {0})) == 0);
  CHECK(reused(pool, then(c, {0})) == 8);
  CHECK(reused(pool, then(d, {0})) == 8);
  CHECK(reused(pool, then(e, {0})) == 8);
  // Two entries' room freed for one twice the size: the two least recent go.
  put(pool, run(600, 16));  // order before: e, d, c
  CHECK(pool.evictions() == 4);
  CHECK(pool.entries() == 2);
  CHECK(reused(pool, then(e, {0})) == 8);
  CHECK(pool.bytes() <= pool.budget());
}

TEST_CASE("an entry larger than the whole budget is not kept and evicts nothing", "[prefix_pool]") {
  PrefixPool pool(/*budget_bytes=*/full_bytes(12), /*block=*/4, /*max_rollback=*/kFar);
  put(pool, run(100, 8));
  put(pool, run(200, 13));  // one token over the budget
  CHECK(pool.entries() == 1);
  CHECK(pool.evictions() == 0);
  CHECK(pool.bytes() == full_bytes(8));
  CHECK(reused(pool, then(run(200, 13), {0})) == 0);
  put(pool, run(300, 12));  // exactly the budget: the other entry goes
  CHECK(pool.entries() == 1);
  CHECK(pool.evictions() == 1);
  CHECK(pool.bytes() == full_bytes(12));
}

TEST_CASE("state_bytes counts every layer's keys, values and slot positions", "[prefix_pool]") {
  CHECK(state_bytes(saved_row(5, 1)) == full_bytes(5));
  CHECK(state_bytes(saved_row(5, 1)) == 2 * (2 * 2 * 5 * 8 * 4 + 5 * 8));  // 1360
  CHECK(state_bytes(RowState{}) == 0);
  // A ring keeps its whole capacity (window 4 + chunk 3 - 1 = 6 slots), a full layer `length`.
  const CacheConfig hybrid = ConfigBuilder().max_batch(1).max_len(32).hybrid(4, 3);
  const int64_t ring = 2 * kKvHeads * 6 * kDim * 4 + 6 * 8;
  const int64_t full = 2 * kKvHeads * 5 * kDim * 4 + 5 * 8;
  CHECK(state_bytes(saved_row(5, 1, hybrid)) == ring + full);
  // Half keys and values count two bytes an element.
  const CacheConfig half = ConfigBuilder().max_batch(1).max_len(32).dtype(at::kHalf);
  CHECK(state_bytes(saved_row(5, 1, half)) == 2 * (2 * kKvHeads * 5 * kDim * 2 + 5 * 8));
}

TEST_CASE("the pool refuses a budget, block or state it cannot hold, naming it",
          "[prefix_pool][errors]") {
  require_error([] { PrefixPool(0, 4, 8); }, {"prefix_cache_bytes", "expected > 0", "got 0"});
  require_error([] { PrefixPool(-5, 4, 8); }, {"prefix_cache_bytes", "got -5"});
  require_error([] { PrefixPool(1024, 0, 8); }, {"prefix_block", "expected >= 1", "got 0"});
  PrefixPool pool(1 << 20, 4, 8);
  require_error([&] { pool.insert(run(100, 4), saved_row(5, 1)); },
                {"PrefixPool::insert", "expected 5 tokens (the state's length)", "got 4"});
  CHECK(pool.entries() == 0);
  CHECK(pool.bytes() == 0);
}
