// cpu_linear() (reference/model/include/statickv/model/cpu_linear.hpp;
// Note [CPU projections]): the three routes a decode step's projections
// can take on the CPU, and the process's choice among them by measurement.

#include <statickv/kernel_switches.hpp>
#include <statickv/model/cpu_linear.hpp>

#include "stream_linear.hpp"

#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <chrono>
#include <limits>
#include <mutex>
#include <numeric>
#include <optional>
#include <vector>

namespace statickv::reference {

namespace {

using Scalars = c10::List<std::optional<at::Scalar>>;

/// oneDNN's linear, where the LibTorch build registers it: plain, and with
/// a binary post-op ("add") that sums another tensor into the result.
struct OneDnn {
  std::optional<c10::TypedOperatorHandle<at::Tensor(
      const at::Tensor&, const at::Tensor&, const std::optional<at::Tensor>&, c10::string_view,
      Scalars, std::optional<c10::string_view>)>>
      plain;
  std::optional<
      c10::TypedOperatorHandle<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                          const std::optional<at::Tensor>&, c10::string_view)>>
      binary;
};

const OneDnn& onednn() {
  static const OneDnn ops = [] {
    OneDnn o;
    auto& dispatcher = c10::Dispatcher::singleton();
    if (auto h = dispatcher.findOp({"mkldnn::_linear_pointwise", ""})) {
      o.plain = h->typed<at::Tensor(const at::Tensor&, const at::Tensor&,
                                    const std::optional<at::Tensor>&, c10::string_view, Scalars,
                                    std::optional<c10::string_view>)>();
    }
    if (auto h = dispatcher.findOp({"mkldnn::_linear_pointwise", "binary"})) {
      o.binary = h->typed<at::Tensor(const at::Tensor&, const at::Tensor&, const at::Tensor&,
                                     const std::optional<at::Tensor>&, c10::string_view)>();
    }
    return o;
  }();
  return ops;
}

std::optional<at::Tensor> optional_bias(const at::Tensor& bias) {
  return bias.defined() ? std::optional<at::Tensor>(bias) : std::nullopt;
}

/// x as [rows, in] with a unit last stride.
at::Tensor as_rows(const at::Tensor& x) {
  at::Tensor rows = x.reshape({-1, x.size(-1)});
  return rows.stride(-1) == 1 ? rows : rows.contiguous();
}

/// [rows, out] of `route` (x routes).
at::Tensor run_route(LinearRoute route, const at::Tensor& x, const at::Tensor& weight,
                     const at::Tensor& bias, bool portable = false) {
  const at::Tensor rows = as_rows(x);
  if (route == LinearRoute::kOneDnn) {
    return onednn().plain->call(rows.contiguous(), weight, optional_bias(bias), "none", Scalars(),
                                "");
  }
  if (route == LinearRoute::kStream) {
    at::Tensor y = at::empty({rows.size(0), weight.size(0)}, x.options());
    stream_linear_into(rows, weight, bias.defined() ? bias.contiguous() : bias, y, false, portable);
    return y;
  }
  return at::linear(rows, weight, optional_bias(bias));
}

/// Seconds of one call of `route` on x.
double time_call(LinearRoute route, const at::Tensor& x, const at::Tensor& weight) {
  const auto start = std::chrono::steady_clock::now();
  run_route(route, x, weight, {});
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

/// Seconds of one pass of `route` over every weight, as a decode step
/// reads them: one call each, the rows matching each weight's input width.
double time_pass(LinearRoute route, const std::vector<at::Tensor>& weights, int64_t rows) {
  double seconds = 0;
  for (const at::Tensor& w : weights) {
    seconds += time_call(route, at::ones({rows, w.size(1)}).mul_(0.5), w);
  }
  return seconds;
}

/// A 64 MiB weight (larger than any processor's caches, so every route
/// streams it from memory): what is measured without a model's weights.
std::vector<at::Tensor> synthetic_weights() { return {at::randn({16384, 1024}).mul_(0.02)}; }

/// The fastest of `candidates` over passes of each of `rows` through
/// `weights`: each route's fastest pass of 5 interleaved rounds, the order
/// rotating from round to round, so a moment of contention (another process
/// starting or ending) slows one pass of every route instead of every pass
/// of one.
LinearRoute fastest(const std::vector<LinearRoute>& candidates,
                    const std::vector<at::Tensor>& weights, const std::vector<int64_t>& rows) {
  constexpr double kNever = std::numeric_limits<double>::infinity();
  std::vector<std::vector<double>> best(candidates.size(),
                                        std::vector<double>(rows.size(), kNever));
  for (LinearRoute r : candidates) time_pass(r, weights, rows.back());  // warm-up
  for (size_t round = 0; round < 5; ++round) {
    for (size_t k = 0; k < candidates.size(); ++k) {
      const size_t c = (k + round) % candidates.size();
      for (size_t i = 0; i < rows.size(); ++i) {
        best[c][i] = std::min(best[c][i], time_pass(candidates[c], weights, rows[i]));
      }
    }
  }
  auto total = [&](size_t c) { return std::accumulate(best[c].begin(), best[c].end(), 0.0); };
  size_t winner = 0;
  for (size_t c = 1; c < candidates.size(); ++c) winner = total(c) < total(winner) ? c : winner;
  return candidates[winner];
}

std::vector<LinearRoute> available(std::initializer_list<LinearRoute> routes) {
  std::vector<LinearRoute> out;
  for (LinearRoute r : routes) {
    if (route_available(r)) out.push_back(r);
  }
  return out;
}

/// The first of `weights` up to `bytes` (at least one).
std::vector<at::Tensor> first_bytes(const std::vector<at::Tensor>& weights, int64_t bytes) {
  std::vector<at::Tensor> out;
  int64_t taken = 0;
  for (const at::Tensor& w : weights) {
    const auto size = static_cast<int64_t>(w.nbytes());
    if (!out.empty() && taken + size > bytes) break;
    out.push_back(w);
    taken += size;
  }
  return out;
}

/// The rows a pass of the many-rows measurement multiplies: the CPU's
/// default prefill chunk, where the work is arithmetic, not reading the
/// weights.
constexpr int64_t kManyRowsMeasured = 128;
/// The weights it multiplies: more than a processor's cache holds, as a
/// prefill step's are (16 MiB stayed cached and ranked the GEMM first on
/// machines where oneDNN streams a whole model's prefill faster).
constexpr int64_t kManyRowsBytes = int64_t{48} << 20;

struct Routes {
  LinearRoute few = LinearRoute::kGemm;   // 1..kStreamRows rows
  LinearRoute many = LinearRoute::kGemm;  // more
};

/// Both routes: the few rows' over passes of 1 and 4 rows through every
/// weight; the many rows' (the GEMM or oneDNN) over passes of
/// kManyRowsMeasured rows through the first kManyRowsBytes.
Routes measure_routes(const std::vector<at::Tensor>& weights) {
  c10::InferenceMode inference;
  Routes r;
  r.few = fastest(available({LinearRoute::kGemm, LinearRoute::kStream, LinearRoute::kOneDnn}),
                  weights, {1, 4});
  r.many = fastest(available({LinearRoute::kGemm, LinearRoute::kOneDnn}),
                   first_bytes(weights, kManyRowsBytes), {kManyRowsMeasured});
  return r;
}

/// A float32 CPU [out, in] weight with unit column stride: what a route reads.
bool routable_weight(const at::Tensor& weight) {
  return weight.scalar_type() == at::kFloat && weight.is_cpu() && weight.dim() == 2 &&
         weight.stride(1) == 1;
}

/// The process's routes, measured once.
std::once_flag g_route_measured;
Routes g_routes;

void check_operands(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  TORCH_CHECK(weight.dim() == 2, "cpu_linear weight: expected [out, in] but got ", weight.sizes());
  TORCH_CHECK(x.dim() >= 1 && x.size(-1) == weight.size(1), "cpu_linear x: expected [..., ",
              weight.size(1), "] (weight's in) but got ", x.sizes());
  TORCH_CHECK(!bias.defined() || (bias.dim() == 1 && bias.size(0) == weight.size(0)),
              "cpu_linear bias: expected [", weight.size(0), "] but got ", bias.sizes());
  TORCH_CHECK(!bias.defined() || bias.scalar_type() == weight.scalar_type(),
              "cpu_linear bias: expected ", weight.scalar_type(), " (weight's) but got ",
              bias.scalar_type());
}

std::vector<int64_t> out_shape(const at::Tensor& x, const at::Tensor& weight) {
  std::vector<int64_t> shape = x.sizes().vec();
  shape.back() = weight.size(0);
  return shape;
}

/// The number of rows x [..., in] holds.
int64_t rows_of(const at::Tensor& x) { return x.numel() / std::max<int64_t>(1, x.size(-1)); }

/// The operands' checks, and that x can take `route`: what a caller naming
/// a route owes.
void check_routed(LinearRoute route, const at::Tensor& x, const at::Tensor& weight,
                  const at::Tensor& bias) {
  check_operands(x, weight, bias);
  TORCH_CHECK(routes(x, weight), "cpu_linear x: expected float32 CPU rows but got ", x.sizes(), " ",
              x.scalar_type(), " on ", x.device());
  TORCH_CHECK(route != LinearRoute::kStream || rows_of(x) <= kStreamRows,
              "cpu_linear x: expected 1 to ", kStreamRows, " rows for the stream route but got ",
              x.sizes());
}

/// x through `route` (checked), recorded as one launch, in x's leading shape.
at::Tensor routed(LinearRoute route, const at::Tensor& x, const at::Tensor& weight,
                  const at::Tensor& bias) {
  RECORD_FUNCTION("statickv::cpu_linear", std::vector<c10::IValue>({x}));
  return run_route(route, x, weight, bias).view(out_shape(x, weight));
}

}  // namespace

std::string route_name(LinearRoute route) {
  switch (route) {
    case LinearRoute::kOneDnn:
      return "onednn";
    case LinearRoute::kStream:
      return "stream";
    default:
      return "gemm";
  }
}

bool route_available(LinearRoute route) {
  return route != LinearRoute::kOneDnn || (onednn().plain && onednn().binary);
}

LinearRoute linear_route() { return linear_route({}); }

LinearRoute linear_route(const std::vector<at::Tensor>& sample) {
  std::call_once(g_route_measured, [&] {
    if (!kernel_enabled("cpu_linear")) return;  // the GEMM
    std::vector<at::Tensor> weights;
    for (const at::Tensor& w : sample) {
      if (routable_weight(w)) weights.push_back(w);
    }
    g_routes = measure_routes(weights.empty() ? synthetic_weights()
                                              : first_bytes(weights, int64_t{64} << 20));
  });
  return g_routes.few;
}

LinearRoute many_rows_route() {
  linear_route();
  return g_routes.many;
}

bool routes(const at::Tensor& x, const at::Tensor& weight) {
  if (!routable_weight(weight) || x.scalar_type() != at::kFloat || !x.is_cpu()) return false;
  if (x.dim() < 1 || x.size(-1) != weight.size(1)) return false;
  return rows_of(x) >= 1 && kernel_enabled("cpu_linear");
}

LinearRoute route_for(const at::Tensor& x, const at::Tensor& weight) {
  if (!routes(x, weight)) return LinearRoute::kGemm;
  return rows_of(x) <= kStreamRows ? linear_route() : many_rows_route();
}

at::Tensor linear_by(LinearRoute route, const at::Tensor& x, const at::Tensor& weight,
                     const at::Tensor& bias) {
  check_routed(route, x, weight, bias);
  TORCH_CHECK(route_available(route),
              "route: expected a LibTorch with oneDNN for onednn but this one has none");
  return routed(route, x, weight, bias);
}

at::Tensor cpu_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias) {
  check_operands(x, weight, bias);
  const LinearRoute route = route_for(x, weight);
  if (route == LinearRoute::kGemm) return at::linear(x, weight, optional_bias(bias));
  return routed(route, x, weight, bias);
}

