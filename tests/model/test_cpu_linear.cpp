// cpu_linear (reference/model/include/statickv/model/cpu_linear.hpp; Note
// [CPU projections]): each route a projection can take on the CPU (the
// GEMM, oneDNN, statickv's stream loop and its portable twin for a few rows)
// equals at::linear up to float32 rounding at every row count it takes,
// odd widths, a bias and strided rows; cpu_linear_add adds into y; more rows
// take the measured many-rows route; what is not routed is the GEMM itself;
// a routed projection counts as one launch.

#include "support.hpp"

#include <statickv/model/cpu_linear.hpp>
#include <statickv/op_counter.hpp>

#include <functional>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

at::Tensor gemm(const at::Tensor& x, const at::Tensor& w, const at::Tensor& bias) {
  return at::linear(x, w, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

// Float32 sums of `in` products in another order: a few units of the
// float32 epsilon of the largest partial sum, which |x| . |w| bounds.
bool close_to_gemm(const at::Tensor& got, const at::Tensor& x, const at::Tensor& w,
                   const at::Tensor& bias) {
  const at::Tensor want = gemm(x, w, bias);
  const at::Tensor bound = at::linear(x.abs(), w.abs()).mul(8 * 1.2e-7).add(1e-6);
  return got.sizes() == want.sizes() && got.sub(want).abs().le(bound).all().item<bool>();
}

using Projection =
    std::function<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&)>;

// Every route by name, and the stream route's portable twin.
std::vector<std::pair<std::string, Projection>> all_routes() {
  std::vector<std::pair<std::string, Projection>> out;
  for (LinearRoute r : {LinearRoute::kGemm, LinearRoute::kOneDnn, LinearRoute::kStream}) {
    if (!route_available(r)) continue;  // oneDNN: a LibTorch built without it
    out.emplace_back(route_name(r), [r](const at::Tensor& x, const at::Tensor& w,
                                        const at::Tensor& b) { return linear_by(r, x, w, b); });
  }
  out.emplace_back("stream portable",
                   [](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
                     return linear_by_portable_stream(x, w, b);
                   });
  out.emplace_back("cpu_linear", [](const at::Tensor& x, const at::Tensor& w, const at::Tensor& b) {
    return cpu_linear(x, w, b);
  });
  return out;
}

}  // namespace

TEST_CASE("every CPU route equals the GEMM at every row count it takes, odd widths and a bias",
          "[cpu_linear]") {
  at::manual_seed(11);
  INFO("measured routes " << route_name(linear_route()) << " and " << route_name(many_rows_route())
                          << ", stream loop " << stream_loop_isa());
  for (const auto& [name, project] : all_routes()) {
    const bool few_only = name.rfind("stream", 0) == 0;
    for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{3}, int64_t{4}, int64_t{8}, kStreamRows,
                         kStreamRows + 1, int64_t{70}}) {
      if (few_only && rows > kStreamRows) continue;
      for (auto [out, in] : std::vector<std::pair<int64_t, int64_t>>{
               {1, 1}, {3, 7}, {5, 8}, {9, 17}, {13, 64}, {64, 576}, {37, 1539}}) {
        for (bool with_bias : {false, true}) {
          const at::Tensor x = at::randn({rows, in});
          const at::Tensor w = at::randn({out, in});
          const at::Tensor bias = with_bias ? at::randn({out}) : at::Tensor();
          INFO(name << ": rows " << rows << ", out " << out << ", in " << in << ", bias "
                    << with_bias);
          CHECK(routes(x, w));
          CHECK(close_to_gemm(project(x, w, bias), x, w, bias));
        }
      }
    }
  }
}

TEST_CASE("every CPU route keeps x's leading shape and reads strided rows", "[cpu_linear]") {
  at::manual_seed(12);
  // [b, q, in] rows of a wider buffer: the row stride is not `in`; and a
  // weight whose rows are views into a wider matrix (the fused q/k/v).
  const at::Tensor x = at::randn({2, 3, 40}).narrow(2, 4, 33);
  const at::Tensor w = at::randn({30, 33}).narrow(0, 10, 20);
  for (const auto& [name, project] : all_routes()) {
    INFO(name);
    const at::Tensor got = project(x, w, {});
    CHECK(got.sizes() == at::IntArrayRef({2, 3, 20}));
    CHECK(close_to_gemm(got, x, w, {}));
  }
}

