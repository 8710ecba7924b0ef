// act_mul's CUDA kernel (reference/model/include/statickv/model/act_mul.hpp):
// one thread per output element, a grid-stride loop over rows x inter, the
// element computed by act_math.hpp's lines, which the CPU loop shares. No
// ATen here: act_mul.cpp dispatches on the dtype, passes the pointers and
// checks the launch.

#include "act_math.hpp"

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

namespace statickv::reference::detail {

namespace {

template <typename T>
__global__ void act_mul_kernel(const T* __restrict__ in, T* __restrict__ out, int64_t rows,
                               int64_t inter, int64_t in_stride, bool gelu) {
  const int64_t total = rows * inter;
  const int64_t step = static_cast<int64_t>(gridDim.x) * blockDim.x;
  for (int64_t k = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x; k < total;
       k += step) {
    const int64_t r = k / inter, i = k - r * inter;
    const T* gate = in + r * in_stride;
    out[k] = act_times<T>(gate[i], gate[inter + i], gelu);
  }
}

}  // namespace

template <typename T>
void launch_act_mul(const T* in, T* out, int64_t rows, int64_t inter, int64_t in_stride, bool gelu,
                    int blocks, cudaStream_t stream) {
  act_mul_kernel<T><<<blocks, kActMulThreads, 0, stream>>>(in, out, rows, inter, in_stride, gelu);
}

template void launch_act_mul<float>(const float*, float*, int64_t, int64_t, int64_t, bool, int,
                                    cudaStream_t);
template void launch_act_mul<double>(const double*, double*, int64_t, int64_t, int64_t, bool, int,
                                     cudaStream_t);
template void launch_act_mul<c10::Half>(const c10::Half*, c10::Half*, int64_t, int64_t, int64_t,
                                        bool, int, cudaStream_t);
template void launch_act_mul<c10::BFloat16>(const c10::BFloat16*, c10::BFloat16*, int64_t, int64_t,
                                            int64_t, bool, int, cudaStream_t);

}  // namespace statickv::reference::detail
