// What the varlen attention path needs to know of the GPU (varlen.hpp), so
// that public headers need no CUDA headers. Compiled only when LibTorch has
// CUDA (STATICKV_WITH_CUDA).

#include <statickv/varlen.hpp>

#include <ATen/cuda/CUDAContext.h>

namespace statickv::detail {

bool flash_capable(const at::Device& device) {
  if (!device.is_cuda()) return false;
  const int index = device.has_index() ? device.index() : at::cuda::current_device();
  const cudaDeviceProp* props = at::cuda::getDeviceProperties(index);
  // LibTorch's FlashAttention-2 kernels: sm80 and newer.
  return props != nullptr && props->major >= 8;
}

}  // namespace statickv::detail