TEST_CASE("cpu_linear_add adds the projection into y", "[cpu_linear]") {
  at::manual_seed(13);
  for (int64_t rows : {int64_t{1}, int64_t{2}, int64_t{5}, kStreamRows, kStreamRows + 3}) {
    const at::Tensor x = at::randn({rows, 1, 24});
    const at::Tensor w = at::randn({10, 24});
    const at::Tensor bias = at::randn({10});
    at::Tensor y = at::randn({rows, 1, 10});
    const at::Tensor before = y.clone();
    cpu_linear_add(y, x, w, bias);
    INFO("rows " << rows << ", route " << route_name(route_for(x, w)));
    CHECK(y.sizes() == before.sizes());
    const at::Tensor bound = at::linear(x.abs(), w.abs()).mul(1e-6).add(1e-5);
    CHECK(y.sub(before.add(gemm(x, w, bias))).abs().le(bound).all().item<bool>());
  }
}

TEST_CASE("more rows than the stream loop takes go the measured many-rows route", "[cpu_linear]") {
  at::manual_seed(15);
  const at::Tensor w = at::randn({12, 16});
  const at::Tensor many = at::randn({kStreamRows + 1, 16});
  REQUIRE(routes(many, w));
  CHECK(route_for(many, w) == many_rows_route());
  CHECK(route_for(many.narrow(0, 0, kStreamRows), w) == linear_route());
  CHECK(many_rows_route() != LinearRoute::kStream);
  CHECK(close_to_gemm(cpu_linear(many, w), many, w, {}));
  if (many_rows_route() == LinearRoute::kGemm) {
    CHECK(at::equal(cpu_linear(many, w), at::linear(many, w)));
  }
}

TEST_CASE("what cpu_linear does not route is the GEMM itself", "[cpu_linear]") {
  at::manual_seed(14);
  const at::Tensor w = at::randn({12, 16});
  // Another dtype: the GEMM, bit for bit.
  const at::Tensor xb = at::randn({2, 16}).to(at::kBFloat16);
  const at::Tensor wb = w.to(at::kBFloat16);
  CHECK_FALSE(routes(xb, wb));
  CHECK(route_for(xb, wb) == LinearRoute::kGemm);
  CHECK(at::equal(cpu_linear(xb, wb), at::linear(xb, wb)));
  const at::Tensor none = at::randn({0, 16});
  CHECK(cpu_linear(none, w).sizes() == at::IntArrayRef({0, 12}));
}

TEST_CASE("a routed projection counts as one launch", "[cpu_linear][counter]") {
  c10::InferenceMode inference;
  const at::Tensor x = at::randn({4, 64}), w = at::randn({32, 64}), bias = at::randn({32});
  for (LinearRoute r : {LinearRoute::kOneDnn, LinearRoute::kStream}) {
    if (!route_available(r)) continue;
    INFO(route_name(r));
    OpCounter ops;
    linear_by(r, x, w, bias);
    CHECK(ops.launches() == 1);
  }
}

TEST_CASE("cpu_linear refuses mismatched operands, by name", "[cpu_linear]") {
  require_error(
      [] {
        cpu_linear(at::randn({2, 5}), at::randn({3, 4}));
      },
      {"cpu_linear x", "[..., 4]", "[2, 5]"});
  require_error(
      [] {
        cpu_linear(at::randn({2, 4}), at::randn({3, 4}), at::randn({2}));
      },
      {"cpu_linear bias", "[3]", "[2]"});
  require_error(
      [] {
        cpu_linear(at::randn({2, 4}), at::randn({4}));
      },
      {"cpu_linear weight", "[out, in]", "[4]"});
  require_error(
      [] {
        linear_by(LinearRoute::kStream, at::randn({20, 4}), at::randn({3, 4}));
      },
      {"cpu_linear x", "1 to 16 rows for the stream route", "[20, 4]"});
  at::Tensor y = at::randn({2, 2});
  require_error(
      [&] {
        cpu_linear_add(y, at::randn({2, 4}), at::randn({3, 4}));
      },
      {"cpu_linear_add y", "[..., 3]", "[2, 2]"});
}
