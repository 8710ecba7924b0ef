// The attention kernels (include/statickv/attention.hpp): reference_attention
// and softcapped_attention against attention computed by its definition with
// loops in double (grouped-query heads, masks, the soft-cap, zeros for a
// query that sees no key), and sdpa_attention against the reference with a
// bool mask, its additive form and a StepPlan's masks; cpu_decode_attention
// (one query a row on the CPU) by definition in each float dtype, and as
// sdpa_attention's one launch for such a query. Each argument's refusal is
// tabled in test_bad_input_helpers.cpp; here, the softcap's and the decode
// kernel's.

#include "support.hpp"

#include <cmath>
#include <limits>
#include <vector>

using namespace statickv;
using namespace statickv::test;

namespace {

// One query's attention by definition, in double: scores q.k / sqrt(D),
// capped at softcap * tanh(s / softcap) when softcap > 0, plus bias[j] when
// given; softmax over the keys `visible` lets through; 0 when none.
void attend_one(const double* q, const at::Tensor& keys, const at::Tensor& values,
                const std::vector<bool>& visible, double softcap, const double* bias, double* out) {
  const int64_t nk = keys.size(0), dim = keys.size(1);
  auto k = keys.accessor<double, 2>();
  auto v = values.accessor<double, 2>();
  std::vector<double> w(static_cast<size_t>(nk), 0.0);
  double top = -std::numeric_limits<double>::infinity();
  for (int64_t j = 0; j < nk; ++j) {
    if (!visible[static_cast<size_t>(j)]) continue;
    double s = 0;
    for (int64_t d = 0; d < dim; ++d) s += q[d] * k[j][d];
    s /= std::sqrt(static_cast<double>(dim));
    if (softcap > 0) s = softcap * std::tanh(s / softcap);
    if (bias != nullptr) s += bias[j];
    w[static_cast<size_t>(j)] = s;
    top = std::max(top, s);
  }
  for (int64_t d = 0; d < dim; ++d) out[d] = 0;
  if (std::isinf(top)) return;  // no visible key
  double total = 0;
  for (int64_t j = 0; j < nk; ++j) {
    const auto uj = static_cast<size_t>(j);
    w[uj] = visible[uj] ? std::exp(w[uj] - top) : 0.0;
    total += w[uj];
  }
  for (int64_t j = 0; j < nk; ++j) {
    for (int64_t d = 0; d < dim; ++d) out[d] += w[static_cast<size_t>(j)] / total * v[j][d];
  }
}

// Attention by definition over q [b, heads, q, D], k/v [b, kv_heads, kv, D],
// mask bool [b, 1, q, kv]: query head h reads kv head h / (heads / kv_heads).
// bias: an additive float mask [b, 1, q, kv] added to the scores, or none.
at::Tensor by_definition(const at::Tensor& query, const at::Tensor& keys, const at::Tensor& values,
                         const at::Tensor& mask, double softcap = 0, const at::Tensor& bias = {}) {
  const at::Tensor q = query.to(at::kDouble).contiguous();
  const at::Tensor k = keys.to(at::kDouble), v = values.to(at::kDouble);
  const at::Tensor m = mask.contiguous(), add = bias.defined() ? bias.to(at::kDouble) : bias;
  at::Tensor out = at::zeros(q.sizes(), q.options());
  const int64_t group = q.size(1) / k.size(1);
  for (int64_t r = 0; r < q.size(0); ++r) {
    for (int64_t h = 0; h < q.size(1); ++h) {
      const at::Tensor kh = k[r][h / group].contiguous(), vh = v[r][h / group].contiguous();
      for (int64_t i = 0; i < q.size(2); ++i) {
        std::vector<bool> visible(static_cast<size_t>(k.size(2)));
        for (int64_t j = 0; j < k.size(2); ++j) {
          visible[static_cast<size_t>(j)] = m[r][0][i][j].item<bool>();
        }
        const at::Tensor row_bias = add.defined() ? add[r][0][i].contiguous() : add;
        at::Tensor o = out[r][h][i];
        attend_one(q[r][h][i].data_ptr<double>(), kh, vh, visible, softcap,
                   add.defined() ? row_bias.data_ptr<double>() : nullptr, o.data_ptr<double>());
      }
    }
  }
  return out;
}

struct Inputs {
  at::Tensor query, keys, values, mask;
};

// Grouped-query inputs (kHeads query heads on kKvHeads kv heads) and a
// random mask in which query 0 of row 1 sees no key and every other query
// sees at least one.
Inputs random_inputs(uint64_t seed, double query_scale = 1.0) {
  at::manual_seed(seed);
  Inputs in;
  in.query = at::randn({2, kHeads, 3, kDim}, f32()).mul(query_scale);
  in.keys = at::randn({2, kKvHeads, 5, kDim}, f32());
  in.values = at::randn({2, kKvHeads, 5, kDim}, f32());
  in.mask = at::rand({2, 1, 3, 5}).lt(0.6);
  in.mask.select(3, 0).fill_(true);
  in.mask[1][0][0].fill_(false);
  return in;
}

}  // namespace

