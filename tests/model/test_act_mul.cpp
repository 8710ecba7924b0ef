// act_mul (reference/model/include/statickv/model/act_mul.hpp): the fused
// path's act(gate) * up in one kernel equals the activation then the
// multiply it replaces, up to the activation's own float32 rounding, at
// odd widths, several rows and strided inputs; it counts as one launch.

#include "support.hpp"

#include <statickv/model/act_mul.hpp>
#include <statickv/op_counter.hpp>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

// The two ops act_mul replaces.
at::Tensor two_ops(const at::Tensor& gate_up, Activation act) {
  const int64_t inter = gate_up.size(-1) / 2;
  const at::Tensor gate = gate_up.narrow(-1, 0, inter);
  const at::Tensor a = act == Activation::kGeluTanh ? at::gelu(gate, "tanh") : at::silu(gate);
  return a.mul(gate_up.narrow(-1, inter, inter));
}

// Tolerance: test::within_units, one unit of the dtype. In float32 GELU's
// 1 + tanh(.) cancels for negative inputs, which magnifies a tanh ulp: a few
// float32 units of the output's scale, which the unit at that scale covers.

}  // namespace

TEST_CASE("act_mul equals the activation then the multiply, every dtype, width and activation",
          "[act_mul]") {
  at::manual_seed(4);
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
      for (int64_t inter : {1, 7, 64, 515}) {
        for (std::vector<int64_t> lead : {std::vector<int64_t>{1, 1}, {3, 1}, {2, 5}}) {
          std::vector<int64_t> shape = lead;
          shape.push_back(2 * inter);
          const at::Tensor gate_up = at::randn(shape).mul(4).to(dtype);
          const at::Tensor got = act_mul(gate_up, act);
          INFO(c10::toString(dtype)
               << ", inter " << inter << ", rows " << gate_up.numel() / (2 * inter) << ", gelu "
               << (act == Activation::kGeluTanh));
          const at::Tensor want = two_ops(gate_up, act);
          CHECK(got.sizes() == want.sizes());
          CHECK(got.scalar_type() == dtype);
          CHECK(got.is_contiguous());
          INFO("max diff " << max_diff(got, want));
          CHECK(within_units(got, want, dtype));
        }
      }
    }
  }
}

TEST_CASE("act_mul reads a strided gate/up view and counts as one launch", "[act_mul][counter]") {
  c10::InferenceMode inference;
  // Rows of a wider buffer: the row stride is not 2 * inter.
  const at::Tensor wide = at::randn({4, 50});
  const at::Tensor gate_up = wide.narrow(1, 3, 40);
  OpCounter ops;
  const at::Tensor got = act_mul(gate_up, Activation::kSilu);
  CHECK(ops.launches() == 1);
  CHECK(close(got, two_ops(gate_up, Activation::kSilu), 1e-6));
}

TEST_CASE("act_mul refuses what it cannot take, by name", "[act_mul]") {
  require_error(
      [] {
        act_mul(at::randn({2, 5}), Activation::kSilu);
      },
      {"act_mul gate_up", "2 * inter", "[2, 5]"});
  require_error(
      [] {
        act_mul(at::ones({2, 4}, at::kLong), Activation::kSilu);
      },
      {"act_mul gate_up", "bfloat16", "Long"});
}

TEST_CASE("apply_activation is SiLU or the tanh-approximated GELU of the gate alone", "[act_mul]") {
  at::manual_seed(5);
  const at::Tensor gate = at::randn({3, 33}).mul(4);
  // x * sigmoid(x), and 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3))).
  const at::Tensor silu = gate.mul(gate.sigmoid());
  const at::Tensor inner = gate.add(gate.pow(3).mul(0.044715)).mul(std::sqrt(2.0 / M_PI));
  const at::Tensor gelu = gate.mul(0.5).mul(inner.tanh().add(1));
  const at::Tensor got_silu = apply_activation(gate, Activation::kSilu);
  const at::Tensor got_gelu = apply_activation(gate, Activation::kGeluTanh);
  CHECK(got_silu.sizes() == gate.sizes());
  CHECK(close(got_silu, silu, 1e-5));
  CHECK(close(got_gelu, gelu, 1e-5));
  CHECK_FALSE(close(got_gelu, silu, 1e-2));
  // In the gate's dtype; act_mul is it times the up half.
  const at::Tensor half = gate.to(at::kHalf);
  CHECK(apply_activation(half, Activation::kGeluTanh).scalar_type() == at::kHalf);
  const at::Tensor gate_up = at::cat({gate, at::randn({3, 33})}, -1);
  for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
    const at::Tensor want =
        apply_activation(gate_up.narrow(-1, 0, 33), act).mul(gate_up.narrow(-1, 33, 33));
    CHECK(within_units(act_mul(gate_up, act), want, at::kFloat));
  }
}
