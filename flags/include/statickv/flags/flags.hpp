#pragma once
// Command-line flags, devices and dtypes for statickv's programs: the apps
// (apps/: statickv-demo, statickv-serve) and the benchmarks (benchmarks/). One parser, so every
// flag of every binary refuses what it cannot honour the same way: a message
// that names the flag, what it expects and what it got, and exit status 2
// (fail()). Nothing is silently replaced by a default: a number with trailing
// garbage, out of range or not finite is an error, never a best guess.
//
// Flags take `--name value` or `--name=value`; switches take no value;
// `--help` prints the usage and exits 0. Checks that involve two flags
// (--context against --max-len) stay with the program, which throws
// FlagError naming the flag it blames.
//
// Our own rather than CLI11 or cxxopts (both in Debian 12): the GPU machine
// has no network and gets every Debian package unpacked by
// benchmarks/gpu/prep.sh, and either library would still need this file's
// finite-number and range checks and error wording; what is left is small.
//
// The statickv library never includes this; the CMake target statickv_flags
// (flags/CMakeLists.txt) carries it to the programs.

#include <statickv/config.hpp>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <c10/util/Exception.h>
#include <fmt/format.h>
#include <torch/cuda.h>

#include <algorithm>
#include <cctype>
#include <cerrno>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <vector>

namespace statickv::apps {

/// A command line the program cannot honour; fail() prints it, exit status 2.
class FlagError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {

/// " >= 0", " in [1, 16]", "" for an unbounded range.
template <typename T>
std::string range_text(T min, T max) {
  const bool low = min > std::numeric_limits<T>::lowest();
  const bool high = max < std::numeric_limits<T>::max();
  if (low && high) return fmt::format(" in [{}, {}]", min, max);
  if (low) return fmt::format(" >= {}", min);
  if (high) return fmt::format(" <= {}", max);
  return "";
}

inline bool starts_with_space(const std::string& text) {
  return !text.empty() && std::isspace(static_cast<unsigned char>(text[0]));
}

}  // namespace detail

/// `text` as a whole decimal integer of type T in [min, max]; anything else
/// (trailing characters, out of range, empty) throws FlagError naming `flag`.
template <typename T>
T parse_integer(const std::string& flag, const std::string& text,
                T min = std::numeric_limits<T>::lowest(), T max = std::numeric_limits<T>::max()) {
  static_assert(std::is_integral_v<T> && std::is_signed_v<T> && sizeof(T) <= sizeof(long long));
  const std::string expected = "expected an integer" + detail::range_text(min, max);
  char* end = nullptr;
  errno = 0;
  const long long value = std::strtoll(text.c_str(), &end, 10);
  if (text.empty() || detail::starts_with_space(text) || end != text.c_str() + text.size()) {
    throw FlagError(flag + ": " + expected + " but got '" + text + "'");
  }
  const bool too_large = (errno == ERANGE && value > 0) || value > std::numeric_limits<T>::max();
  const bool too_small = (errno == ERANGE && value < 0) || value < std::numeric_limits<T>::lowest();
  if (too_large || too_small || value < min || value > max) {
    throw FlagError(flag + ": " + expected + " but got " + text +
                    (too_large   ? " (too large)"
                     : too_small ? " (too small)"
                                 : ""));
  }
  return static_cast<T>(value);
}

/// parse_integer() for int64_t.
inline int64_t parse_int(const std::string& flag, const std::string& text,
                         int64_t min = std::numeric_limits<int64_t>::lowest(),
                         int64_t max = std::numeric_limits<int64_t>::max()) {
  return parse_integer<int64_t>(flag, text, min, max);
}

/// `text` as a whole finite number in [min, max] (NaN, infinities and values
/// that overflow a double are refused; one that underflows is taken as the
/// nearest double).
inline double parse_number(const std::string& flag, const std::string& text,
                           double min = std::numeric_limits<double>::lowest(),
                           double max = std::numeric_limits<double>::max()) {
  const std::string expected = "expected a finite number" + detail::range_text(min, max);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || detail::starts_with_space(text) || end != text.c_str() + text.size()) {
    throw FlagError(flag + ": " + expected + " but got '" + text + "'");
  }
  if (!std::isfinite(value) || value < min || value > max) {
    throw FlagError(flag + ": " + expected + " but got " + text);
  }
  return value;
}

/// The comma-separated items of `text`, empty ones included ("a,,b": three).
inline std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    items.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