TEST_CASE(
    "reference_attention is attention by definition with query head h on kv head h over "
    "the group",
    "[attention]") {
  const Inputs in = random_inputs(1);
  const at::Tensor got = reference_attention(in.query, in.keys, in.values, in.mask);
  CHECK(got.sizes() == in.query.sizes());
  CHECK(got.scalar_type() == at::kFloat);
  const at::Tensor want = by_definition(in.query, in.keys, in.values, in.mask);
  INFO("max diff " << max_diff(got, want));
  CHECK(close(got, want, 1e-5));
  // Every query head reads its own kv head: heads 0 and 1 share kv head 0,
  // so a query equal in both gives equal outputs; head 2 reads kv head 1.
  const at::Tensor same = in.query.clone();
  same.select(1, 1).copy_(same.select(1, 0));
  same.select(1, 2).copy_(same.select(1, 0));
  const at::Tensor out = reference_attention(same, in.keys, in.values, in.mask);
  CHECK(at::equal(out.select(1, 0), out.select(1, 1)));
  CHECK_FALSE(at::allclose(out.select(1, 0), out.select(1, 2)));
}

TEST_CASE("reference_attention gives a query that sees no key zeros, not NaN", "[attention]") {
  const Inputs in = random_inputs(2);
  const at::Tensor got = reference_attention(in.query, in.keys, in.values, in.mask);
  CHECK(at::isfinite(got).all().item<bool>());
  CHECK(got[1].select(1, 0).eq(0).all().item<bool>());  // row 1, query 0: every head
  CHECK(got[1].select(1, 1).ne(0).any().item<bool>());
  const at::Tensor none = at::zeros_like(in.mask);
  CHECK(reference_attention(in.query, in.keys, in.values, none).eq(0).all().item<bool>());
}

TEST_CASE(
    "reference_attention computes in float64 for double inputs and returns the query's "
    "dtype",
    "[attention]") {
  const Inputs in = random_inputs(3);
  const at::Tensor q = in.query.to(at::kDouble), k = in.keys.to(at::kDouble);
  const at::Tensor v = in.values.to(at::kDouble);
  const at::Tensor got = reference_attention(q, k, v, in.mask);
  CHECK(got.scalar_type() == at::kDouble);
  CHECK(max_diff(got, by_definition(q, k, v, in.mask)) < 1e-12);
  const at::Tensor half = reference_attention(in.query.to(at::kHalf), in.keys, in.values, in.mask);
  CHECK(half.scalar_type() == at::kHalf);
  CHECK(close(half, by_definition(in.query.to(at::kHalf), in.keys, in.values, in.mask),
              tolerance(at::kHalf)));
}

