#pragma once
// cpu_linear(): the fused path's projections (Note [CPU projections]). A
// decode step multiplies 1 to kStreamRows rows by every weight matrix once,
// so on the CPU it is bound by reading the weights, and which library reads
// them fastest depends on the processor and the thread count: the torch
// wheel's MKL sgemm is slow at a few rows on some x86 processors, oneDNN
// (also in the wheel) is faster there, and statickv's own loop
// (stream_linear.cpp: each weight row read once, AVX2 and FMA where the
// processor has them, else a portable twin) faster still. A prefill chunk
// multiplies more rows, where the work is arithmetic, and there too MKL and
// oneDNN differ by processor. So each process measures the routes once, on
// the first model's projection weights (or a weight matrix too large for the
// caches), at the thread count it runs with, and takes the fastest for a few
// rows (linear_route()) and for more (many_rows_route()). Float32 CPU
// tensors take those routes; anything else, and every call with the
// cpu_linear switch off (Note [kernel switches]), is the GEMM (at::linear).
// The routes sum in different orders: their results differ by float32
// rounding.

#include <ATen/ATen.h>

#include <cstdint>
#include <string>
#include <vector>

namespace statickv::reference {

/// The most rows (x's leading dims together) the few-rows route takes;
/// more take many_rows_route(): the GEMM or oneDNN, whose blocking pays once
/// the weights are reused enough.
inline constexpr int64_t kStreamRows = 16;

/// How a few rows meet a weight matrix on the CPU.
enum class LinearRoute {
  kGemm,    ///< at::linear (MKL's sgemm in the torch wheel)
  kOneDnn,  ///< oneDNN's linear (mkldnn::_linear_pointwise)
  kStream,  ///< statickv's loop, each weight row read once
};

/// "gemm", "onednn" or "stream".
std::string route_name(LinearRoute route);

/// Whether this LibTorch can take `route` (oneDNN: a build with it).
bool route_available(LinearRoute route);

/// The route this process measured fastest (measured at the first call,
/// with the intra-op threads of that moment; a few tenths of a second).
/// kGemm with the cpu_linear switch off.
LinearRoute linear_route();

/// linear_route(), measured (if it has not been yet) on passes through
/// `sample`: a model's own projection weights, as a decode step reads
/// them; the weights that do not route are left out, the first of the rest
/// up to 64 MiB are measured, and with none left it measures a 64 MiB
/// weight of its own.
LinearRoute linear_route(const std::vector<at::Tensor>& sample);

/// The route this process measured faster for more than kStreamRows rows
/// (the GEMM or oneDNN; measured with linear_route(), on passes of 128 rows
/// through the first 48 MiB of the same weights). kGemm with the
/// cpu_linear switch off.
LinearRoute many_rows_route();

/// Whether cpu_linear takes a measured route for x [..., in] and weight
/// (float32 CPU tensors, at least one row, a weight with unit column
/// stride, the switch on), else it is the GEMM.
bool routes(const at::Tensor& x, const at::Tensor& weight);

/// The route cpu_linear takes for x: linear_route() for 1..kStreamRows
/// rows, many_rows_route() for more, kGemm where it does not route.
LinearRoute route_for(const at::Tensor& x, const at::Tensor& weight);

/// x [..., in] @ weight[out, in]^T (+ bias [out]), as at::linear computes it.
at::Tensor cpu_linear(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {});

/// y [..., out] + x [..., in] @ weight^T (+ bias), into y: in place on the
/// GEMM and stream routes; oneDNN adds in its epilogue into a new tensor,
/// which y then refers to.
void cpu_linear_add(at::Tensor& y, const at::Tensor& x, const at::Tensor& weight,
                    const at::Tensor& bias = {});

/// cpu_linear through one route, whatever was measured (tests, benchmarks).
/// x must route (routes(x, weight)); the stream route takes 1..kStreamRows
/// rows.
at::Tensor linear_by(LinearRoute route, const at::Tensor& x, const at::Tensor& weight,
                     const at::Tensor& bias = {});

/// Which loop the stream route runs on this processor: "avx2" or "portable".
std::string stream_loop_isa();

/// The stream route through its portable loop whatever the processor has
/// (the AVX2 loop's twin, for tests). x must route, 1..kStreamRows rows.
at::Tensor linear_by_portable_stream(const at::Tensor& x, const at::Tensor& weight,
                                     const at::Tensor& bias = {});

}  // namespace statickv::reference