/// "128,256,1024" -> {128, 256, 1024}, each in [min, max]; at least one.
inline std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text,
                                           int64_t min = std::numeric_limits<int64_t>::lowest(),
                                           int64_t max = std::numeric_limits<int64_t>::max()) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text)) {
    if (item.empty()) {
      throw FlagError(flag + ": expected comma-separated integers but got '" + text + "'");
    }
    out.push_back(parse_int(flag, item, min, max));
  }
  return out;
}

/// "auto" (CUDA when available), "cpu" or "cuda".
inline at::Device parse_device(const std::string& text, const std::string& flag = "--device") {
  if (text == "auto") return torch::cuda::is_available() ? at::Device(at::kCUDA, 0) : at::kCPU;
  if (text == "cpu") return at::kCPU;
  if (text == "cuda") {
    if (!torch::cuda::is_available()) {
      throw FlagError(flag + ": expected auto or cpu (no CUDA device is available) but got cuda");
    }
    return at::Device(at::kCUDA, 0);
  }
  throw FlagError(flag + ": expected auto, cpu or cuda but got '" + text + "'");
}

/// "fp32"/"float32", "fp16"/"float16", "bf16"/"bfloat16"; "" picks the
/// default: fp32 on the CPU, `on_cuda` on a CUDA device.
inline at::ScalarType parse_dtype(const std::string& text, const at::Device& device,
                                  at::ScalarType on_cuda = at::kBFloat16,
                                  const std::string& flag = "--dtype") {
  if (text.empty()) return device.is_cuda() ? on_cuda : at::kFloat;
  if (text == "fp32" || text == "float32") return at::kFloat;
  if (text == "fp16" || text == "float16") return at::kHalf;
  if (text == "bf16" || text == "bfloat16") return at::kBFloat16;
  throw FlagError(flag + ": expected fp32, fp16 or bf16 but got '" + text + "'");
}

/// --kv-dtype (Flags::add_kv_dtype): "" and "compute" store the compute
/// dtype; "int8" and "fp8" are the quantized storages (Note [quantized
/// storage], docs/design.md).
inline KvStorage parse_kv_storage(const std::string& kv_dtype) {
  if (kv_dtype == "int8") return KvStorage::kInt8;
  if (kv_dtype == "fp8") return KvStorage::kFp8E4m3;
  return KvStorage::kCompute;
}

/// --offload against the flags it does not combine with, naming both:
/// quantized --kv-dtype, --path fused and --cache dynamic (docs/offload.md).
inline void check_offload_flags(bool offload, const std::string& kv_dtype, const std::string& path,
                                const std::string& cache) {
  if (!offload) return;
  if (parse_kv_storage(kv_dtype) != KvStorage::kCompute) {
    throw FlagError(
        "--kv-dtype: expected compute with --offload (offloaded storage holds the "
        "compute dtype) but got " +
        kv_dtype);
  }
  if (path == "fused") {
    throw FlagError(
        "--path: expected plain or auto with --offload (the fused rotary write targets "
        "device buffers) but got fused");
  }
  if (cache == "dynamic") {
    throw FlagError(
        "--cache: expected static or hybrid with --offload (it offloads a "
        "preallocated cache) but got dynamic");
  }
}

/// "fp32", "fp16", "bf16" (else LibTorch's name).
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

/// The flags of one program. Each add() names the flag ("--max-len", or
/// "--max-len N" to show N as the value in the usage), where its value goes
/// (holding the default) and one line of help; the usage adds "(default X)"
/// unless the help mentions a default itself.
class Flags {
 public:
  Flags(std::string program, std::string summary)
      : program_(std::move(program)), summary_(std::move(summary)) {}

  /// Checks a value before it is taken: throws FlagError naming the flag.
  using Check = std::function<void(const std::string& flag, const std::string& value)>;

