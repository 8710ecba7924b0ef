#pragma once
// The fused rotary write's CUDA kernel launch (rotary.cu; Note [fused rotary
// write], docs/design.md): the kernel's operands as packed accessors. Free
// of ATen's operator headers, so the kernel compiles without them (nvcc
// spends about a minute on ATen.h); rotary.cpp dispatches on the dtype,
// makes the accessors and checks the launch.

#include <ATen/core/TensorAccessor.h>
#include <c10/macros/Macros.h>

#include <cuda_runtime_api.h>

#include <cstdint>

namespace statickv::detail {

/// Restrict-qualified pointers, as at::RestrictPtrTraits (which ATen
/// declares for nvcc only; the host makes these accessors).
template <typename T>
struct RotaryRestrict {
  typedef T* C10_RESTRICT PtrType;
};

template <typename T>
using RotaryAcc4 = at::PackedTensorAccessor64<T, 4, RotaryRestrict>;

/// RotaryWrite's tensors (rotary.hpp) as the kernel reads and writes them.
template <typename T>
struct RotaryOperands {
  RotaryAcc4<T> query, key, value, cos, sin;
  at::PackedTensorAccessor64<int64_t, 2> slots;
  RotaryAcc4<T> query_out, key_buffer, value_buffer;
};

/// One thread per element of [rows, heads + kv_heads, q, d] (`total`, > 0)
/// on `stream`. T: float, double, c10::Half, c10::BFloat16.
template <typename T>
void launch_rotary_write(const RotaryOperands<T>& w, int64_t total, cudaStream_t stream);

}  // namespace statickv::detail
