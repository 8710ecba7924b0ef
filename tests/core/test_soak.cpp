// Churn soak: one max_batch-row HybridCache serves sequences that join,
// prefill in chunks, decode, fork (copy_row), are reordered (beam search),
// finish and are aborted at random, for thousands of steps, as a serving
// process does for days. Every step's attention output for every live token,
// in a sliding and a full layer, is compared with a reference that keeps
// every token; bookkeeping and buffer addresses are checked every step.

#include "support.hpp"

#include <algorithm>
#include <random>

using namespace statickv;
using namespace statickv::test;

namespace {

constexpr int64_t kMaxBatch = 8;
constexpr int64_t kMaxLen = 96;
constexpr int64_t kWindow = 8;
constexpr int64_t kChunk = 6;
constexpr int64_t kSteps = 5000;

// What the serving loop knows about a row.
struct Row {
  bool active = false;
  int64_t length = 0;  // positions 0 .. length-1 are stored
  int64_t target = 0;  // the sequence finishes at this length
  int64_t prompt = 0;  // prompt tokens still to prefill
};

struct Counts {
  int64_t steps = 0, tokens = 0, joins = 0, finishes = 0, forks = 0, aborts = 0, reorders = 0;
};

// The serving loop: one cache, a keep-every-token reference per layer kind,
// what the loop knows about each row, and its random choices.
struct Soak {
  Soak()
      : cache(ConfigBuilder().max_batch(kMaxBatch).max_len(kMaxLen).hybrid(kWindow, kChunk)),
        ref_sliding(kMaxBatch, kKvHeads, kMaxLen, kDim, kWindow),
        ref_full(kMaxBatch, kKvHeads, kMaxLen, kDim, /*window=*/0),
        rows(kMaxBatch),
        rng(20261201) {
    at::manual_seed(20261201);
  }

  int64_t uniform(int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  }
  bool chance(double p) { return std::bernoulli_distribution(p)(rng); }
  void reset(const std::vector<int64_t>& which) {
    cache.reset_rows(at::tensor(which, i64()));
    for (int64_t r : which) {
      ref_sliding.reset_row(r);
      ref_full.reset_row(r);
      rows[r] = Row{};
    }
  }
  int64_t pick(bool want_active, bool decoding) {
    std::vector<int64_t> candidates;
    for (int64_t r = 0; r < kMaxBatch; ++r) {
      if (rows[r].active == want_active && (!decoding || rows[r].prompt == 0)) {
        candidates.push_back(r);
      }
    }
    if (candidates.empty()) return -1;
    return candidates[static_cast<size_t>(uniform(0, static_cast<int64_t>(candidates.size()) - 1))];
  }

  // Between steps: sequences finish, are aborted, fork, are reordered and join.
  void churn() {
    // Finished sequences leave together, in one reset_rows.
    std::vector<int64_t> done;
    for (int64_t r = 0; r < kMaxBatch; ++r) {
      if (rows[r].active && rows[r].prompt == 0 && rows[r].length >= rows[r].target) {
        done.push_back(r);
      }
    }
    if (!done.empty()) {
      reset(done);
      n.finishes += static_cast<int64_t>(done.size());
    }
    // A client goes away mid-sequence.
    for (int64_t r = 0; r < kMaxBatch; ++r) {
      if (rows[r].active && chance(0.004)) {
        reset({r});
        ++n.aborts;
      }
    }
    // Parallel sampling: a decoding sequence forks into a free row.
    if (chance(0.05)) {
      const int64_t src = pick(/*want_active=*/true, /*decoding=*/true);
      const int64_t dst = pick(/*want_active=*/false, /*decoding=*/false);
      if (src >= 0 && dst >= 0 && rows[src].length < kMaxLen) {
        cache.copy_row(src, dst);
        ref_sliding.copy_row(src, dst);
        ref_full.copy_row(src, dst);
        rows[dst] = rows[src];
        rows[dst].target = uniform(rows[src].length + 1, kMaxLen);
        ++n.forks;
      }
    }
    // Beam search: every row becomes some row, repeats allowed.
    if (chance(0.01)) {
      std::vector<int64_t> order;
      for (int64_t i = 0; i < kMaxBatch; ++i) order.push_back(uniform(0, kMaxBatch - 1));
      cache.reorder(at::tensor(order, i64()));
      ref_sliding.reorder(order);
      ref_full.reorder(order);
      const std::vector<Row> old = rows;
      for (int64_t i = 0; i < kMaxBatch; ++i) rows[i] = old[order[i]];
      ++n.reorders;
    }
    // New requests take free rows.
    for (int64_t r = 0; r < kMaxBatch; ++r) {
      if (!rows[r].active && chance(0.1)) {
        rows[r].active = true;
        rows[r].target = uniform(2, kMaxLen);
        rows[r].prompt = uniform(1, std::min<int64_t>(rows[r].target, 24));
        ++n.joins;
      }
    }
  }

