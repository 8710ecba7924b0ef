// ShapeBuckets, pad_into and unpad (include/statickv/buckets.hpp): each
// factory's sizes against tables listed by hand, round_up and index_of
// against a linear search of the sizes, capture order, and the padding
// rule (the real part in the leading corner, the pad value everywhere
// else) against a tensor filled element by element. The refusals of every
// bad argument are tabled in test_bad_input_helpers.cpp; here, those that
// state a documented rule.

#include "support.hpp"

#include <algorithm>
#include <cstdint>
#include <vector>

using namespace statickv;
using namespace statickv::test;

namespace {

using Sizes = std::vector<int64_t>;

/// The smallest size >= n by a linear scan, and its index.
std::pair<int64_t, int64_t> scan(const Sizes& sizes, int64_t n) {
  for (size_t i = 0; i < sizes.size(); ++i) {
    if (sizes[i] >= n) return {sizes[i], static_cast<int64_t>(i)};
  }
  return {-1, -1};
}

}  // namespace

TEST_CASE("powers_of_two holds the powers of two from min below max, then max", "[buckets]") {
  CHECK(ShapeBuckets::powers_of_two(1).sizes() == Sizes{1});
  CHECK(ShapeBuckets::powers_of_two(2).sizes() == Sizes{1, 2});
  CHECK(ShapeBuckets::powers_of_two(12).sizes() == Sizes{1, 2, 4, 8, 12});
  CHECK(ShapeBuckets::powers_of_two(16).sizes() == Sizes{1, 2, 4, 8, 16});
  CHECK(ShapeBuckets::powers_of_two(17).sizes() == Sizes{1, 2, 4, 8, 16, 17});
  CHECK(ShapeBuckets::powers_of_two(16, 4).sizes() == Sizes{4, 8, 16});
  CHECK(ShapeBuckets::powers_of_two(16, 5).sizes() == Sizes{8, 16});  // min need not be one
  CHECK(ShapeBuckets::powers_of_two(5, 5).sizes() == Sizes{5});
  CHECK(ShapeBuckets::powers_of_two(16, 16).sizes() == Sizes{16});
}

TEST_CASE("multiples_of holds step, 2*step, ... below max, then max", "[buckets]") {
  CHECK(ShapeBuckets::multiples_of(4, 10).sizes() == Sizes{4, 8, 10});
  CHECK(ShapeBuckets::multiples_of(4, 8).sizes() == Sizes{4, 8});
  CHECK(ShapeBuckets::multiples_of(5, 12).sizes() == Sizes{5, 10, 12});
  CHECK(ShapeBuckets::multiples_of(1, 4).sizes() == Sizes{1, 2, 3, 4});
  CHECK(ShapeBuckets::multiples_of(3, 1).sizes() == Sizes{1});  // a step past max: max alone
  CHECK(ShapeBuckets::multiples_of(8, 8).sizes() == Sizes{8});
}

TEST_CASE("geometric grows by ceil(previous * ratio), at least by one, up to max", "[buckets]") {
  CHECK(ShapeBuckets::geometric(2.0, 10).sizes() == Sizes{1, 2, 4, 8, 10});
  CHECK(ShapeBuckets::geometric(1.5, 20).sizes() == Sizes{1, 2, 3, 5, 8, 12, 18, 20});
  CHECK(ShapeBuckets::geometric(1.1, 6).sizes() == Sizes{1, 2, 3, 4, 5, 6});  // + 1 each
  CHECK(ShapeBuckets::geometric(2.0, 100, 3).sizes() == Sizes{3, 6, 12, 24, 48, 96, 100});
  CHECK(ShapeBuckets::geometric(3.0, 9).sizes() == Sizes{1, 3, 9});
  // Padding waste stays below ratio - 1 for every size from min to max.
  for (const double ratio : {1.1, 1.25, 1.5, 2.0, 3.0}) {
    const ShapeBuckets b = ShapeBuckets::geometric(ratio, 500, 2);
    for (int64_t n = 2; n <= 500; ++n) {
      INFO("ratio " << ratio << ", n " << n);
      CHECK(static_cast<double>(b.round_up(n) - n) / static_cast<double>(n) < ratio - 1.0);
    }
  }
}

TEST_CASE("of takes exactly the given sizes, sorted and deduplicated", "[buckets]") {
  const ShapeBuckets b = ShapeBuckets::of({8, 2, 2, 5, 8});
  CHECK(b.sizes() == Sizes{2, 5, 8});
  CHECK(b.max() == 8);
  CHECK(b.count() == 3);
  CHECK(b.capture_order() == Sizes{8, 5, 2});  // largest first
  CHECK(ShapeBuckets::of({7}).sizes() == Sizes{7});
  require_error([] { ShapeBuckets::of({}); }, {"ShapeBuckets.sizes", "at least one size", "none"});
  require_error([] { ShapeBuckets::of({3, 0}); }, {"ShapeBuckets.sizes", ">= 1", "got 0"});
}

