#pragma once
// The stream route's loop (stream_linear.cpp), private to cpu_linear.cpp:
// y[r, n] (+)= rows[r, :] . weight[n, :] + bias[n], each weight row read
// once, the columns split over the intra-op threads.

#include <ATen/ATen.h>

#include <string>

namespace statickv::reference {

/// rows: [R, in] float32 with a unit last stride; weight: [out, in] with a
/// unit column stride; bias: [out] contiguous or undefined; y: [R, out]
/// contiguous. `portable`: the portable loop even where AVX2 is there.
void stream_linear_into(const at::Tensor& rows, const at::Tensor& weight, const at::Tensor& bias,
                        at::Tensor& y, bool add, bool portable);

}  // namespace statickv::reference
