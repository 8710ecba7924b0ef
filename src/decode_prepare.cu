// The fused decode prepare's CUDA kernel (include/statickv/detail/
// decode_prepare.hpp; Note [decode prepare], docs/design.md): one thread per
// live row, each running prepare_row(), the lines its CPU twin runs. No
// ATen here: decode_prepare.cpp passes the pointers and checks the launch.

#include "decode_prepare_row.hpp"

namespace statickv::detail {

namespace {

constexpr int kThreads = 128;

// The arguments travel by value (a few hundred bytes of pointers and sizes).
__global__ void decode_prepare_kernel(PrepareArgs a) {
  const int64_t r = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (r < a.live_batch) prepare_row(a, r);
}

}  // namespace

void launch_decode_prepare(const PrepareArgs& a, cudaStream_t stream) {
  const auto blocks = static_cast<unsigned int>((a.live_batch + kThreads - 1) / kThreads);
  decode_prepare_kernel<<<blocks, kThreads, 0, stream>>>(a);
}

}  // namespace statickv::detail
