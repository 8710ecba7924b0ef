// Bad input to the helpers outside the cache: the mask helpers, the
// attention functions, ShapeBuckets and pad_into / unpad each name the bad
// argument, the expected and the actual value.

#include "bad_input.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <new>

using namespace statickv;
using namespace statickv::test;
using namespace statickv::test::bad_input;

TEST_CASE("mask helpers name each bad argument", "[errors][mask]") {
  const at::Tensor mask = at::ones({2, 1, 3, 5}, at::kBool);
  const at::Tensor keep_k = at::ones({2, 5}, at::kBool);
  const at::Tensor keep_q = at::ones({2, 3}, at::kBool);
  expect_errors({
      {"additive: mask undefined",
       [&] { additive_mask(at::Tensor(), at::kFloat); },
       {"mask", "Bool", "undefined"}},
      {"additive: mask float",
       [&] { additive_mask(mask.to(at::kFloat), at::kFloat); },
       {"mask", "Bool", "Float"}},
      {"additive: dtype Int",
       [&] { additive_mask(mask, at::kInt); },
       {"dtype", "Half, BFloat16, Float or Double", "Int"}},
      {"additive: dtype Long", [&] { additive_mask(mask, at::kLong); }, {"dtype", "Long"}},
      {"fold_key: mask undefined",
       [&] { fold_key_padding(at::Tensor(), keep_k); },
       {"mask", "Bool", "undefined"}},
      {"fold_key: mask int",
       [&] { fold_key_padding(mask.to(at::kInt), keep_k); },
       {"mask", "Bool", "Int"}},
      {"fold_key: mask rank 3",
       [&] { fold_key_padding(mask.squeeze(1), keep_k); },
       {"mask", "[b, 1, q, kv]", "[2, 3, 5]"}},
      {"fold_key: keep undefined",
       [&] { fold_key_padding(mask, at::Tensor()); },
       {"key_keep", "Bool", "undefined"}},
      {"fold_key: keep float",
       [&] { fold_key_padding(mask, keep_k.to(at::kFloat)); },
       {"key_keep", "Bool", "Float"}},
      {"fold_key: keep short",
       [&] {
         fold_key_padding(mask, at::ones({2, 4}, at::kBool));
       },
       {"key_keep", "[2, 5]", "[2, 4]"}},
      {"fold_key: keep rank 1",
       [&] { fold_key_padding(mask, at::ones({5}, at::kBool)); },
       {"key_keep", "[2, 5]", "got [5]"}},
      {"fold_key: keep empty",
       [&] {
         fold_key_padding(mask, at::ones({0, 5}, at::kBool));
       },
       {"key_keep", "[2, 5]", "[0, 5]"}},
      {"fold_key: keep on meta",
       [&] {
         fold_key_padding(mask, at::ones({2, 5}, on_meta(at::kBool)));
       },
       {"key_keep", "device cpu", "meta"}},
      {"fold_query: mask float",
       [&] { fold_query_padding(mask.to(at::kFloat), keep_q); },
       {"mask", "Bool", "Float"}},
      {"fold_query: mask rank 5",
       [&] { fold_query_padding(mask.unsqueeze(0), keep_q); },
       {"mask", "[b, 1, q, kv]", "[1, 2, 1, 3, 5]"}},
      {"fold_query: keep undefined",
       [&] { fold_query_padding(mask, at::Tensor()); },
       {"query_keep", "Bool", "undefined"}},
      {"fold_query: keep long",
       [&] { fold_query_padding(mask, keep_q.to(at::kLong)); },
       {"query_keep", "Bool", "Long"}},
      {"fold_query: keep batch",
       [&] {
         fold_query_padding(mask, at::ones({3, 3}, at::kBool));
       },
       {"query_keep", "[2, 3]", "[3, 3]"}},
      {"fold_query: keep on meta",
       [&] {
         fold_query_padding(mask, at::ones({2, 3}, on_meta(at::kBool)));
       },
       {"query_keep", "device cpu", "meta"}},
  });
}

