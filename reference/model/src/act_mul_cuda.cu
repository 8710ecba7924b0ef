// act_mul's CUDA kernel (reference/model/include/statickv/model/act_mul.hpp):
// one thread per output element, a grid-stride loop over rows x inter, the
// element computed by act_math.hpp's lines, which the CPU loop shares.

#include <statickv/model/act_mul.hpp>

#include "act_math.hpp"

#include <ATen/Dispatch.h>
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace statickv::reference::detail {

namespace {

constexpr int kThreads = 256;

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

void act_mul_cuda(const ActMul& a) {
  const c10::cuda::CUDAGuard guard(a.in.device());
  const int64_t total = a.rows * a.inter;
  const int64_t most =
      static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 8;
  const int blocks = static_cast<int>(std::min<int64_t>((total + kThreads - 1) / kThreads, most));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const bool gelu = a.act == Activation::kGeluTanh;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, a.in.scalar_type(), "statickv_act_mul_cuda", [&] {
        act_mul_kernel<scalar_t><<<blocks, kThreads, 0, stream>>>(
            a.in.const_data_ptr<scalar_t>(), a.out.mutable_data_ptr<scalar_t>(), a.rows, a.inter,
            a.in_stride, gelu);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace statickv::reference::detail
