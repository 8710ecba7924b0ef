#pragma once
// Shared by the benchmarks: synchronized timing, robust statistics, the
// side-by-side measurement loop and JSON output. Flags, devices and dtypes
// are statickv/flags/flags.hpp's, shared with statickv-demo.
//
// Variants are measured interleaved (round r times variant r, r+1, ... in
// turn), so a drift of the shared machine's speed hits all of them alike;
// ratios are the median over rounds of the per-round (paired) ratio, with
// p10..p90 as the spread. Times on a CUDA device are read only after
// torch::cuda::synchronize(), so a sample measures the work, not its launch.

#include <statickv/flags/flags.hpp>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>
#include <fmt/core.h>
#include <torch/cuda.h>
#include <torch/version.h>
#include <nlohmann/json.hpp>
#ifdef STATICKV_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace statickv::bench {

using Clock = std::chrono::steady_clock;

/// Results are written with the project's one JSON library; ordered_json
/// keeps members in insertion order, as the reports read them.
using Json = nlohmann::ordered_json;

/// Waits for queued device work, so a clock read after it measures the work
/// and not just its launch.
inline void sync(const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
}

/// Seconds since `start`, after waiting for the device.
inline double seconds_since(Clock::time_point start, const at::Device& device) {
  sync(device);
  return std::chrono::duration<double>(Clock::now() - start).count();
}

struct Stats {
  double median = 0, p10 = 0, p90 = 0;  // seconds per call (or a ratio)
  std::vector<double> samples;          // per round, in round order
};

inline Stats summarize(std::vector<double> samples) {
  if (samples.empty()) return Stats{};
  std::sort(samples.begin(), samples.end());
  auto at_fraction = [&](double f) {
    const size_t i = static_cast<size_t>(f * static_cast<double>(samples.size() - 1) + 0.5);
    return samples[std::min(i, samples.size() - 1)];
  };
  return Stats{at_fraction(0.5), at_fraction(0.1), at_fraction(0.9), {}};
}

/// summarize() that keeps the samples (in the order given).
inline Stats summarize_keep(const std::vector<double>& samples) {
  Stats s = summarize(samples);
  s.samples = samples;
  return s;
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
      const auto start = Clock::now();
      for (int c = 0; c < calls; ++c) variants[i].run();
      samples[i].push_back(seconds_since(start, device) / calls);
    }
  }
  std::vector<Stats> out;
  for (auto& s : samples) out.push_back(summarize_keep(s));
  return out;
}

/// Rotated rounds of `arms` arms: round r samples arm r, r + 1, ... in
/// turn (A-B-C, B-C-A, C-A-B), after one unkept sample of each.
/// `sample(i)` takes one sample of arm i (seconds per unit of work, timed
/// however the arm times itself). Returns per-arm stats in arm order.
inline std::vector<Stats> rotated_rounds(size_t arms, int rounds,
                                         const std::function<double(size_t)>& sample) {
  for (size_t i = 0; i < arms; ++i) sample(i);  // warm-up
  std::vector<std::vector<double>> samples(arms);
  for (int r = 0; r < rounds; ++r) {
    for (size_t j = 0; j < arms; ++j) {
      const size_t i = (j + static_cast<size_t>(r)) % arms;
      samples[i].push_back(sample(i));
    }
  }
  std::vector<Stats> out;
  for (auto& s : samples) out.push_back(summarize_keep(s));
  return out;
}

// Flags, devices and dtypes: the programs' one parser (statickv/flags/flags.hpp).
using flags::dtype_name;
using flags::FlagError;
using flags::Flags;
using flags::parse_device;
using flags::parse_dtype;
using flags::parse_int_list;

/// --threads N (statickv/flags/flags.hpp); apply with set_threads().
inline void add_threads_flag(flags::Flags& flags, int* threads) { flags.add_threads(threads); }
using flags::set_threads;

/// The attention stack the cache-only benchmarks time (Llama-3.2-1B's by default).
struct StackShape {
  int64_t layers = 16, heads = 32, kv_heads = 8, head_dim = 64;
};

