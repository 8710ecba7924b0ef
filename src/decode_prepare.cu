// The fused decode prepare's CUDA kernel (include/statickv/detail/
// decode_prepare.hpp; Note [decode prepare], docs/design.md): one thread per
// live row, each running prepare_row(), the lines its CPU twin runs.

#include "decode_prepare_row.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

namespace statickv::detail {

namespace {

constexpr int kThreads = 128;

// The arguments travel by value (a few hundred bytes of pointers and sizes).
__global__ void decode_prepare_kernel(PrepareArgs a) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < a.live_batch) prepare_row(a, r);
}

}  // namespace

void decode_prepare_cuda(const DecodePrepare& p) {
  const c10::cuda::CUDAGuard guard(p.positions.device());
  const PrepareArgs a = prepare_args(p);
  const auto blocks = static_cast<unsigned int>((a.live_batch + kThreads - 1) / kThreads);
  decode_prepare_kernel<<<blocks, kThreads, 0, at::cuda::getCurrentCUDAStream()>>>(a);
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace statickv::detail
