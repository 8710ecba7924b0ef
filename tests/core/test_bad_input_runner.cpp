// Bad input to GraphRunner: every bad argument is named and leaves the cache
// and the runner's stats unchanged; impossible specs and steps are refused.

#include "bad_input.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <new>

using namespace statickv;
using namespace statickv::test;
using namespace statickv::test::bad_input;

namespace {

// Bad inputs of a runner over a hybrid cache (2 kv heads of 8, 4 query
// heads; batch, q and attend buckets up to 4, 8 and 32); `pos`, `kv` and `q`
// are a good step's inputs, which the calls outlive.
std::vector<Bad> bad_inputs(GraphRunner& runner, const at::Tensor& pos, const at::Tensor& kv,
                            const at::Tensor& q) {
  return {
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
  };
}

// Bad sizes past (or below) the runner's buckets, bad keys, and positions
// the cache refuses.
std::vector<Bad> bad_sizes(GraphRunner& runner, const at::Tensor& pos, const at::Tensor& kv,
                           const at::Tensor& q) {
  return {
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
  };
}

}  // namespace

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
  expect_errors(bad_inputs(runner, pos, kv, q));
  expect_errors(bad_sizes(runner, pos, kv, q));
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
