// The CUDA kernel behind rotary_update() (include/statickv/rotary.hpp; Note
// [fused rotary write], docs/design.md): one thread per element of the
// step's queries and keys, on the current stream. Its CPU twin is
// rotary_write_cpu (src/rotary.cpp); both round as the unfused ops do.

#include <statickv/rotary.hpp>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/core/TensorAccessor.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace statickv::detail {

namespace {

template <typename T>
using Acc4 = at::PackedTensorAccessor64<T, 4, at::RestrictPtrTraits>;

// Products and sum rounded separately (no fused multiply-add), as the
// unfused elementwise ops compute them.
__device__ inline float mul_rn(float a, float b) { return __fmul_rn(a, b); }
__device__ inline double mul_rn(double a, double b) { return __dmul_rn(a, b); }
__device__ inline float add_rn(float a, float b) { return __fadd_rn(a, b); }
__device__ inline double add_rn(double a, double b) { return __dadd_rn(a, b); }

template <typename T>
__device__ T rotate(T x, T partner, T c, T s, bool first_half) {
  using Acc = at::opmath_type<T>;
  const T a = static_cast<T>(mul_rn(static_cast<Acc>(x), static_cast<Acc>(c)));
  const Acc r = first_half ? -static_cast<Acc>(partner) : static_cast<Acc>(partner);
  const T b = static_cast<T>(mul_rn(r, static_cast<Acc>(s)));
  return static_cast<T>(add_rn(static_cast<Acc>(a), static_cast<Acc>(b)));
}

// Element e of [rows, heads + kv_heads, q, d]: a query element when its
// head is below `heads`, else one element of a key (rotated) and of a value.
template <typename T>
__global__ void rotary_write_kernel(Acc4<T> query, Acc4<T> key, Acc4<T> value, Acc4<T> cos,
                                    Acc4<T> sin, at::PackedTensorAccessor64<int64_t, 2> slots,
                                    Acc4<T> query_out, Acc4<T> key_buffer, Acc4<T> value_buffer) {
  const int64_t heads = query.size(1);
  const int64_t all_heads = heads + key.size(1);
  const int64_t tokens = query.size(2);
  const int64_t d = query.size(3);
  const int64_t total = query.size(0) * all_heads * tokens * d;
  const int64_t e = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (e >= total) return;
  const int64_t i = e % d;
  const int64_t t = (e / d) % tokens;
  const int64_t h = (e / (d * tokens)) % all_heads;
  const int64_t row = e / (d * tokens * all_heads);
  const int64_t half = d / 2;
  const bool first = i < half;
  const int64_t partner = first ? i + half : i - half;
  const T c = cos[row][0][t][i];
  const T s = sin[row][0][t][i];
  if (h < heads) {
    query_out[row][h][t][i] =
        rotate<T>(query[row][h][t][i], query[row][h][t][partner], c, s, first);
    return;
  }
  const int64_t kh = h - heads;
  const int64_t slot = slots[row][t];
  if (slot < 0 || slot >= key_buffer.size(2)) return;  // never: slots come from the step
  key_buffer[row][kh][slot][i] =
      rotate<T>(key[row][kh][t][i], key[row][kh][t][partner], c, s, first);
  value_buffer[row][kh][slot][i] = value[row][kh][t][i];
}

template <typename T>
Acc4<T> acc4(const at::Tensor& t) {
  return t.packed_accessor64<T, 4, at::RestrictPtrTraits>();
}

}  // namespace

void rotary_write_cuda(const RotaryWrite& w) {
  const c10::cuda::CUDAGuard guard(w.query.device());
  const int64_t total =
      w.query.size(0) * (w.query.size(1) + w.key.size(1)) * w.query.size(2) * w.query.size(3);
  if (total == 0) return;
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned int>((total + kThreads - 1) / kThreads);
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, w.query.scalar_type(), "rotary_write_cuda", [&] {
        using T = scalar_t;
        rotary_write_kernel<T><<<blocks, kThreads, 0, stream>>>(
            acc4<T>(w.query), acc4<T>(w.key), acc4<T>(w.value), acc4<T>(w.cos), acc4<T>(w.sin),
            w.slots.packed_accessor64<int64_t, 2>(), acc4<T>(w.query_out), acc4<T>(w.key_buffer),
            acc4<T>(w.value_buffer));
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}

}  // namespace statickv::detail
