// The CUDA kernel behind rotary_update() (include/statickv/rotary.hpp; Note
// [fused rotary write], docs/design.md): one thread per element of the
// step's queries and keys, on the current stream. Its CPU twin is
// rotary_write_cpu (src/rotary.cpp); both round as the unfused ops do.
// rotary.cpp launches it through launch_rotary_write (rotary_launch.hpp).

#include "rotary_launch.hpp"

#include <ATen/OpMathType.h>
#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace statickv::detail {

namespace {

template <typename T>
using Acc4 = RotaryAcc4<T>;

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

}  // namespace

template <typename T>
void launch_rotary_write(const RotaryOperands<T>& w, int64_t total, cudaStream_t stream) {
  constexpr int kThreads = 256;
  const auto blocks = static_cast<unsigned int>((total + kThreads - 1) / kThreads);
  rotary_write_kernel<T><<<blocks, kThreads, 0, stream>>>(
      w.query, w.key, w.value, w.cos, w.sin, w.slots, w.query_out, w.key_buffer, w.value_buffer);
}

template void launch_rotary_write<float>(const RotaryOperands<float>&, int64_t, cudaStream_t);
template void launch_rotary_write<double>(const RotaryOperands<double>&, int64_t, cudaStream_t);
template void launch_rotary_write<c10::Half>(const RotaryOperands<c10::Half>&, int64_t,
                                             cudaStream_t);
template void launch_rotary_write<c10::BFloat16>(const RotaryOperands<c10::BFloat16>&, int64_t,
                                                 cudaStream_t);

}  // namespace statickv::detail
