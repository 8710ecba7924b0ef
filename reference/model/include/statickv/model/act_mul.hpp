#pragma once
// act_mul(): the fused decode path's gated activation (Note [fused decode
// path]) as one kernel on either device: act(gate) * up from the gate/up
// GEMM's output, SiLU or Gemma's tanh-approximated GELU. It rounds as the
// two ops it replaces round (the activation to the dtype, then the
// product), so it differs from them only by the activation's own float32
// rounding (a library's exp or tanh against another's). Its CUDA kernel
// (act_mul_cuda.cu) and the CPU loop are twins; with the act_mul switch
// off (Note [kernel switches]) it runs the two ops. It records itself as
// statickv::act_mul (OpCounter, Note [counted step]).

#include <statickv/model/model_config.hpp>

#include <ATen/ATen.h>

namespace statickv::reference {

/// act(gate_up[..., :inter]) * gate_up[..., inter:], [..., inter] in
/// gate_up's dtype, contiguous. gate_up: [..., 2 * inter], float32, fp16 or
/// bf16, its last dim contiguous.
at::Tensor act_mul(const at::Tensor& gate_up, Activation act);

/// The family's gate activation alone: SiLU, or GELU with the tanh
/// approximation (LibTorch's ops; the plain path's, and act_mul's with its
/// switch off).
at::Tensor apply_activation(const at::Tensor& gate, Activation act);

}  // namespace statickv::reference
