// CpuThreads (<statickv/engine/cpu_threads.hpp>, Note [threads beside a
// co-tenant]): the rule, the arithmetic of other processes' CPU time, the
// two-look hysteresis that sets LibTorch's thread count, and a Scheduler
// with fit_threads answering what one without it answers.

#include <statickv/engine/cpu_threads.hpp>
#include <statickv/engine/scheduler.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/model/model.hpp>

#include "support.hpp"

#include <ATen/Parallel.h>

#include <chrono>
#include <deque>
#include <map>
#include <memory>
#include <utility>

using namespace statickv;
using namespace statickv::reference;

namespace {

/// Restores LibTorch's thread count when a test ends.
struct KeepThreads {
  int threads = at::get_num_threads();
  ~KeepThreads() { at::set_num_threads(threads); }
};

/// Samples one second apart in which other processes keep `others[i]` CPUs busy.
CpuThreads::Sampler fake_machine(std::deque<double> others) {
  auto state =
      std::make_shared<std::pair<CpuSample, std::deque<double>>>(CpuSample{}, std::move(others));
  return [state]() -> std::optional<CpuSample> {
    CpuSample& s = state->first;
    if (s.wall > 0 || s.busy > 0) {  // the first call is the starting point
      if (state->second.empty()) return std::nullopt;
      s.busy += state->second.front() + 0.5;  // this process: half a CPU
      s.self += 0.5;
      state->second.pop_front();
    }
    s.wall += 1.0;
    return s;
  };
}

}  // namespace

TEST_CASE("the rule gives one thread fewer for each CPU other processes keep busy, at least one",
          "[cpu_threads]") {
  CHECK(threads_for(2, 0.0) == 2);
  CHECK(threads_for(2, 0.4) == 2);
  CHECK(threads_for(2, 0.6) == 1);
  CHECK(threads_for(2, 1.0) == 1);
  CHECK(threads_for(2, 3.0) == 1);
  CHECK(threads_for(4, 1.4) == 3);
  CHECK(threads_for(1, 0.0) == 1);
  CHECK(threads_for(2, -0.5) == 2);
}

TEST_CASE("others' CPUs are the busy time less this process's, over the wall time",
          "[cpu_threads]") {
  CHECK(others_busy({0, 10, 3}, {2, 13, 4}) == 1.0);  // 3 busy seconds, 1 of them ours, in 2
  CHECK(others_busy({0, 10, 3}, {2, 11, 4}) == 0.0);  // tick rounding: never below 0
  CHECK(others_busy({5, 10, 3}, {5, 12, 3}) == 0.0);  // no wall time
}

TEST_CASE("CpuThreads changes the count after two looks agree, and gives the threads back",
          "[cpu_threads]") {
  const KeepThreads keep;
  at::set_num_threads(2);
  CpuThreads threads(2, 1e-9, fake_machine({1.0, 1.0, 0.0, 1.0, 0.0, 0.0}));
  CHECK(threads.update() == 2);  // one look at a busy CPU: not yet
  CHECK(threads.update() == 1);  // two in a row
  CHECK(at::get_num_threads() == 1);
  CHECK(threads.update() == 1);  // idle once, then busy again: no change
  CHECK(threads.update() == 1);
  CHECK(threads.update() == 1);  // idle twice: the thread comes back
  CHECK(threads.update() == 2);
  CHECK(at::get_num_threads() == 2);
  CHECK(threads.changes() == 2);
  CHECK(threads.others() == 0.0);
  CHECK(threads.update() == 2);  // the sampler has no more: the count stays
}

TEST_CASE("CpuThreads refuses a count below 1 and an interval that is not positive",
          "[cpu_threads]") {
  test::require_error([] { CpuThreads t(0); }, {"max_threads", ">= 1", "got 0"});
  test::require_error([] { CpuThreads t(2, 0.0); }, {"interval_s", "> 0", "got 0"});
}

TEST_CASE("sample_cpus reads this machine: this process's CPU time grows as it works",
          "[cpu_threads]") {
  const std::optional<CpuSample> before = sample_cpus();
#if defined(__linux__)
  REQUIRE(before.has_value());
  const auto until = std::chrono::steady_clock::now() + std::chrono::milliseconds(100);
  volatile double sink = 0;
  while (std::chrono::steady_clock::now() < until) sink = sink + 1.0;
  const std::optional<CpuSample> after = sample_cpus();
  REQUIRE(after.has_value());
  CHECK(after->self - before->self >= 0.05);
  CHECK(after->busy >= before->busy);
  CHECK(others_busy(*before, *after) >= 0.0);
#else
  CHECK_FALSE(before.has_value());
#endif
}

TEST_CASE("a Scheduler that fits its threads answers what one with fixed threads answers",
          "[cpu_threads][serving]") {
  const KeepThreads keep;
  ModelConfig config = named_config("tiny");
  const LlamaModel model(config, random_weights(config, 3, at::kFloat, at::kCPU));
  auto run = [&](bool fit) {
    SchedulerOptions options;
    options.max_batch = 3;
    options.max_len = 48;
    options.fit_threads = fit;
    Scheduler scheduler(model, options);
    for (int i = 0; i < 3; ++i) {
      Request r;
      r.id = std::to_string(i);
      r.prompt = {1 + i, 5, 9, 2 + i};
      r.max_new_tokens = 12;
      r.stop = std::vector<int64_t>{};
      scheduler.submit(r);
    }
    scheduler.run_until_idle();
    std::map<std::string, std::vector<int64_t>> out;
    for (const Completion& c : scheduler.take_finished()) out[c.id] = c.tokens;
    return std::make_pair(out, scheduler.stats());
  };
  const auto [fixed, fixed_stats] = run(false);
  const auto [fitted, fitted_stats] = run(true);
  CHECK(fitted == fixed);
  CHECK(fixed_stats.max_threads == 0);
  CHECK(fitted_stats.max_threads == keep.threads);
  CHECK(fitted_stats.threads >= 1);
  CHECK(fitted_stats.threads <= fitted_stats.max_threads);
}