TEST_CASE("attention helpers name each bad argument", "[errors][attention]") {
  const at::Tensor q = at::zeros({2, 4, 3, 8});
  const at::Tensor k = at::zeros({2, 2, 5, 8});
  const at::Tensor mask = at::ones({2, 1, 3, 5}, at::kBool);
  using Attention =
      at::Tensor (*)(const at::Tensor&, const at::Tensor&, const at::Tensor&, const at::Tensor&);
  for (const auto& [name, attention] : std::vector<std::pair<const char*, Attention>>{
           {"reference", &reference_attention}, {"sdpa", &sdpa_attention}}) {
    INFO(name);
    const Attention f = attention;
    expect_errors({
        {"query undefined",
         [&] { f(at::Tensor(), k, k, mask); },
         {"query", "[b, heads, q, head_dim]", "got []"}},
        {"query rank 3",
         [&] { f(q[0], k, k, mask); },
         {"query", "[b, heads, q, head_dim]", "[4, 3, 8]"}},
        {"keys batch",
         [&] { f(q, k.narrow(0, 0, 1), k, mask); },
         {"keys", "[2, kv_heads, kv, 8]", "[1, 2, 5, 8]"}},
        {"keys head_dim",
         [&] {
           f(q, at::zeros({2, 2, 5, 7}), k, mask);
         },
         {"keys", "[2, kv_heads, kv, 8]", "[2, 2, 5, 7]"}},
        {"keys undefined", [&] { f(q, at::Tensor(), k, mask); }, {"keys", "got []"}},
        {"values shape",
         [&] { f(q, k, k.narrow(2, 0, 4), mask); },
         {"values", "[2, 2, 5, 8]", "[2, 2, 4, 8]"}},
        {"no kv heads",
         [&] { f(q, k.narrow(1, 0, 0), k.narrow(1, 0, 0), mask); },
         {"keys", "kv_heads >= 1", "[2, 0, 5, 8]"}},
        {"heads not a multiple",
         [&] {
           f(q, at::zeros({2, 3, 5, 8}), at::zeros({2, 3, 5, 8}), mask);
         },
         {"query", "multiple of kv_heads (3)", "heads (4)"}},
        {"mask undefined", [&] { f(q, k, k, at::Tensor()); }, {"mask", "Bool", "undefined"}},
        {"mask double", [&] { f(q, k, k, mask.to(at::kDouble)); }, {"mask", "Bool", "Double"}},
        {"mask kv",
         [&] { f(q, k, k, mask.narrow(3, 0, 4)); },
         {"mask", "[2, 1, 3, 5]", "[2, 1, 3, 4]"}},
        {"mask rank 3", [&] { f(q, k, k, mask[0]); }, {"mask", "[2, 1, 3, 5]", "[1, 3, 5]"}},
        {"keys on meta",
         [&] { f(q, k.to(at::kMeta), k.to(at::kMeta), mask); },
         {"keys", "device cpu", "meta"}},
        {"values on meta",
         [&] { f(q, k, k.to(at::kMeta), mask); },
         {"values", "device cpu", "meta"}},
        {"mask on meta", [&] { f(q, k, k, mask.to(at::kMeta)); }, {"mask", "device cpu", "meta"}},
    });
  }
  expect_errors({
      {"sdpa: keys double",
       [&] { sdpa_attention(q, k.to(at::kDouble), k, mask); },
       {"keys", "dtype Float", "Double"}},
      {"sdpa: values half",
       [&] { sdpa_attention(q, k, k.to(at::kHalf), mask); },
       {"values", "dtype Float", "Half"}},
      {"sdpa: additive mask of another dtype",
       [&] { sdpa_attention(q, k, k, mask.to(at::kHalf)); },
       {"mask", "query's dtype Float", "Half"}},
  });
  // reference_attention computes in float32 whatever the inputs' dtypes.
  CHECK(reference_attention(q, k.to(at::kDouble), k.to(at::kHalf), mask).sizes() == q.sizes());
}

TEST_CASE("ShapeBuckets factories and lookups name each bad argument", "[errors][buckets]") {
  const ShapeBuckets b = ShapeBuckets::powers_of_two(64);
  expect_errors({
      {"powers_of_two max 0",
       [] { ShapeBuckets::powers_of_two(0); },
       {"ShapeBuckets.max", ">= 1", "got 0"}},
      {"powers_of_two max negative",
       [] { ShapeBuckets::powers_of_two(kMin); },
       {"ShapeBuckets.max", "got -9223372036854775808"}},
      {"powers_of_two min 0",
       [] { ShapeBuckets::powers_of_two(8, 0); },
       {"ShapeBuckets.min", "[1, max=8]", "got 0"}},
      {"powers_of_two min > max",
       [] { ShapeBuckets::powers_of_two(8, 9); },
       {"ShapeBuckets.min", "got 9"}},
      {"multiples_of step 0",
       [] { ShapeBuckets::multiples_of(0, 8); },
       {"ShapeBuckets.step", ">= 1", "got 0"}},
      {"multiples_of step negative",
       [] { ShapeBuckets::multiples_of(-3, 8); },
       {"ShapeBuckets.step", "got -3"}},
      {"multiples_of max 0",
       [] { ShapeBuckets::multiples_of(2, 0); },
       {"ShapeBuckets.max", "got 0"}},
      {"multiples_of too many",
       [] { ShapeBuckets::multiples_of(1, int64_t{1} << 40); },
       {"ShapeBuckets.step", "at most 65536 buckets", "makes 1099511627776"}},
      {"geometric ratio 1",
       [] { ShapeBuckets::geometric(1.0, 8); },
       {"ShapeBuckets.ratio", "finite value > 1", "got 1"}},
      {"geometric ratio negative",
       [] { ShapeBuckets::geometric(-2.0, 8); },
       {"ShapeBuckets.ratio", "got -2"}},
      {"geometric ratio nan",
       [] { ShapeBuckets::geometric(std::nan(""), 8); },
       {"ShapeBuckets.ratio", "got nan"}},
      {"geometric ratio inf",
       [] { ShapeBuckets::geometric(std::numeric_limits<double>::infinity(), 8); },
       {"ShapeBuckets.ratio", "got inf"}},
      {"geometric max 0", [] { ShapeBuckets::geometric(2.0, 0); }, {"ShapeBuckets.max", "got 0"}},
      {"geometric min > max",
       [] { ShapeBuckets::geometric(2.0, 8, 9); },
       {"ShapeBuckets.min", "[1, max=8]", "got 9"}},
      {"geometric too many",
       [] { ShapeBuckets::geometric(1.000001, int64_t{1} << 40); },
       {"ShapeBuckets.ratio", "at most 65536 buckets", "makes more"}},
      {"of negative",
       [] {
         ShapeBuckets::of({4, -7});
       },
       {"ShapeBuckets.sizes", ">= 1", "got -7"}},
      {"of int64 min",
       [] { ShapeBuckets::of({kMin}); },
       {"ShapeBuckets.sizes", "got -9223372036854775808"}},
      {"round_up negative", [&] { b.round_up(-1); }, {"size", "[1, 64]", "got -1"}},
      {"round_up int64 max",
       [&] { b.round_up(kMax); },
       {"size", "[1, 64]", "got 9223372036854775807"}},
      {"round_up named", [&] { b.round_up(65, "batch"); }, {"batch", "[1, 64]", "got 65"}},
      {"index_of 0", [&] { b.index_of(0); }, {"size", "[1, 64]", "got 0"}},
  });
}