TEST_CASE("round_up and index_of give the smallest bucket that fits", "[buckets]") {
  const ShapeBuckets b = ShapeBuckets::of({3, 8, 20});
  // n -> (bucket, index), listed by hand.
  const std::vector<std::tuple<int64_t, int64_t, int64_t>> table = {
      {1, 3, 0}, {2, 3, 0}, {3, 3, 0}, {4, 8, 1}, {7, 8, 1}, {8, 8, 1}, {9, 20, 2}, {20, 20, 2}};
  for (const auto& [n, bucket, index] : table) {
    INFO("n " << n);
    CHECK(b.round_up(n) == bucket);
    CHECK(b.index_of(n) == index);
  }
  // Every size of every factory against a linear scan of its sizes.
  for (const ShapeBuckets& buckets :
       {ShapeBuckets::powers_of_two(100), ShapeBuckets::powers_of_two(100, 7),
        ShapeBuckets::multiples_of(7, 100), ShapeBuckets::geometric(1.3, 100, 4)}) {
    for (int64_t n = 1; n <= buckets.max(); ++n) {
      const auto [bucket, index] = scan(buckets.sizes(), n);
      INFO("n " << n);
      CHECK(buckets.round_up(n) == bucket);
      CHECK(buckets.index_of(n) == index);
    }
  }
}

TEST_CASE("round_up refuses what no bucket fits, naming the argument it is given",
          "[buckets][errors]") {
  const ShapeBuckets b = ShapeBuckets::of({3, 8, 20});
  require_error([&] { b.round_up(21); }, {"size: expected a value in [1, 20]", "got 21"});
  require_error([&] { b.round_up(0); }, {"size", "(the largest bucket)", "got 0"});
  require_error([&] { b.round_up(21, "batch"); }, {"batch: expected", "[1, 20]", "got 21"});
  require_error([&] { b.index_of(-4, "attend_len"); }, {"attend_len", "[1, 20]", "got -4"});
  // The bounds of a range factory: max >= 1, min in [1, max].
  require_error([] { ShapeBuckets::powers_of_two(0); }, {"ShapeBuckets.max", ">= 1", "got 0"});
  require_error([] { ShapeBuckets::geometric(2.0, 8, 9); },
                {"ShapeBuckets.min", "[1, max=8]", "got 9"});
  require_error([] { ShapeBuckets::multiples_of(0, 8); }, {"ShapeBuckets.step", "got 0"});
  require_error([] { ShapeBuckets::geometric(0.5, 8); }, {"ShapeBuckets.ratio", "got 0.5"});
}

TEST_CASE("pad_into puts the input in the leading corner and the pad value everywhere else",
          "[buckets]") {
  at::Tensor padded = at::full({4, 5, 3}, 7.0, f32());  // stale content, overwritten
  const at::Tensor real = at::randn({2, 3, 3});
  pad_into(padded, real, -1.5);
  at::Tensor expected = at::empty({4, 5, 3}, f32());
  auto e = expected.accessor<float, 3>();
  auto r = real.accessor<float, 3>();
  for (int64_t b = 0; b < 4; ++b) {
    for (int64_t t = 0; t < 5; ++t) {
      for (int64_t d = 0; d < 3; ++d) e[b][t][d] = (b < 2 && t < 3) ? r[b][t][d] : -1.5F;
    }
  }
  CHECK(at::equal(padded, expected));

  // Positions pad with -1: padded rows and tokens go to the scratch slot.
  at::Tensor pos = at::zeros({2, 4}, i64());
  pad_into(pos, positions(1, {5, 6}), -1);
  CHECK(at::equal(pos, positions(2, {5, 6, -1, -1, -1, -1, -1, -1})));
  // An input of the padded shape fills it whole.
  pad_into(pos, positions(2, {0, 1, 2, 3, 4, 5, 6, 7}), -1);
  CHECK(at::equal(pos, positions(2, {0, 1, 2, 3, 4, 5, 6, 7})));

  require_error([&] { pad_into(pos, at::zeros({1, 2}), -1); }, {"input", "dtype Long", "Float"});
  require_error(
      [&] {
        pad_into(pos, at::zeros({3, 1}, i64()), -1);
      },
      {"input: expected a shape that fits in [2, 4]", "[3, 1]"});
  require_error(
      [&] {
        pad_into(padded, at::zeros({1, 1, 2}), 0);
      },
      {"input", "fits in [4, 5, 3]", "[1, 1, 2]"});
}

TEST_CASE("unpad returns the real outputs out[:b, :q] as a view", "[buckets]") {
  const at::Tensor out = at::arange(24, f32()).view({4, 3, 2});
  const at::Tensor real = unpad(out, 2, 1);
  CHECK(real.sizes() == at::IntArrayRef({2, 1, 2}));
  CHECK(real.data_ptr() == out.data_ptr());  // no copy
  CHECK(at::equal(real, at::tensor({0.0F, 1.0F, 6.0F, 7.0F}).view({2, 1, 2})));
  CHECK(unpad(out, 4, 3).equal(out));
  CHECK(unpad(out, 0, 0).numel() == 0);
  // pad_into then unpad is the identity.
  at::Tensor padded = at::zeros({4, 8}, i64());
  const at::Tensor input = positions(3, {1, 2, 3, 4, 5, 6});
  pad_into(padded, input, -1);
  CHECK(at::equal(unpad(padded, 3, 2), input));
  require_error([&] { unpad(out, 5, 1); }, {"output", "at least [5, 1, ...]", "[4, 3, 2]"});
  require_error([&] { unpad(out, 1, -2); }, {"unpad", "query_len >= 0", "got 1 and -2"});
}
