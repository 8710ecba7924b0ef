#pragma once
// Shared by the benchmarks: device selection, synchronized timing, robust
// statistics and the side-by-side measurement loop.
//
// Variants are measured interleaved (round r times variant 0, 1, 2, ... in
// turn), so a drift of the shared machine's speed hits all of them alike;
// ratios of medians are what the benchmarks report.

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <fmt/core.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <functional>
#include <string>
#include <vector>

namespace statickv::bench {

/// Waits for queued device work, so a clock read after it measures the work
/// and not just its launch.
inline void sync(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

inline at::ScalarType parse_dtype(const std::string& name) {
  if (name == "float32" || name == "fp32") return at::kFloat;
  if (name == "float16" || name == "fp16") return at::kHalf;
  if (name == "bfloat16" || name == "bf16") return at::kBFloat16;
  throw std::invalid_argument("--dtype: expected fp32, fp16 or bf16 but got " + name);
}

inline at::Device parse_device(const std::string& name) {
  if (name == "auto") return torch::cuda::is_available() ? at::Device(at::kCUDA, 0) : at::kCPU;
  if (name == "cpu") return at::kCPU;
  if (name == "cuda") {
    if (!torch::cuda::is_available()) {
      throw std::invalid_argument("--device cuda: no CUDA device is available");
    }
    return at::Device(at::kCUDA, 0);
  }
  throw std::invalid_argument("--device: expected auto, cpu or cuda but got " + name);
}

struct Stats {
  double median = 0, p10 = 0, p90 = 0;  // seconds per call
  std::vector<double> samples;          // per round, in round order
};

inline Stats summarize(std::vector<double> samples) {
  std::sort(samples.begin(), samples.end());
  auto at_fraction = [&](double f) {
    const size_t i = static_cast<size_t>(f * static_cast<double>(samples.size() - 1) + 0.5);
    return samples[std::min(i, samples.size() - 1)];
  };
  return Stats{at_fraction(0.5), at_fraction(0.1), at_fraction(0.9), {}};
}

/// Median over rounds of a[r] / b[r]: each round's two samples were taken
/// back to back, so their ratio cancels the machine's drift between rounds.
inline Stats paired_ratio(const Stats& a, const Stats& b) {
  std::vector<double> ratios;
  for (size_t r = 0; r < a.samples.size() && r < b.samples.size(); ++r) {
    ratios.push_back(a.samples[r] / b.samples[r]);
  }
  return summarize(std::move(ratios));
}

/// A named thing to time: one call is one unit of work (a decode step).
struct Variant {
  std::string name;
  std::function<void()> run;
};

/// Times each variant `rounds` times, `calls` calls per sample, interleaved
/// in rotating order, after `warmup` untimed calls each. Returns per-call stats in input order.
inline std::vector<Stats> measure_interleaved(const std::vector<Variant>& variants,
                                              const at::Device& device, int rounds, int calls,
                                              int warmup) {
  for (const auto& v : variants) {
    for (int i = 0; i < warmup; ++i) v.run();
  }
  sync(device);
  std::vector<std::vector<double>> samples(variants.size());
  for (int r = 0; r < rounds; ++r) {
    // Each round starts at the next variant, so none always runs first.
    for (size_t j = 0; j < variants.size(); ++j) {
      const size_t i = (j + static_cast<size_t>(r)) % variants.size();
      sync(device);
      const auto start = std::chrono::steady_clock::now();
      for (int c = 0; c < calls; ++c) variants[i].run();
      sync(device);
      const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
      samples[i].push_back(took.count() / calls);
    }
  }
  std::vector<Stats> out;
  for (auto& s : samples) {
    Stats stats = summarize(s);
    stats.samples = std::move(s);
    out.push_back(std::move(stats));
  }
  return out;
}

inline std::string dtype_name(at::ScalarType dtype) {
  switch (dtype) {
    case at::kFloat:
      return "fp32";
    case at::kHalf:
      return "fp16";
    case at::kBFloat16:
      return "bf16";
    default:
      return c10::toString(dtype);
  }
}

}  // namespace statickv::bench
