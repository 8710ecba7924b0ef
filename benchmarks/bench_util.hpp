#pragma once
// Shared by the benchmarks: device selection, synchronized timing, robust
// statistics, the side-by-side measurement loop, flags and JSON output
// (nlohmann-json, as everywhere in the project).
//
// Variants are measured interleaved (round r times variant r, r+1, ... in
// turn), so a drift of the shared machine's speed hits all of them alike;
// ratios are the median over rounds of the per-round (paired) ratio, with
// p10..p90 as the spread. Times on a CUDA device are read only after
// torch::cuda::synchronize(), so a sample measures the work, not its launch.

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

// ---------------------------------------------------------------------------
// Flags: every benchmark takes `--name value` flags and `--help`.

class Flags {
 public:
  Flags(std::string program, std::string summary)
      : program_(std::move(program)), summary_(std::move(summary)) {}

  void add(const std::string& name, std::string* target, const std::string& help) {
    add_setter(name, help, "'" + *target + "'", [target](const std::string& v) { *target = v; });
  }
  void add(const std::string& name, int64_t* target, const std::string& help) {
    add_setter(name, help, std::to_string(*target),
               [target, name](const std::string& v) { *target = to_int(name, v); });
  }
  void add(const std::string& name, int* target, const std::string& help) {
    add_setter(name, help, std::to_string(*target), [target, name](const std::string& v) {
      *target = static_cast<int>(to_int(name, v));
    });
  }
  void add(const std::string& name, double* target, const std::string& help) {
    add_setter(name, help, fmt::format("{}", *target), [target, name](const std::string& v) {
      try {
        size_t used = 0;
        *target = std::stod(v, &used);
        if (used == v.size()) return;
      } catch (const std::exception&) {
      }
      throw std::invalid_argument(name + ": expected a number but got '" + v + "'");
    });
  }
  /// A switch: present = true (no value).
  void add_switch(const std::string& name, bool* target, const std::string& help) {
    switches_[name] = target;
    usage_.push_back({name, help});
  }

  void parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      const std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::fputs(usage().c_str(), stdout);
        std::exit(0);
      }
      if (auto s = switches_.find(arg); s != switches_.end()) {
        *s->second = true;
        continue;
      }
      auto it = setters_.find(arg);
      if (it == setters_.end()) {
        throw std::invalid_argument("unknown flag " + arg + " (see --help)");
      }
      if (i + 1 >= argc) throw std::invalid_argument(arg + ": expected a value");
      it->second(argv[++i]);
    }
  }

  std::string usage() const {
    std::string out = program_ + ": " + summary_ + "\n\n";
    for (const auto& [name, help] : usage_) out += fmt::format("  {:<22} {}\n", name, help);
    out += fmt::format("  {:<22} {}\n", "--help", "this text");
    return out;
  }

  static int64_t to_int(const std::string& name, const std::string& v) {
    size_t used = 0;
    int64_t out = 0;
    try {
      out = std::stoll(v, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (v.empty() || used != v.size()) {
      throw std::invalid_argument(name + ": expected an integer but got '" + v + "'");
    }
    return out;
  }

  /// "128,256,1024" -> {128, 256, 1024}.
  static std::vector<int64_t> int_list(const std::string& name, const std::string& v) {
    std::vector<int64_t> out;
    size_t begin = 0;
    while (begin <= v.size()) {
      const size_t end = std::min(v.find(',', begin), v.size());
      out.push_back(to_int(name, v.substr(begin, end - begin)));
      begin = end + 1;
    }
    return out;
  }

 private:
  void add_setter(const std::string& name, const std::string& help, const std::string& value,
                  std::function<void(const std::string&)> set) {
    setters_[name] = std::move(set);
    usage_.push_back({name + " V", help + " (default " + value + ")"});
  }

  std::string program_, summary_;
  std::map<std::string, std::function<void(const std::string&)>> setters_;
  std::map<std::string, bool*> switches_;
  std::vector<std::pair<std::string, std::string>> usage_;
};

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

/// "1.023 [0.981, 1.066]".
inline std::string ratio_text(const Stats& s) {
  return fmt::format("{:.3f} [{:.3f}, {:.3f}]", s.median, s.p10, s.p90);
}

}  // namespace statickv::bench