  // One step's positions [live, q]: prefilling rows feed a chunk, decoding
  // rows one token, free rows and the rest of short rows are padding (-1),
  // at random columns. Advances the rows; `highest` gets the longest row.
  at::Tensor step_positions(int64_t live, int64_t* highest) {
    std::vector<int64_t> count(static_cast<size_t>(live), 0);
    for (int64_t r = 0; r < live; ++r) {
      if (!rows[r].active) continue;
      count[r] = rows[r].prompt > 0 ? uniform(1, std::min(rows[r].prompt, kChunk)) : 1;
    }
    const int64_t q = *std::max_element(count.begin(), count.end());
    std::vector<int64_t> pos_values(static_cast<size_t>(live * q), -1);
    for (int64_t r = 0; r < live; ++r) {
      const int64_t offset = uniform(0, q - count[r]);
      for (int64_t t = 0; t < count[r]; ++t) pos_values[r * q + offset + t] = rows[r].length + t;
      rows[r].length += count[r];
      rows[r].prompt = std::max<int64_t>(rows[r].prompt - count[r], 0);
      *highest = std::max(*highest, rows[r].length);
      n.tokens += count[r];
    }
    return at::tensor(pos_values, i64()).view({live, q});
  }

  // One step of every active row, checked against the references; false
  // when no row is active (no step).
  template <typename Addresses>
  bool step(const Addresses& before) {
    int64_t live = 0;
    for (int64_t r = 0; r < kMaxBatch; ++r) {
      if (rows[r].active) live = r + 1;
    }
    if (live == 0) return false;
    int64_t highest = 0;
    const at::Tensor pos = step_positions(live, &highest);
    const int64_t q = pos.size(1);
    // Full layers attend a 16-aligned prefix, as attend-length buckets do.
    const int64_t attend = std::min<int64_t>((highest + 15) / 16 * 16, kMaxLen);

    const at::Tensor key = at::randn({live, kKvHeads, q, kDim});
    const at::Tensor value = at::randn({live, kKvHeads, q, kDim});
    const at::Tensor key2 = at::randn({live, kKvHeads, q, kDim});
    const at::Tensor query = at::randn({live, kHeads, q, kDim});
    StepPlan plan = cache.prepare(pos, live, attend);
    KV slide = cache.update(0, key, value, plan);
    KV full = cache.update(1, key2, value, plan);
    ref_sliding.write(pos, key, value);
    ref_full.write(pos, key2, value);
    const at::Tensor real = pos.ge(0).view({live, 1, q, 1});
    const at::Tensor zero = at::zeros({}, f32());
    const double d_sliding = max_diff(
        at::where(real, sdpa_attention(query, slide.keys, slide.values, plan.mask(0)), zero),
        at::where(real, ref_sliding.attend(query, pos), zero));
    const double d_full = max_diff(
        at::where(real, reference_attention(query, full.keys, full.values, plan.mask(1)), zero),
        at::where(real, ref_full.attend(query, pos), zero));
    std::vector<int64_t> lengths;
    for (const Row& row : rows) lengths.push_back(row.length);
    INFO("step " << n.steps << " positions " << pos);
    REQUIRE(d_sliding <= 1e-5);
    REQUIRE(d_full <= 1e-5);
    REQUIRE(at::equal(cache.seq_lengths(), at::tensor(lengths, i64())));
    REQUIRE(addresses(cache) == before);
    worst = std::max({worst, d_sliding, d_full});
    return true;
  }

  HybridCache cache;
  ReferenceLayer ref_sliding, ref_full;
  std::vector<Row> rows;
  std::mt19937_64 rng;
  Counts n;
  double worst = 0;
};

}  // namespace

TEST_CASE("thousands of churned steps in a max_batch-row cache match a keep-every-token reference",
          "[soak]") {
  Soak soak;
  const Counts& n = soak.n;
  const auto before = addresses(soak.cache);
  while (n.steps < kSteps) {
    soak.churn();
    if (soak.step(before)) ++soak.n.steps;
  }
  INFO("tokens " << n.tokens << " joins " << n.joins << " finishes " << n.finishes << " forks "
                 << n.forks << " aborts " << n.aborts << " reorders " << n.reorders
                 << " worst diff " << soak.worst);
  CHECK(n.steps == kSteps);
  // The run really churned: every kind of event happened many times.
  CHECK(n.tokens > 5 * kSteps);
  CHECK(n.joins > 200);
  CHECK(n.finishes > 100);
  CHECK(n.forks > 50);
  CHECK(n.aborts > 20);
  CHECK(n.reorders > 10);
}
