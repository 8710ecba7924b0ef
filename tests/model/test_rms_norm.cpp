// rms_norm (reference/model/include/statickv/model/rms_norm.hpp): the fused
// path's RMSNorm equals the plain ATen RMSNorm (float32 math, the weight
// applied before one rounding) and LibTorch's own at::rms_norm, in every
// dtype, at any shape and strides; the result is contiguous, one launch, and
// a weight of another shape or dtype is refused by name.

#include "support.hpp"

#include <statickv/model/rms_norm.hpp>
#include <statickv/op_counter.hpp>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

// The header's formula, one op at a time in float32, rounded once.
at::Tensor plain_rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  const at::Tensor h = x.to(at::kFloat);
  const at::Tensor inv = at::rsqrt(h.pow(2).mean(-1, /*keepdim=*/true).add(eps));
  return h.mul(inv).mul(weight.to(at::kFloat)).to(x.scalar_type());
}

}  // namespace

TEST_CASE("rms_norm equals the plain RMSNorm in every dtype, width and leading shape",
          "[rms_norm]") {
  at::manual_seed(11);
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (int64_t d : {1, 16, 130}) {
      for (std::vector<int64_t> shape :
           {std::vector<int64_t>{d}, {3, d}, {2, 5, d}, {2, 1, 3, d}}) {
        const at::Tensor x = at::randn(shape).mul(3).to(dtype);
        const at::Tensor w = at::rand({d}).add(0.5).to(dtype);
        const at::Tensor got = rms_norm(x, w, 1e-6);
        INFO(c10::toString(dtype) << ", d " << d << ", rank " << shape.size() << ", max diff "
                                  << max_diff(got, plain_rms_norm(x, w, 1e-6)));
        CHECK(got.scalar_type() == dtype);
        CHECK(got.is_contiguous());
        CHECK(within_units(got, plain_rms_norm(x, w, 1e-6), dtype));
        CHECK(within_units(got, at::rms_norm(x, {d}, w, 1e-6), dtype));
      }
    }
  }
}

TEST_CASE("rms_norm reads strided views and returns a contiguous result of the same values",
          "[rms_norm]") {
  at::manual_seed(12);
  const at::Tensor base = at::randn({6, 4, 24});
  const at::Tensor w = at::rand({6}).add(0.5);
  // The last dim strided (a transpose) and rows of a wider buffer.
  for (const at::Tensor& x : {base.transpose(0, 2), base.narrow(2, 3, 6).select(1, 2)}) {
    REQUIRE_FALSE(x.is_contiguous());
    const at::Tensor got = rms_norm(x, w, 1e-5);
    CHECK(got.is_contiguous());
    CHECK(got.sizes() == x.sizes());
    CHECK(at::equal(got, rms_norm(x.contiguous(), w, 1e-5)));
    CHECK(within_units(got, plain_rms_norm(x, w, 1e-5), at::kFloat));
  }
}

TEST_CASE("rms_norm adds eps inside the root: a zero row stays zero and eps scales a tiny row",
          "[rms_norm]") {
  const at::Tensor w = at::ones({4});
  CHECK(at::equal(rms_norm(at::zeros({2, 4}), w, 1e-6), at::zeros({2, 4})));
  // mean(x^2) = 1e-4 beside eps 1e-4: the row is divided by sqrt(2e-4), not 1e-2.
  const at::Tensor x = at::full({1, 4}, 1e-2);
  CHECK(close(rms_norm(x, w, 1e-4), at::full({1, 4}, 1e-2 / std::sqrt(2e-4)), 1e-5));
  // The weight multiplies each column.
  const at::Tensor scaled = rms_norm(at::ones({1, 4}), at::tensor({1.0f, 2.0f, 0.0f, -1.0f}), 1e-6);
  CHECK(close(scaled, at::tensor({1.0f, 2.0f, 0.0f, -1.0f}).view({1, 4}), 1e-5));
}

TEST_CASE("rms_norm counts as one launch", "[rms_norm][counter]") {
  c10::InferenceMode inference;
  const at::Tensor x = at::randn({3, 64});
  const at::Tensor w = at::ones({64});
  OpCounter ops;
  const at::Tensor out = rms_norm(x, w, 1e-6);
  CHECK(ops.launches() == 1);
}

TEST_CASE("rms_norm refuses a weight of another shape, dtype or a scalar x, by name",
          "[rms_norm]") {
  require_error(
      [] {
        rms_norm(at::randn({2, 8}), at::ones({4}), 1e-6);
      },
      {"rms_norm weight", "[8]", "[4]"});
  require_error(
      [] {
        rms_norm(at::randn({2, 8}), at::ones({8}, at::kDouble), 1e-6);
      },
      {"rms_norm weight", "Double"});
  require_error([] { rms_norm(at::scalar_tensor(1.0), at::ones({1}), 1e-6); },
                {"rms_norm x", "scalar"});
}
