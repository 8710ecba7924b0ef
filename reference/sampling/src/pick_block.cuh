#pragma once
// The fused CUDA pick's block-wide primitives (pick_cuda.cu includes this
// alone): reductions over one block of kThreads threads, the floats' order
// as unsigned keys, the bisections that find top-k's and top-p's floors,
// and the Gumbel noise from a draw's hash.

#include "pick_grid.hpp"
#include "pick_launch.hpp"

#include <cstdint>

namespace statickv::reference::detail {

constexpr int kThreads = kPickThreads;
constexpr int kWarps = kThreads / 32;

/// The block's reduction of v by `op` (every thread gets it).
template <typename T, typename Op>
__device__ inline T block_reduce(T v, Op op, T* shared) {
  for (int o = 16; o > 0; o >>= 1) v = op(v, __shfl_down_sync(0xffffffffU, v, o));
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();  // the previous reduction's readers are done with shared
  if (lane == 0) shared[warp] = v;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) v = op(v, shared[w]);
    shared[0] = v;
  }
  __syncthreads();
  return shared[0];
}

__device__ inline Best block_best(Best v) {
  __shared__ float values[kWarps];
  __shared__ int64_t indices[kWarps];
  for (int o = 16; o > 0; o >>= 1) {
    const Best other{__shfl_down_sync(0xffffffffU, v.value, o),
                     __shfl_down_sync(0xffffffffU, v.index, o)};
    v = better(v, other);
  }
  const int lane = threadIdx.x % 32, warp = threadIdx.x / 32;
  __syncthreads();
  if (lane == 0) values[warp] = v.value, indices[warp] = v.index;
  __syncthreads();
  if (threadIdx.x == 0) {
    for (int w = 1; w < kWarps; ++w) v = better(v, Best{values[w], indices[w]});
    values[0] = v.value, indices[0] = v.index;
  }
  __syncthreads();
  return Best{values[0], indices[0]};
}

__device__ inline double block_sum(double v) {
  __shared__ double shared[kWarps];
  return block_reduce(
      v, [](double a, double b) { return a + b; }, shared);
}

__device__ inline float block_max(float v) {
  __shared__ float shared[kWarps];
  return block_reduce(
      v, [](float a, float b) { return fmaxf(a, b); }, shared);
}

/// Floats in their order as unsigned keys, and back.
__device__ inline uint32_t order_key(float f) {
  const uint32_t u = __float_as_uint(f);
  return (u & 0x80000000U) ? ~u : (u | 0x80000000U);
}
__device__ inline float from_key(uint32_t k) {
  return __uint_as_float((k & 0x80000000U) ? (k & 0x7fffffffU) : ~k);
}

/// Row `s`'s kth smallest value (0-based), -inf included: the largest key
/// K with count(key < K) <= kth.
__device__ inline float kth_smallest(const float* s, int64_t vocab, int64_t kth) {
  uint64_t lo = 0, hi = 0xffffffffULL;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo + 1) / 2;
    double below = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      below += order_key(s[i]) < static_cast<uint32_t>(mid) ? 1.0 : 0.0;
    }
    if (block_sum(below) <= static_cast<double>(kth)) {
      lo = mid;
    } else {
      hi = mid - 1;
    }
  }
  return from_key(static_cast<uint32_t>(lo));
}

/// top-p's floor over the values >= `kth`: the smallest value v whose
/// ascending mass M(<= v) exceeds `drop` of the whole; the largest always stays.
__device__ inline float top_p_floor(const float* s, int64_t vocab, float top, float kth,
                                    float drop) {
  double total = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    if (s[i] >= kth && s[i] != -INFINITY) total += expf(__fsub_rn(s[i], top));
  }
  const double budget = static_cast<double>(drop) * block_sum(total);
  uint64_t lo = 0, hi = 0xffffffffULL;
  while (lo < hi) {
    const uint64_t mid = lo + (hi - lo) / 2;
    double mass = 0;
    for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
      const float v = s[i];
      if (v >= kth && v != -INFINITY && order_key(v) <= static_cast<uint32_t>(mid)) {
        mass += expf(__fsub_rn(v, top));
      }
    }
    if (block_sum(mass) > budget) {
      hi = mid;
    } else {
      lo = mid + 1;
    }
  }
  return fminf(from_key(static_cast<uint32_t>(lo)), top);
}

__device__ inline float gumbel(uint32_t h) {
  const float u = __fmul_rn(__fadd_rn(static_cast<float>(h >> 9), 0.5f), 1.0f / 8388608.0f);
  return -logf(-logf(u));
}

}  // namespace statickv::reference::detail