  /// Any string but an empty one, or one that `check` accepts.
  void add(const std::string& name, std::string* target, const std::string& help,
           Check check = nullptr) {
    add_setter(name, help, target->empty() ? "" : "'" + *target + "'",
               [target, check](const std::string& flag, const std::string& v) {
                 if (v.empty()) throw FlagError(flag + ": expected a value but got ''");
                 if (check) check(flag, v);
                 *target = v;
               });
  }
  void add(const std::string& name, int64_t* target, const std::string& help,
           int64_t min = std::numeric_limits<int64_t>::lowest(),
           int64_t max = std::numeric_limits<int64_t>::max()) {
    add_setter(name, help, std::to_string(*target),
               [target, min, max](const std::string& flag, const std::string& v) {
                 *target = parse_int(flag, v, min, max);
               });
  }
  void add(const std::string& name, int* target, const std::string& help,
           int min = std::numeric_limits<int>::lowest(),
           int max = std::numeric_limits<int>::max()) {
    add_setter(name, help, std::to_string(*target),
               [target, min, max](const std::string& flag, const std::string& v) {
                 *target = parse_integer<int>(flag, v, min, max);
               });
  }
  void add(const std::string& name, double* target, const std::string& help,
           double min = std::numeric_limits<double>::lowest(),
           double max = std::numeric_limits<double>::max()) {
    add_setter(name, help, fmt::format("{}", *target),
               [target, min, max](const std::string& flag, const std::string& v) {
                 *target = parse_number(flag, v, min, max);
               });
  }
  /// A repeatable flag: each occurrence appends its value (an empty one is
  /// refused); `help` should say that it repeats.
  void add_list(const std::string& name, std::vector<std::string>* target,
                const std::string& help) {
    add_setter(name, help, "", [target](const std::string& flag, const std::string& v) {
      if (v.empty()) throw FlagError(flag + ": expected a value but got ''");
      target->push_back(v);
    });
  }
  /// A value out of `choices` ("" stays allowed as the default only).
  void add_choice(const std::string& name, std::string* target, std::vector<std::string> choices,
                  const std::string& help) {
    add_setter(name, help, target->empty() ? "" : *target,
               [target, choices](const std::string& flag, const std::string& v) {
                 for (const auto& c : choices) {
                   if (v == c) {
                     *target = v;
                     return;
                   }
                 }
                 throw FlagError(flag + ": expected " + one_of(choices) + " but got '" + v + "'");
               });
  }
  /// --device: auto, cpu or cuda (parse it with parse_device()).
  void add_device(std::string* target) {
    add_choice("--device D", target, {"auto", "cpu", "cuda"},
               "auto (cuda when available), cpu or cuda");
  }
  /// --dtype: fp32, fp16 or bf16 ("" = fp32 on the CPU, `on_cuda` on CUDA).
  void add_dtype(std::string* target, at::ScalarType on_cuda) {
    add_choice("--dtype T", target, {"fp32", "fp16", "bf16", "float32", "float16", "bfloat16"},
               "fp32, fp16 or bf16 (default fp32 on cpu, " + dtype_name(on_cuda) + " on cuda)");
  }
  /// --kv-dtype: the cache's stored type, parsed by parse_kv_storage.
  void add_kv_dtype(std::string* target) {
    add_choice("--kv-dtype T", target, {"compute", "int8", "fp8"},
               "stored type of the KV cache: compute (the --dtype, default), int8 or fp8 (e4m3), "
               "one scale per token and kv head; the views are dequantized into one staging "
               "buffer");
  }
  /// --offload: the cache's keys and values in host memory (pinned on
  /// CUDA), two layers' worth staged on the device (CacheConfig::
  /// host_offload); check_offload_flags() refuses what it does not serve.
  void add_offload(bool* target) {
    add_switch("--offload", target,
               "keep the KV cache in host memory (pinned on cuda) and stream each layer's "
               "attended range into two device staging buffers (CacheConfig::host_offload)");
  }
  /// A file the program will write (--json FILE): one whose folder does not
  /// exist is refused when parsing, not after the run.
  void add_output_file(const std::string& name, std::string* target, const std::string& help) {
    add(name, target, help, [](const std::string& flag, const std::string& value) {
      const std::filesystem::path file(value);
      const std::filesystem::path folder = file.has_parent_path() ? file.parent_path() : ".";
      if (!file.has_filename() || !std::filesystem::is_directory(folder)) {
        throw FlagError(flag + ": expected a file in an existing folder but got '" + value + "'");
      }
    });
  }
  /// --threads N: LibTorch's intra-op threads (0: its own choice); apply
  /// with set_threads().
  void add_threads(int* target) {
    add("--threads N", target, "CPU threads for LibTorch (default 0: its own choice)", /*min=*/0);
  }
  /// A switch: present = true; it takes no value.
  void add_switch(const std::string& name, bool* target, const std::string& help) {
    switches_[name] = target;
    usage_.push_back({name, help});
  }

