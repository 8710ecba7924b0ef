// Fuzz target: the ShapeBuckets factories with extreme values. Every set is
// either refused with an error naming ShapeBuckets, or starts at >= 1,
// strictly increases, holds at most kMaxCount sizes, and rounds a size up
// to the smallest bucket that holds it; no signed overflow (UBSan) and no
// runaway loop (libFuzzer -timeout).
//
// Bytes: the factory (0 powers_of_two, 1 multiples_of, 2 geometric, 3 of),
// two extreme int64 arguments, the ratio (a byte, odd: 1.00 to 4.00 in two
// bytes, else a power of two from 2^-8 to 2^70), of()'s third size, then a
// size to round up. Seeds (corpus/buckets, named for what they build):
// each factory near its limits (powers of two up to INT64_MAX and with min
// above max, multiples of 65537 up to 2^32, ratios 1.01 and 2^70, sizes out
// of order).

#include "fuzz_support.hpp"

#include <statickv/buckets.hpp>

#include <algorithm>
#include <cmath>
#include <functional>
#include <vector>

namespace {

using namespace statickv;
using namespace statickv::fuzz;

int64_t bucket_sets = 0;

void fuzz_buckets(Input& in) {
  ++bucket_sets;
  const int64_t kind = in.range(0, 3);
  const int64_t a = in.extreme();
  const int64_t b = in.extreme();
  const double ratio = in.flip() ? 1.0 + static_cast<double>(in.range(0, 300)) / 100.0
                                 : std::ldexp(1.0, static_cast<int>(in.range(-8, 70)));
  std::vector<int64_t> sizes;
  try {
    ShapeBuckets buckets = ShapeBuckets::of({1});
    if (kind == 0) buckets = ShapeBuckets::powers_of_two(a, b);
    if (kind == 1) buckets = ShapeBuckets::multiples_of(a, b);
    if (kind == 2) buckets = ShapeBuckets::geometric(ratio, a, b);
    if (kind == 3) buckets = ShapeBuckets::of({a, b, in.extreme()});
    sizes = buckets.sizes();
    FUZZ_CHECK(!sizes.empty() && sizes.front() >= 1, "sizes start at >= 1");
    FUZZ_CHECK(static_cast<int64_t>(sizes.size()) <= ShapeBuckets::kMaxCount, "count");
    FUZZ_CHECK(std::adjacent_find(sizes.begin(), sizes.end(), std::greater_equal<int64_t>()) ==
                   sizes.end(),
               "sizes strictly increase");
    const int64_t n = in.extreme();
    if (n >= 1 && n <= buckets.max()) {
      const int64_t up = buckets.round_up(n);
      FUZZ_CHECK(up >= n, "round_up >= n");
      const int64_t i = buckets.index_of(n);
      FUZZ_CHECK(i == 0 || sizes[static_cast<size_t>(i - 1)] < n, "round_up is the smallest");
    } else {
      expect_error([&] { buckets.round_up(n); }, "size", "round_up out of range");
    }
  } catch (const c10::Error& e) {
    FUZZ_CHECK(mentions(e, "ShapeBuckets."), e.what_without_backtrace());
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return run_input(data, size, fuzz_buckets);
}

std::string statickv_fuzz_summary() { return "bucket sets " + std::to_string(bucket_sets); }
