#pragma once
// statickv-demo's speed comparison: the cached run and its DynamicCache
// baseline timed in interleaved rounds, each on its own warm session, and
// the ratio of their decode times with its spread (docs/decoder.md,
// "Timing rounds").

#include "load.hpp"

#include <statickv/engine/generator.hpp>

#include <cstdint>
#include <vector>

namespace statickv::demo {

/// Decode seconds per generated token of each round, ours and the baseline's.
struct RoundTimes {
  std::vector<double> ours, baseline;
};

/// `rounds` rounds of one generate call per session (ours, the baseline),
/// the order alternating from round to round so neither always runs first,
/// after one untimed call each. Both sessions decode the run's prompts from
/// scratch (no prompt-cache file).
RoundTimes time_rounds(const Loaded& run, const reference::GenerateOptions& ours,
                       const reference::GenerateOptions& baseline, int64_t rows, int64_t max_len,
                       int64_t rounds);

/// Prints ours / baseline per round, median [min, max], and what it means:
/// faster, slower, or no measurable difference (the spread covers 1.0); when
/// the static cache is slower, the modes where its advantage shows.
void report_rounds(const char* name, const RoundTimes& times, at::Device device, bool eager);

}  // namespace statickv::demo
