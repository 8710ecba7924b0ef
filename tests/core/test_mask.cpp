// The mask helpers (include/statickv/mask.hpp): the additive form of a bool
// mask, and a user's key and query padding folded into one. Each is
// compared with a mask built element by element with loops; the additive
// value of a blocked key is the dtype's lowest finite value, listed by hand.
// Every refusal of a bad argument is tabled in test_bad_input_helpers.cpp;
// here, those that state a documented rule.

#include "support.hpp"

#include <cmath>
#include <limits>

using namespace statickv;
using namespace statickv::test;

namespace {

/// A random bool mask [b, 1, q, kv] and a random keep [rows, n].
at::Tensor random_bools(std::vector<int64_t> shape, uint64_t seed) {
  at::manual_seed(seed);
  return at::rand(shape).lt(0.6);
}

bool at4(const at::Tensor& mask, int64_t b, int64_t i, int64_t j) {
  return mask[b][0][i][j].item<bool>();
}

}  // namespace

TEST_CASE(
    "additive_mask is 0 where the mask attends and the dtype's lowest finite value "
    "elsewhere",
    "[mask]") {
  const at::Tensor mask = random_bools({2, 1, 3, 5}, 1);
  // The lowest finite value of each floating dtype, written out.
  const std::vector<std::pair<at::ScalarType, double>> lowest = {
      {at::kHalf, -65504.0},
      {at::kBFloat16, -3.3895313892515355e38},
      {at::kFloat, -3.4028234663852886e38},
      {at::kDouble, -1.7976931348623157e308}};
  for (const auto& [dtype, blocked] : lowest) {
    INFO("dtype " << dtype);
    const at::Tensor additive = additive_mask(mask, dtype);
    REQUIRE(additive.scalar_type() == dtype);
    REQUIRE(additive.sizes() == mask.sizes());
    CHECK(additive.isfinite().all().item<bool>());
    const at::Tensor as_double = additive.to(at::kDouble);
    for (int64_t b = 0; b < 2; ++b) {
      for (int64_t i = 0; i < 3; ++i) {
        for (int64_t j = 0; j < 5; ++j) {
          const double expected = at4(mask, b, i, j) ? 0.0 : blocked;
          CHECK(as_double[b][0][i][j].item<double>() == expected);
        }
      }
    }
  }
}

TEST_CASE("an additive mask keeps a fully masked row NaN-free through a softmax", "[mask]") {
  at::Tensor mask = at::ones({1, 1, 2, 4}, at::kBool);
  mask[0][0][1].fill_(false);  // query 1 attends to nothing
  for (const at::ScalarType dtype : {at::kFloat, at::kDouble}) {
    INFO("dtype " << dtype);
    const at::Tensor scores = at::randn({1, 1, 2, 4}, at::TensorOptions().dtype(dtype));
    const at::Tensor probs = at::softmax(scores + additive_mask(mask, dtype), -1);
    CHECK(probs.isfinite().all().item<bool>());
    CHECK(at::allclose(probs.sum(-1), at::ones({1, 1, 2}, probs.options())));
  }
  // Attention with it equals attention over the attended keys alone.
  const at::Tensor q = at::randn({1, 1, 1, 8});
  const at::Tensor k = at::randn({1, 1, 4, 8});
  const at::Tensor v = at::randn({1, 1, 4, 8});
  const at::Tensor keep = bools({1, 0, 1, 1}).view({1, 1, 1, 4});
  const at::Tensor masked =
      at::softmax(at::matmul(q, k.transpose(-1, -2)) + additive_mask(keep, at::kFloat), -1);
  const at::Tensor kept = at::tensor(std::vector<int64_t>{0, 2, 3}, i64());
  const at::Tensor alone =
      at::softmax(at::matmul(q, k.index_select(2, kept).transpose(-1, -2)), -1);
  CHECK(
      at::allclose(at::matmul(masked, v), at::matmul(alone, v.index_select(2, kept)), 1e-5, 1e-6));
}

namespace {

/// fold(mask, keep) on a random mask [3, 1, 4, 6] and keep [3, keys or
/// queries], against the rule entry by entry: folded[b, i, j] = mask[b, i,
/// j] and keep[b][j] (keys) or keep[b][i] (queries). The input mask is left
/// as it was. Returns {mask, keep}.
template <class Fold>
std::pair<at::Tensor, at::Tensor> require_fold(Fold fold, bool by_key, uint64_t seed) {
  const at::Tensor mask = random_bools({3, 1, 4, 6}, seed);
  const at::Tensor before = mask.clone();
  const at::Tensor keep = random_bools({3, by_key ? 6 : 4}, seed + 1);
  const at::Tensor folded = fold(mask, keep);
  REQUIRE(folded.scalar_type() == at::kBool);
  REQUIRE(folded.sizes() == mask.sizes());
  for (int64_t b = 0; b < 3; ++b) {
    for (int64_t i = 0; i < 4; ++i) {
      for (int64_t j = 0; j < 6; ++j) {
        INFO("row " << b << ", query " << i << ", key " << j);
        CHECK(at4(folded, b, i, j) == (at4(mask, b, i, j) && keep[b][by_key ? j : i].item<bool>()));
      }
    }
  }
  CHECK(at::equal(mask, before));
  return {mask, keep};
}

}  // namespace

TEST_CASE("fold_key_padding blocks every query from the keys a row marks as padding", "[mask]") {
  const auto [mask, keep] = require_fold(fold_key_padding, /*by_key=*/true, 2);
  CHECK(at::equal(fold_key_padding(mask, at::ones({3, 6}, at::kBool)), mask));
  CHECK_FALSE(fold_key_padding(mask, at::zeros({3, 6}, at::kBool)).any().item<bool>());
}

TEST_CASE("fold_query_padding makes the queries a row marks as padding attend to nothing",
          "[mask]") {
  const auto [mask, keep] = require_fold(fold_query_padding, /*by_key=*/false, 4);
  // Both folds in either order give one mask.
  const at::Tensor key_keep = random_bools({3, 6}, 6);
  CHECK(at::equal(fold_key_padding(fold_query_padding(mask, keep), key_keep),
                  fold_query_padding(fold_key_padding(mask, key_keep), keep)));
}

TEST_CASE("the mask helpers refuse what their rules exclude, naming the argument",
          "[mask][errors]") {
  const at::Tensor mask = at::ones({2, 1, 3, 5}, at::kBool);
  // Additive masks come only in floating dtypes, from bool masks.
  require_error([&] { additive_mask(mask, at::kInt); },
                {"dtype: expected Half, BFloat16, Float or Double", "Int"});
  require_error([&] { additive_mask(mask.to(at::kFloat), at::kFloat); },
                {"mask: expected dtype Bool", "Float"});
  // key_keep is [b, kv], query_keep [b, q], both bool on the mask's device.
  require_error(
      [&] {
        fold_key_padding(mask, at::ones({2, 3}, at::kBool));
      },
      {"key_keep: expected shape [2, 5]", "[2, 3]"});
  require_error(
      [&] {
        fold_query_padding(mask, at::ones({2, 5}, at::kBool));
      },
      {"query_keep: expected shape [2, 3]", "[2, 5]"});
  require_error(
      [&] {
        fold_query_padding(mask, at::ones({2, 3}));
      },
      {"query_keep: expected dtype Bool", "Float"});
  require_error(
      [&] {
        fold_key_padding(mask.squeeze(1), at::ones({2, 5}, at::kBool));
      },
      {"mask: expected shape [b, 1, q, kv]", "[2, 3, 5]"});
}
