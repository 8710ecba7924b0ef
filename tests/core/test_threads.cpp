// Threads: what may be shared. Independent caches share nothing and may run
// on several threads at once; one cache may move between threads when the
// caller serializes its use; a ShapeBuckets is immutable and read from any
// thread. Catch2 assertions are not thread-safe, so workers report results
// that the main thread checks.

#include "support.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <atomic>
#include <mutex>
#include <optional>
#include <random>
#include <thread>

using namespace statickv;
using namespace statickv::test;

namespace {

constexpr int64_t kMaxBatch = 4;
constexpr int64_t kMaxLen = 48;
constexpr int kThreads = 4;

// A cache with its references and the lengths of its rows: what one
// sequence of random steps needs.
struct Driven {
  HybridCache cache{
      ConfigBuilder().max_batch(kMaxBatch).max_len(kMaxLen).hybrid(/*window=*/5, /*chunk=*/4)};
  ReferenceLayer sliding{kMaxBatch, kKvHeads, kMaxLen, kDim, /*window=*/5};
  ReferenceLayer full{kMaxBatch, kKvHeads, kMaxLen, kDim, /*window=*/0};
  std::vector<int64_t> length = std::vector<int64_t>(kMaxBatch, 0);
};

// One random operation (a row operation or a step), values from `gen`.
// Returns the step's largest attention difference from the references.
double random_op(Driven& d, std::mt19937_64& rng, at::Generator& gen, const ShapeBuckets& attend) {
  auto uniform = [&](int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  const int64_t kind = uniform(0, 9);
  if (kind == 0) {
    const int64_t row = uniform(0, kMaxBatch - 1);
    d.cache.reset_rows(positions({row}));
    d.sliding.reset_row(row);
    d.full.reset_row(row);
    d.length[row] = 0;
    return 0;
  }
  if (kind == 1) {
    const int64_t src = uniform(0, kMaxBatch - 1);
    const int64_t dst = uniform(0, kMaxBatch - 1);
    d.cache.copy_row(src, dst);
    d.sliding.copy_row(src, dst);
    d.full.copy_row(src, dst);
    d.length[dst] = d.length[src];
    return 0;
  }
  const int64_t b = uniform(1, kMaxBatch);
  const int64_t q = uniform(1, 4);
  std::vector<int64_t> values(static_cast<size_t>(b * q), -1);
  int64_t highest = 1;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t n = std::min(uniform(0, q), kMaxLen - d.length[r]);
    for (int64_t t = 0; t < n; ++t) values[r * q + t] = d.length[r] + t;
    d.length[r] += n;
    highest = std::max(highest, d.length[r]);
  }
  const at::Tensor pos = at::tensor(values, i64()).view({b, q});
  const at::Tensor key = at::randn({b, kKvHeads, q, kDim}, gen);
  const at::Tensor value = at::randn({b, kKvHeads, q, kDim}, gen);
  const at::Tensor query = at::randn({b, kHeads, q, kDim}, gen);
  StepPlan step = d.cache.prepare(pos, b, attend.round_up(highest));
  KV s = d.cache.update(0, key, value, step);
  KV f = d.cache.update(1, value, key, step);
  d.sliding.write(pos, key, value);
  d.full.write(pos, value, key);
  const at::Tensor real = pos.ge(0).view({b, 1, q, 1});
  const at::Tensor zero = at::zeros({}, f32());
  return std::max(
      max_diff(at::where(real, sdpa_attention(query, s.keys, s.values, step.mask(0)), zero),
               at::where(real, d.sliding.attend(query, pos), zero)),
      max_diff(at::where(real, reference_attention(query, f.keys, f.values, step.mask(1)), zero),
               at::where(real, d.full.attend(query, pos), zero)));
}

struct Result {
  double worst = 0;
  int64_t ops = 0;
  std::string error;
  std::optional<Snapshot> state;  // every buffer and the bookkeeping at the end
};

// `ops` random operations on a private cache, with a private generator.
Result drive(uint64_t seed, int64_t ops, const ShapeBuckets& attend) {
  Result out;
  try {
    Driven d;
    std::mt19937_64 rng(seed);
    at::Generator gen = at::detail::createCPUGenerator(seed);
    for (; out.ops < ops; ++out.ops)
      out.worst = std::max(out.worst, random_op(d, rng, gen, attend));
    out.state.emplace(d.cache);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

}  // namespace

TEST_CASE("independent caches driven from several threads at once equal their sequential runs",
          "[threads]") {
  constexpr int64_t kOps = 150;
  // One ShapeBuckets, shared read-only by every worker.
  const ShapeBuckets attend = ShapeBuckets::multiples_of(8, kMaxLen);
  std::vector<Result> alone;
  for (int t = 0; t < kThreads; ++t) alone.push_back(drive(1000 + t, kOps, attend));

  std::vector<Result> together(kThreads);
  std::atomic<int> ready{0};
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      // Start together, so the workers really overlap.
      ready.fetch_add(1);
      while (ready.load() < kThreads) std::this_thread::yield();
      together[t] = drive(1000 + t, kOps, attend);
    });
  }
  for (auto& thread : threads) thread.join();

  for (int t = 0; t < kThreads; ++t) {
    INFO("worker " << t << ": " << together[t].error);
    REQUIRE(alone[t].error.empty());
    REQUIRE(together[t].error.empty());
    CHECK(together[t].ops == kOps);
    CHECK(together[t].worst <= 1e-5);
    CHECK(together[t].worst == alone[t].worst);
    REQUIRE(together[t].state.has_value());
    REQUIRE(alone[t].state.has_value());
    CHECK(*together[t].state == *alone[t].state);
  }
}

TEST_CASE("one cache handed between threads under the caller's lock stays exact", "[threads]") {
  constexpr int64_t kOpsPerThread = 40;
  const ShapeBuckets attend = ShapeBuckets::multiples_of(8, kMaxLen);
  Driven shared;
  std::mutex lock;  // the caller's: a cache and its Steps are not synchronized
  std::mt19937_64 rng(77);
  at::Generator gen = at::detail::createCPUGenerator(77);
  std::vector<Result> results(kThreads);
  std::vector<std::thread> threads;
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        for (int64_t i = 0; i < kOpsPerThread; ++i) {
          const std::lock_guard<std::mutex> hold(lock);
          results[t].worst = std::max(results[t].worst, random_op(shared, rng, gen, attend));
          ++results[t].ops;
        }
      } catch (const std::exception& e) {
        results[t].error = e.what();
      }
    });
  }
  for (auto& thread : threads) thread.join();
  for (int t = 0; t < kThreads; ++t) {
    INFO("thread " << t << ": " << results[t].error);
    CHECK(results[t].error.empty());
    CHECK(results[t].ops == kOpsPerThread);
    CHECK(results[t].worst <= 1e-5);
  }
}
