#pragma once
// rms_norm(): the fused decode path's RMSNorm (Note [fused decode path]) as
// one kernel on either device: LibTorch's fused kernel on CUDA
// (at::rms_norm, _fused_rms_norm), a single pass over each row on the CPU
// (the composite at::rms_norm runs about ten ops there). It records itself
// as statickv::rms_norm (OpCounter, Note [counted step]).

#include <ATen/ATen.h>

namespace statickv::reference {

/// x * rsqrt(mean(x^2 over the last dim) + eps) * weight, computed in
/// float32 and rounded once to x's dtype (the weight applied before the
/// rounding, as at::rms_norm's fused kernel does). x: any shape [..., d]
/// and any strides; weight: [d] in x's dtype on x's device. The result is
/// contiguous.
at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps);

}  // namespace statickv::reference
