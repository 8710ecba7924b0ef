#pragma once
// The command-line flag parser of statickv's programs (the apps and the
// benchmarks): the standard library alone, compiled into statickv_flag_parser
// (flags/src/parser.cpp). Devices and dtypes are torch_values.hpp's; rules
// that only the apps have (--kv-dtype, --offload) are the apps'.
//
// One parser, so every flag of every binary refuses what it cannot honour
// the same way: a message that names the flag, what it expects and what it
// got, and exit status 2 (fail()). Nothing is silently replaced by a
// default: a number with trailing garbage, out of range or not finite is an
// error, never a best guess.
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

#include <cerrno>
#include <cstdint>
#include <cstdlib>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <stdexcept>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

namespace statickv::flags {

/// A command line the program cannot honour; fail() prints it, exit status 2.
class FlagError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

namespace detail {

/// `value` as the usage and the errors print it (shortest round trip).
std::string number_text(double value);

/// " >= 0", " in [1, 16]", "" for an unbounded range.
template <typename T>
std::string range_text(T min, T max) {
  const auto text = [](T v) {
    if constexpr (std::is_integral_v<T>) {
      return std::to_string(v);
    } else {
      return number_text(static_cast<double>(v));
    }
  };
  const bool low = min > std::numeric_limits<T>::lowest();
  const bool high = max < std::numeric_limits<T>::max();
  if (low && high) return " in [" + text(min) + ", " + text(max) + "]";
  if (low) return " >= " + text(min);
  if (high) return " <= " + text(max);
  return "";
}

bool starts_with_space(const std::string& text);

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
int64_t parse_int(const std::string& flag, const std::string& text,
                  int64_t min = std::numeric_limits<int64_t>::lowest(),
                  int64_t max = std::numeric_limits<int64_t>::max());

/// `text` as a whole finite number in [min, max] (NaN, infinities and values
/// that overflow a double are refused; one that underflows is taken as the
/// nearest double).
double parse_number(const std::string& flag, const std::string& text,
                    double min = std::numeric_limits<double>::lowest(),
                    double max = std::numeric_limits<double>::max());

/// The comma-separated items of `text`, empty ones included ("a,,b": three).
std::vector<std::string> split_list(const std::string& text);

/// "128,256,1024" -> {128, 256, 1024}, each in [min, max]; at least one.
std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text,
                                    int64_t min = std::numeric_limits<int64_t>::lowest(),
                                    int64_t max = std::numeric_limits<int64_t>::max());

/// The flags of one program. Each add() names the flag ("--max-len", or
/// "--max-len N" to show N as the value in the usage), where its value goes
/// (holding the default) and one line of help; the usage adds "(default X)"
/// unless the help mentions a default itself.
class Flags {
 public:
  Flags(std::string program, std::string summary);

  /// Checks a value before it is taken: throws FlagError naming the flag.
  using Check = std::function<void(const std::string& flag, const std::string& value)>;

  /// Any string but an empty one, or one that `check` accepts.
  void add(const std::string& name, std::string* target, const std::string& help,
           Check check = nullptr);
  void add(const std::string& name, int64_t* target, const std::string& help,
           int64_t min = std::numeric_limits<int64_t>::lowest(),
           int64_t max = std::numeric_limits<int64_t>::max());
  void add(const std::string& name, int* target, const std::string& help,
           int min = std::numeric_limits<int>::lowest(), int max = std::numeric_limits<int>::max());
  void add(const std::string& name, double* target, const std::string& help,
           double min = std::numeric_limits<double>::lowest(),
           double max = std::numeric_limits<double>::max());
  /// A repeatable flag: each occurrence appends its value (an empty one is
  /// refused); `help` should say that it repeats.
  void add_list(const std::string& name, std::vector<std::string>* target, const std::string& help);
  /// A value out of `choices` ("" stays allowed as the default only).
  void add_choice(const std::string& name, std::string* target, std::vector<std::string> choices,
                  const std::string& help);
  /// --device: auto, cpu or cuda (parse it with parse_device()).
  void add_device(std::string* target);
  /// A file the program will write (--json FILE): one whose folder does not
  /// exist is refused when parsing, not after the run.
  void add_output_file(const std::string& name, std::string* target, const std::string& help);
  /// --threads N: LibTorch's intra-op threads (0: its own choice); apply
  /// with set_threads().
  void add_threads(int* target);
  /// A switch: present = true; it takes no value.
  void add_switch(const std::string& name, bool* target, const std::string& help);

  /// Sets every flag given; `--help` prints usage() and exits 0. Throws
  /// FlagError for an unknown flag, a missing value or one the flag refuses.
  void parse(int argc, char** argv);

  /// Whether the command line set `flag` ("--max-chunk").
  bool given(const std::string& flag) const { return given_.count(flag) > 0; }

  /// A paragraph printed after the flags in usage().
  void add_note(const std::string& text) { notes_ += "\n" + text + "\n"; }

  std::string usage() const;

 private:
  using Setter = Check;

  // name: "--flag" or "--flag METAVAR".
  void add_setter(const std::string& name, const std::string& help, const std::string& value,
                  Setter set);
  // One parsed "--flag[=value]" at argv[i]; may consume argv[i + 1].
  void take(int& i, int argc, char** argv);

  std::string program_, summary_, notes_;
  std::map<std::string, Setter> setters_;
  std::map<std::string, bool*> switches_;
  std::set<std::string> given_;
  std::vector<std::pair<std::string, std::string>> usage_;
};

}  // namespace statickv::flags