void cpu_linear_add(at::Tensor& y, const at::Tensor& x, const at::Tensor& weight,
                    const at::Tensor& bias) {
  check_operands(x, weight, bias);
  TORCH_CHECK(
      y.dim() >= 1 && y.size(-1) == weight.size(0) && y.numel() == rows_of(x) * weight.size(0),
      "cpu_linear_add y: expected [..., ", weight.size(0), "] with x's rows but got ", y.sizes());
  const LinearRoute route = y.is_contiguous() ? route_for(x, weight) : LinearRoute::kGemm;
  if (route == LinearRoute::kGemm) {
    at::Tensor y2 = y.view({-1, y.size(-1)});
    y2.addmm_(x.reshape({-1, x.size(-1)}), weight.t());
    if (bias.defined()) y2.add_(bias);
    return;
  }
  RECORD_FUNCTION("statickv::cpu_linear", std::vector<c10::IValue>({x}));
  const at::Tensor rows = as_rows(x);
  if (route == LinearRoute::kStream) {
    at::Tensor y2 = y.view({-1, y.size(-1)});
    stream_linear_into(rows, weight, bias.defined() ? bias.contiguous() : bias, y2, true, false);
    return;
  }
  y = onednn()
          .binary
          ->call(rows.contiguous(), y.view({-1, y.size(-1)}), weight, optional_bias(bias), "add")
          .view(y.sizes());
}

at::Tensor linear_by_portable_stream(const at::Tensor& x, const at::Tensor& weight,
                                     const at::Tensor& bias) {
  check_routed(LinearRoute::kStream, x, weight, bias);
  return run_route(LinearRoute::kStream, x, weight, bias, /*portable=*/true)
      .view(out_shape(x, weight));
}

}  // namespace statickv::reference