TEST_CASE("ShapeBuckets factories at the int64 limits terminate with the documented sizes",
          "[errors][buckets]") {
  const ShapeBuckets pow2 = ShapeBuckets::powers_of_two(kMax);
  CHECK(pow2.count() == 64);  // 1, 2, ..., 2^62, then max
  CHECK(pow2.sizes()[62] == int64_t{1} << 62);
  CHECK(pow2.max() == kMax);
  CHECK(ShapeBuckets::multiples_of(kMax / 2, kMax).sizes() ==
        std::vector<int64_t>{kMax / 2, kMax / 2 * 2, kMax});
  CHECK(ShapeBuckets::multiples_of(1, ShapeBuckets::kMaxCount).count() == ShapeBuckets::kMaxCount);
  const ShapeBuckets doubling = ShapeBuckets::geometric(2.0, kMax);
  CHECK(doubling.sizes() == pow2.sizes());
  const ShapeBuckets slow = ShapeBuckets::geometric(1.5, kMax, 3);
  CHECK(slow.sizes().front() == 3);
  CHECK(slow.max() == kMax);
  CHECK(std::is_sorted(slow.sizes().begin(), slow.sizes().end()));
  CHECK(std::adjacent_find(slow.sizes().begin(), slow.sizes().end()) == slow.sizes().end());
  CHECK(ShapeBuckets::powers_of_two(1).sizes() == std::vector<int64_t>{1});
  CHECK(ShapeBuckets::geometric(1.5, 1).sizes() == std::vector<int64_t>{1});
}

TEST_CASE("pad_into and unpad name each bad argument", "[errors][buckets]") {
  at::Tensor padded = at::zeros({4, 8}, i64());
  const at::Tensor before = padded.clone();
  expect_errors({
      {"pad_into: input undefined",
       [&] { pad_into(padded, at::Tensor(), -1); },
       {"input", "defined", "undefined"}},
      {"pad_into: padded undefined",
       [&] {
         at::Tensor none;
         pad_into(none, positions(1, {0}), -1);
       },
       {"padded", "defined", "undefined"}},
      {"pad_into: input rank 1",
       [&] {
         pad_into(padded, positions({1, 2}), -1);
       },
       {"input", "rank 2", "[2]"}},
      {"pad_into: input too many rows",
       [&] {
         pad_into(padded, at::zeros({5, 1}, i64()), -1);
       },
       {"input", "fits in [4, 8]", "[5, 1]"}},
      {"pad_into: input too long",
       [&] {
         pad_into(padded, at::zeros({1, 9}, i64()), -1);
       },
       {"input", "fits in [4, 8]", "[1, 9]"}},
      {"pad_into: input dtype",
       [&] {
         pad_into(padded, at::zeros({1, 1}), -1);
       },
       {"input", "dtype Long", "Float"}},
      {"unpad: negative batch",
       [&] { unpad(padded, -1, 2); },
       {"unpad", "batch >= 0", "got -1 and 2"}},
      {"unpad: negative q",
       [&] { unpad(padded, 1, kMin); },
       {"unpad", "query_len >= 0", "-9223372036854775808"}},
      {"unpad: too many rows",
       [&] { unpad(padded, 5, 1); },
       {"output", "at least [5, 1, ...]", "[4, 8]"}},
      {"unpad: rank 1",
       [&] {
         unpad(positions({1, 2}), 1, 1);
       },
       {"output", "[2]"}},
      {"unpad: undefined", [&] { unpad(at::Tensor(), 1, 1); }, {"output", "got []"}},
  });
  CHECK(at::equal(padded, before));  // a refused pad_into writes nothing
}
