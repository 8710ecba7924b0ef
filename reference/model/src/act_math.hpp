#pragma once
// act_mul's kernels (act_mul.hpp) and one element of it for both: the CPU
// loop (act_mul.cpp) and the CUDA kernel (act_mul_cuda.cu) compute it with
// these same lines. float32 math, as LibTorch's opmath for every dtype the
// model runs in, rounded twice as the two ops it replaces round.

#include <statickv/model/model_config.hpp>

#include <ATen/ATen.h>
#include <c10/macros/Macros.h>

#include <cmath>

namespace statickv::reference::detail {

// SiLU as LibTorch writes it: x / (1 + exp(-x)).
C10_HOST_DEVICE inline float silu(float x) { return x / (1.0f + ::expf(-x)); }

// GELU with the tanh approximation, as LibTorch writes it.
C10_HOST_DEVICE inline float gelu_tanh(float x) {
  constexpr float kBeta = static_cast<float>(M_SQRT2 * M_2_SQRTPI * 0.5);
  constexpr float kKappa = 0.044715f;
  const float inner = kBeta * (x + kKappa * x * x * x);
  return 0.5f * x * (1.0f + ::tanhf(inner));
}

// act(gate) rounded to T, times up, rounded to T.
template <typename T>
C10_HOST_DEVICE inline T act_times(T gate, T up, bool gelu) {
  const float g = static_cast<float>(gate);
  const T a = static_cast<T>(gelu ? gelu_tanh(g) : silu(g));
  return static_cast<T>(static_cast<float>(a) * static_cast<float>(up));
}

/// The kernels' arguments: rows of 2 * inter inputs (`in`, row stride
/// in_stride elements), rows of inter outputs (contiguous).
struct ActMul {
  at::Tensor in, out;
  int64_t rows = 0, inter = 0, in_stride = 0;
  Activation act = Activation::kSilu;
};
void act_mul_cpu(const ActMul& a);
#ifdef STATICKV_HAS_CUDA
void act_mul_cuda(const ActMul& a);
#endif

}  // namespace statickv::reference::detail