/// --layers, --heads (unless `with_heads` is false), --kv-heads, --head-dim.
inline void add_stack_flags(flags::Flags& flags, StackShape* shape, bool with_heads = true) {
  flags.add("--layers N", &shape->layers, "layers per step", /*min=*/1);
  if (with_heads) flags.add("--heads N", &shape->heads, "query heads", /*min=*/1);
  flags.add("--kv-heads N", &shape->kv_heads, "key/value heads", /*min=*/1);
  flags.add("--head-dim N", &shape->head_dim, "head dimension", /*min=*/1);
}

/// Grouped-query attention needs whole groups: heads a multiple of kv-heads.
inline void check_stack(const StackShape& shape) {
  if (shape.heads % shape.kv_heads != 0) {
    throw flags::FlagError(fmt::format("--heads: expected a multiple of --kv-heads={} but got {}",
                                       shape.kv_heads, shape.heads));
  }
}

/// A decode step writes position `context`: it must lie in [1, max_len).
inline void check_context(int64_t context, int64_t max_len) {
  if (context < 1 || context >= max_len) {
    throw flags::FlagError(
        fmt::format("--context: expected a value in [1, max_len={}) but got {}", max_len, context));
  }
}

/// --json FILE (statickv/flags/flags.hpp): also write the results there.
inline void add_json_flag(flags::Flags& flags, std::string* path) {
  flags.add_output_file("--json FILE", path, "also write the results as JSON to FILE");
}

// ---------------------------------------------------------------------------
// JSON and the environment a number was measured in.

inline Json to_json(const Stats& s) {
  return Json::object({{"median", s.median}, {"p10", s.p10}, {"p90", s.p90}});
}

inline std::string today() {
  const std::time_t now = std::time(nullptr);
  char buf[32];
  std::strftime(buf, sizeof buf, "%Y-%m-%d", std::gmtime(&now));
  return buf;
}

inline std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind("model name", 0) == 0) {
      const size_t colon = line.find(':');
      if (colon != std::string::npos) return line.substr(colon + 2);
    }
  }
  return "unknown";
}

/// The GPU's name ("" on the CPU or without CUDA support).
inline std::string gpu_name(const at::Device& device) {
#ifdef STATICKV_HAS_CUDA
  if (device.is_cuda()) return at::cuda::getDeviceProperties(device.index())->name;
#endif
  (void)device;
  return "";
}

/// Where and when: LibTorch version, device (and GPU), CPU, threads, date (UTC).
inline Json environment(const at::Device& device) {
  Json env = Json::object({{"libtorch", TORCH_VERSION}, {"device", device.str()}});
  if (device.is_cuda()) env["gpu"] = gpu_name(device);
  env["cpu"] = cpu_model();
  env["cpu_threads"] = at::get_num_threads();
  env["date"] = today();
  return env;
}

/// The command line, for the record ("build/benchmarks/x --flag value").
inline std::string command_line(int argc, char** argv) {
  std::string out;
  for (int i = 0; i < argc; ++i) {
    if (i > 0) out += ' ';
    out += argv[i];
  }
  return out;
}

inline void write_json(const std::string& path, const Json& json) {
  if (path.empty()) return;
  std::ofstream out(path);
  if (!out) throw std::runtime_error("--json: cannot write " + path);
  out << json.dump(1) << "\n";
  fmt::print("wrote {}\n", path);
}

// Bytes per second of a device copy (read + write), the best of a few runs.
inline double copy_bandwidth(const at::Device& device) {
  const int64_t bytes = device.is_cuda() ? (int64_t{1} << 31) : (int64_t{1} << 28);
  const auto opts = at::TensorOptions().dtype(at::kByte).device(device);
  at::Tensor src = at::ones({bytes}, opts);
  at::Tensor dst = at::empty({bytes}, opts);
  dst.copy_(src);
  double best = 0;
  for (int i = 0; i < 5; ++i) {
    sync(device);
    const auto start = Clock::now();
    const int reps = device.is_cuda() ? 10 : 2;
    for (int r = 0; r < reps; ++r) dst.copy_(src);
    const double took = seconds_since(start, device);
    best = std::max(best, 2.0 * static_cast<double>(bytes) * reps / took);
  }
  return best;
}

/// "1.023 [0.981, 1.066]".
inline std::string ratio_text(const Stats& s) {
  return fmt::format("{:.3f} [{:.3f}, {:.3f}]", s.median, s.p10, s.p90);
}

}  // namespace statickv::bench