  /// Sets every flag given; `--help` prints usage() and exits 0. Throws
  /// FlagError for an unknown flag, a missing value or one the flag refuses.
  void parse(int argc, char** argv) {
    for (int i = 1; i < argc; ++i) {
      std::string arg = argv[i];
      if (arg == "--help" || arg == "-h") {
        std::fputs(usage().c_str(), stdout);
        std::exit(0);
      }
      if (arg.rfind("--", 0) != 0) {
        throw FlagError("unexpected argument '" + arg + "': flags are --name value (see --help)");
      }
      std::string value;
      const size_t eq = arg.find('=');
      const bool inline_value = eq != std::string::npos;
      if (inline_value) {
        value = arg.substr(eq + 1);
        arg.resize(eq);
      }
      if (auto s = switches_.find(arg); s != switches_.end()) {
        if (inline_value)
          throw FlagError(arg + ": expected no value (a switch) but got '" + value + "'");
        *s->second = true;
        given_.insert(arg);
        continue;
      }
      auto it = setters_.find(arg);
      if (it == setters_.end()) throw FlagError("unknown flag '" + arg + "' (see --help)");
      if (!inline_value) {
        if (i + 1 >= argc) throw FlagError(arg + ": expected a value but got none");
        value = argv[++i];
        if (value.rfind("--", 0) == 0) {
          throw FlagError(arg + ": expected a value but got the flag '" + value + "'");
        }
      }
      it->second(arg, value);
      given_.insert(arg);
    }
  }

  /// Whether the command line set `flag` ("--max-chunk").
  bool given(const std::string& flag) const { return given_.count(flag) > 0; }

  /// A paragraph printed after the flags in usage().
  void add_note(const std::string& text) { notes_ += "\n" + text + "\n"; }

  std::string usage() const {
    std::string out = program_ + ": " + summary_ + "\n\nusage: " + program_ + " [flags]\n\n";
    for (const auto& [name, help] : usage_) out += entry(name, help);
    out += entry("--help", "this text");
    return out + notes_;
  }

 private:
  using Setter = Check;

  // "  --name V   help", the help wrapped at 100 columns under itself.
  static std::string entry(const std::string& name, const std::string& help) {
    constexpr size_t kIndent = 25, kWidth = 100;  // "  " + 22 columns of name + " "
    std::vector<std::string> lines(1);
    size_t begin = 0;
    while (begin < help.size()) {
      const size_t end = std::min(help.find(' ', begin), help.size());
      const std::string word = help.substr(begin, end - begin);
      if (!lines.back().empty() && kIndent + lines.back().size() + 1 + word.size() > kWidth) {
        lines.emplace_back();
      }
      lines.back() += (lines.back().empty() ? "" : " ") + word;
      begin = end + 1;
    }
    std::string out = fmt::format("  {:<22} {}\n", name, lines[0]);
    for (size_t i = 1; i < lines.size(); ++i) out += std::string(kIndent, ' ') + lines[i] + "\n";
    return out;
  }

  static std::string one_of(const std::vector<std::string>& choices) {
    std::string out;
    for (size_t i = 0; i < choices.size(); ++i) {
      out += i == 0 ? "" : (i + 1 == choices.size() ? " or " : ", ");
      out += choices[i];
    }
    return out;
  }

  // name: "--flag" or "--flag METAVAR".
  void add_setter(const std::string& name, const std::string& help, const std::string& value,
                  Setter set) {
    const size_t space = name.find(' ');
    const std::string flag = name.substr(0, space);
    const std::string shown = space == std::string::npos ? name + " V" : name;
    const bool says_default = help.find("default") != std::string::npos;
    setters_[flag] = std::move(set);
    usage_.push_back(
        {shown, help + (says_default || value.empty() ? "" : " (default " + value + ")")});
  }

  std::string program_, summary_, notes_;
  std::map<std::string, Setter> setters_;
  std::map<std::string, bool*> switches_;
  std::set<std::string> given_;
  std::vector<std::pair<std::string, std::string>> usage_;
};

/// Applies --threads (0 leaves LibTorch's own choice).
inline void set_threads(int threads) {
  if (threads > 0) at::set_num_threads(threads);
}

/// For main's catch (...): prints "program: what went wrong" (a c10::Error
/// without its C++ backtrace) to stderr and returns exit status 2.
inline int fail(const char* program) {
  try {
    throw;
  } catch (const c10::Error& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what_without_backtrace());
  } catch (const std::exception& e) {
    std::fprintf(stderr, "%s: %s\n", program, e.what());
  } catch (...) {
    std::fprintf(stderr, "%s: unknown error\n", program);
  }
  return 2;
}

}  // namespace statickv::apps