TEST_CASE("softcapped_attention caps the scaled scores at softcap times tanh of score over softcap",
          "[attention]") {
  // Queries scaled up so that scores reach well past the cap.
  const Inputs in = random_inputs(4, /*query_scale=*/8.0);
  for (double softcap : {1.0, 5.0, 50.0}) {
    INFO("softcap " << softcap);
    const at::Tensor got = softcapped_attention(in.query, in.keys, in.values, in.mask, softcap);
    CHECK(got.sizes() == in.query.sizes());
    CHECK(close(got, by_definition(in.query, in.keys, in.values, in.mask, softcap), 1e-5));
    CHECK(got[1].select(1, 0).eq(0).all().item<bool>());  // no key seen: still zeros
  }
  const at::Tensor plain = reference_attention(in.query, in.keys, in.values, in.mask);
  CHECK(max_diff(softcapped_attention(in.query, in.keys, in.values, in.mask, 1.0), plain) > 0.1);
  // 0 = no cap: exactly reference_attention.
  CHECK(at::equal(softcapped_attention(in.query, in.keys, in.values, in.mask, 0.0), plain));
}

TEST_CASE("softcapped_attention refuses a negative softcap by name", "[attention][errors]") {
  const Inputs in = random_inputs(5);
  require_error([&] { softcapped_attention(in.query, in.keys, in.values, in.mask, -1.0); },
                {"softcap", ">= 0", "-1"});
}

TEST_CASE("sdpa_attention agrees with reference_attention on a bool mask and its additive form",
          "[attention]") {
  const Inputs in = random_inputs(6);
  const at::Tensor seen = in.mask.any(3, /*keepdim=*/true);  // queries that see a key
  const at::Tensor want = reference_attention(in.query, in.keys, in.values, in.mask);
  const at::Tensor with_bool = sdpa_attention(in.query, in.keys, in.values, in.mask);
  const at::Tensor additive = additive_mask(in.mask, at::kFloat);
  const at::Tensor with_additive = sdpa_attention(in.query, in.keys, in.values, additive);
  CHECK(with_bool.sizes() == in.query.sizes());
  CHECK(close(with_bool.masked_fill(seen.logical_not(), 0), want, 1e-5));
  CHECK(close(with_additive.masked_fill(seen.logical_not(), 0), want, 1e-5));
  // A float mask is added to the scores: a 0/1 float mask blocks nothing.
  const at::Tensor ones = in.mask.to(at::kFloat);
  const at::Tensor all = at::ones_like(in.mask);
  CHECK(close(sdpa_attention(in.query, in.keys, in.values, ones),
              by_definition(in.query, in.keys, in.values, all, 0, ones), 1e-5));
}

TEST_CASE("sdpa_attention takes a StepPlan's bool mask or its additive mask", "[attention]") {
  at::manual_seed(7);
  StaticCache cache(ConfigBuilder().max_batch(3).max_len(16));
  // Ragged prefill: lengths 3, 1 and 4, right-padded.
  StepPlan step = cache.prepare(positions(3, {0, 1, 2, -1, 0, -1, -1, -1, 0, 1, 2, 3}), 3);
  const at::Tensor real = positions(3, {0, 1, 2, -1, 0, -1, -1, -1, 0, 1, 2, 3}).ge(0);
  const at::Tensor kv = at::randn({3, kKvHeads, 4, kDim}, f32());
  const KV views = cache.update(0, kv, kv.neg(), step);
  const at::Tensor query = at::randn({3, kHeads, 4, kDim}, f32());
  const at::Tensor want = reference_attention(query, views.keys, views.values, step.mask(0));
  const at::Tensor keep = real.view({3, 1, 4, 1});
  for (const at::Tensor& mask : {step.mask(0), step.additive_mask(0)}) {
    INFO("mask dtype " << mask.scalar_type());
    const at::Tensor got = sdpa_attention(query, views.keys, views.values, mask);
    CHECK(close(got.masked_fill(keep.logical_not(), 0), want.mul(keep), 1e-5));
  }
}

namespace {

// One query a row over cache-like views: keys and values are the first
// `kv` slots of a wider buffer (strided rows, as a batch-prefix view), with
// an additive mask in which row 1 sees only its first two keys and row 2
// none (a padded row).
struct DecodeInputs {
  at::Tensor query, keys, values, mask, bool_mask;
};

DecodeInputs decode_inputs(uint64_t seed, int64_t dim, int64_t kv, at::ScalarType dtype) {
  at::manual_seed(seed);
  const auto opts = at::TensorOptions().dtype(dtype);
  DecodeInputs in;
  in.query = at::randn({3, kHeads, 1, dim}, opts);
  in.keys = at::randn({3, kKvHeads, kv + 5, dim}, opts).narrow(2, 0, kv);
  in.values = at::randn({3, kKvHeads, kv + 5, dim}, opts).narrow(2, 0, kv);
  in.bool_mask = at::ones({3, 1, 1, kv}, at::kBool);
  in.bool_mask[1].narrow(2, 2, kv - 2).fill_(false);
  in.bool_mask[2].fill_(false);
  in.mask = additive_mask(in.bool_mask, dtype);
  return in;
}

}  // namespace

