// statickv-demo's timing rounds (rounds.hpp).

#include "rounds.hpp"

#include <fmt/format.h>

#include <algorithm>

namespace statickv::demo {

using namespace statickv::reference;

namespace {

/// Decode seconds per token after each row's first (speculation's steps
/// carry several tokens, so time per token, not per step, compares).
double decode_seconds_per_token(const GenerateResult& r) {
  int64_t tokens = 0;
  for (const auto& row : r.tokens)
    tokens += std::max<int64_t>(0, static_cast<int64_t>(row.size()) - 1);
  return tokens > 0 ? r.decode_seconds / static_cast<double>(tokens) : 0.0;
}

struct Spread {
  double median = 0, min = 0, max = 0;
};

Spread spread_of(std::vector<double> values) {
  std::sort(values.begin(), values.end());
  return {values[(values.size() - 1) / 2], values.front(), values.back()};
}

}  // namespace

RoundTimes time_rounds(const Loaded& run, const GenerateOptions& ours,
                       const GenerateOptions& baseline, int64_t rows, int64_t max_len,
                       int64_t rounds) {
  Generator mine(*run.model, ours, rows, max_len);
  Generator theirs(*run.model, baseline, rows, max_len);
  mine.generate(run.prompts);  // warm: graphs, kernel choices, allocator
  theirs.generate(run.prompts);
  RoundTimes times;
  for (int64_t r = 0; r < rounds; ++r) {
    auto time = [&](Generator& session, std::vector<double>& into) {
      into.push_back(decode_seconds_per_token(session.generate(run.prompts)));
    };
    if (r % 2 == 0) {
      time(mine, times.ours);
      time(theirs, times.baseline);
    } else {
      time(theirs, times.baseline);
      time(mine, times.ours);
    }
  }
  return times;
}

void report_rounds(const char* name, const RoundTimes& times, at::Device device, bool eager) {
  std::vector<double> ratios;
  for (size_t r = 0; r < times.ours.size(); ++r) {
    if (times.baseline[r] > 0) ratios.push_back(times.ours[r] / times.baseline[r]);
  }
  if (ratios.empty()) return;  // one token per prompt: no decode steps to time
  const Spread ratio = spread_of(ratios), mine = spread_of(times.ours),
               theirs = spread_of(times.baseline);
  fmt::print(
      "speed: decode {:.3f} ms/token {} vs {:.3f} dynamic (medians); {} / dynamic per round over "
      "{} interleaved rounds: {:.3f} [{:.3f}, {:.3f}]: ",
      mine.median * 1e3, name, theirs.median * 1e3, name, ratios.size(), ratio.median, ratio.min,
      ratio.max);
  if (ratio.max < 1.0) {
    fmt::print("{} is {:.2f}x faster\n", name, 1.0 / ratio.median);
  } else if (ratio.min <= 1.0) {
    fmt::print("no measurable difference (the spread covers 1.0)\n");
  } else {
    fmt::print("{} is {:.2f}x slower here\n", name, ratio.median);
  }
  if (ratio.max >= 1.0) {
    const bool graphs = device.is_cuda() && !eager;
    fmt::print(
        "speed: where the {} cache gains: {}; and the dynamic cache copies every key "
        "and value into a new buffer each step (torch.cat) while the {} cache reads a fixed, "
        "masked window, so the gain grows with the context (--max-new-tokens 1024)\n",
        name,
        graphs ? "each step replays a captured CUDA graph (stable addresses)"
               : "on a GPU without --eager, each step replays one captured CUDA graph",
        name);
  }
}

}  // namespace statickv::demo
