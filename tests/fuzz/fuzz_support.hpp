#pragma once
// What every fuzz target shares: the reader of the fuzzer's bytes, checks
// that abort (so libFuzzer saves the input), expected errors, and the frame
// of LLVMFuzzerTestOneInput. Each target, fuzz_<name>.cpp, defines
//   extern "C" int LLVMFuzzerTestOneInput(const uint8_t*, size_t)
// through run_input(), and statickv_fuzz_summary(), the line replay_main
// prints about what the target exercised.

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <limits>
#include <string>

std::string statickv_fuzz_summary();

namespace statickv::fuzz {

constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

[[noreturn]] inline void fail(const std::string& what) {
  std::fprintf(stderr, "statickv fuzz: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

#define FUZZ_CHECK(cond, what)                                                                    \
  do {                                                                                            \
    if (!(cond))                                                                                  \
      ::statickv::fuzz::fail(std::string(#cond) + " failed at line " + std::to_string(__LINE__) + \
                             ": " + std::string(what));                                           \
  } while (0)

// The fuzzer's bytes, read front to back; zeros once they run out.
class Input {
 public:
  Input(const uint8_t* data, size_t size) : data_(data), size_(size) {}
  bool done() const { return pos_ >= size_; }
  uint64_t bits(int n) {  // n <= 64
    uint64_t v = 0;
    for (int i = 0; i < n; i += 8) v = (v << 8) | (pos_ < size_ ? data_[pos_++] : 0);
    return n >= 64 ? v : v & ((uint64_t{1} << n) - 1);
  }
  int64_t range(int64_t lo, int64_t hi) {  // inclusive, small ranges
    const uint64_t span = static_cast<uint64_t>(hi - lo) + 1;
    return lo + static_cast<int64_t>(bits(span > 256 ? 16 : 8) % span);
  }
  bool flip() { return bits(8) & 1; }
  // An int64 from the values that break arithmetic, or any value at all.
  int64_t extreme() {
    static const int64_t table[] = {0,
                                    -1,
                                    1,
                                    2,
                                    kMax,
                                    kMin,
                                    kMax - 1,
                                    kMin + 1,
                                    kMax / 2,
                                    int64_t{1} << 31,
                                    int64_t{1} << 32,
                                    int64_t{1} << 40,
                                    (int64_t{1} << 40) + 1,
                                    int64_t{1} << 62,
                                    65536,
                                    65537};
    const uint64_t pick = bits(8);
    if (pick < sizeof(table) / sizeof(table[0])) return table[pick];
    if (pick < 200) return range(-4, 40);
    return static_cast<int64_t>(bits(64));
  }

 private:
  const uint8_t* data_;
  size_t size_;
  size_t pos_ = 0;
};

inline bool mentions(const c10::Error& e, const std::string& fragment) {
  return std::string(e.what_without_backtrace()).find(fragment) != std::string::npos;
}

// Runs `call`, which must raise c10::Error mentioning `fragment`.
inline void expect_error(const std::function<void()>& call, const std::string& fragment,
                         const std::string& what) {
  try {
    call();
  } catch (const c10::Error& e) {
    FUZZ_CHECK(mentions(e, fragment),
               what + ": message lacks '" + fragment + "': " + e.what_without_backtrace());
    return;
  }
  fail(what + ": expected c10::Error mentioning " + fragment);
}

// One input of a target: `body` reads it; any exception it lets out fails.
template <typename Body>
int run_input(const uint8_t* data, size_t size, Body&& body) {
  static const bool once = [] {
    at::set_num_threads(1);  // small tensors: the pool only adds noise
    return true;
  }();
  (void)once;
  Input in(data, size);
  try {
    body(in);
  } catch (const c10::Error& e) {
    fail(std::string("unexpected c10::Error: ") + e.what_without_backtrace());
  } catch (const std::exception& e) {
    fail(std::string("unexpected exception: ") + e.what());
  }
  return 0;
}

}  // namespace statickv::fuzz
