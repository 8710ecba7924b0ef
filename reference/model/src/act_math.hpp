#pragma once
// act_mul's kernels (act_mul.hpp) and one element of it for both: the CPU
// loop (act_mul.cpp) and the CUDA kernel (act_mul_cuda.cu) compute it with
// these same lines. float32 math, as LibTorch's opmath for every dtype the
// model runs in, rounded twice as the two ops it replaces round. Free of
// ATen, so the CUDA kernel compiles without it (act_mul.cpp turns the
// tensors into pointers and checks the launch).

#include <c10/macros/Macros.h>

#include <cmath>
#include <cstdint>

#ifdef STATICKV_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

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

#ifdef STATICKV_HAS_CUDA
/// Threads per block of act_mul's CUDA kernel.
constexpr int kActMulThreads = 256;

/// out[r * inter + i] = act_times(in[r * in_stride + i], in[r * in_stride +
/// inter + i]) for rows x inter elements, in `blocks` blocks on `stream`
/// (act_mul_cuda.cu; T: float, double, c10::Half, c10::BFloat16).
template <typename T>
void launch_act_mul(const T* in, T* out, int64_t rows, int64_t inter, int64_t in_stride, bool gelu,
                    int blocks, cudaStream_t stream);
#endif

}  // namespace statickv::reference::detail