TEST_CASE(
    "cpu_decode_attention is attention by definition for one query a row over strided views, in "
    "float32, bfloat16 and float16",
    "[attention][decode_attention]") {
  for (const at::ScalarType dtype : {at::kFloat, at::kBFloat16, at::kHalf}) {
    for (const int64_t dim : {kDim, int64_t{12}, int64_t{64}}) {  // 12: a tail past the lanes
      INFO(dtype << " head_dim " << dim);
      const DecodeInputs in = decode_inputs(8, dim, 37, dtype);
      const at::Tensor got = cpu_decode_attention(in.query, in.keys, in.values, in.mask);
      CHECK(got.sizes() == in.query.sizes());
      CHECK(got.scalar_type() == dtype);
      const at::Tensor want = by_definition(in.query, in.keys, in.values, in.bool_mask);
      INFO("max diff " << max_diff(got, want));
      CHECK(within_units(got, want, dtype));
    }
  }
}

TEST_CASE(
    "sdpa_attention of one query a row on the CPU is cpu_decode_attention, one launch, and "
    "equals scaled_dot_product_attention",
    "[attention][decode_attention][counter]") {
  const DecodeInputs in = decode_inputs(9, 64, 130, at::kFloat);
  at::Tensor got;
  {
    OpCounter ops;
    got = sdpa_attention(in.query, in.keys, in.values, in.mask);
    CHECK(ops.launches() == 1);
    CHECK(ops.counts().launched.at("").count("statickv::decode_attention") == 1);
  }
  const at::Tensor sdpa = at::scaled_dot_product_attention(
      in.query, in.keys, in.values, in.mask, 0.0, false, std::nullopt, /*enable_gqa=*/true);
  // Rows that see a key; the padded row gets zeros, where sdpa averages
  // every value.
  INFO("max diff " << max_diff(got.narrow(0, 0, 2), sdpa.narrow(0, 0, 2)));
  CHECK(within_units(got.narrow(0, 0, 2), sdpa.narrow(0, 0, 2), at::kFloat));
  CHECK(got[2].eq(0).all().item<bool>());
  // Two queries a row, or a bool mask, stay with scaled_dot_product_attention.
  OpCounter ops;
  sdpa_attention(in.query, in.keys, in.values, in.bool_mask);
  sdpa_attention(in.query.expand({3, kHeads, 2, 64}), in.keys, in.values,
                 in.mask.expand({3, 1, 2, 130}));
  CHECK(ops.counts().launched.at("").count("statickv::decode_attention") == 0);
}

TEST_CASE("cpu_decode_attention refuses what it cannot take, by name",
          "[attention][decode_attention][errors]") {
  const DecodeInputs in = decode_inputs(10, kDim, 6, at::kFloat);
  require_error(
      [&] {
        cpu_decode_attention(in.query.expand({3, kHeads, 2, kDim}), in.keys, in.values,
                             in.mask.expand({3, 1, 2, 6}));
      },
      {"query", "one query a row", "[3, 4, 2, 8]"});
  require_error(
      [&] {
        cpu_decode_attention(in.query.to(at::kDouble), in.keys.to(at::kDouble),
                             in.values.to(at::kDouble), in.mask.to(at::kDouble));
      },
      {"query", "Float, BFloat16 or Half", "Double"});
  require_error([&] { cpu_decode_attention(in.query, in.keys, in.values, in.bool_mask); },
                {"mask", "Float", "Bool"});
  require_error([&] { cpu_decode_attention(in.query, in.keys.to(at::kHalf), in.values, in.mask); },
                {"keys", "Float", "Half"});
}
