// Host offload's factories (offload.hpp, Note [host offload]): on the CPU
// the host buffer is the store and copies are synchronous; a CUDA device
// goes to src/offload_cuda.cpp, compiled with a CUDA LibTorch.

#include <statickv/detail/offload.hpp>

namespace statickv::detail {

namespace {

class CpuCopier final : public OffloadCopier {
 public:
  void copy_in(int /*slot*/, const std::array<at::Tensor, 2>& dst,
               const std::array<at::Tensor, 2>& src) override {
    for (size_t i = 0; i < dst.size(); ++i) dst[i].copy_(src[i]);
  }
  void wait(int /*slot*/) override {}
  void drain() override {}
};

void check_offload_device(const c10::Device& device) {
  TORCH_CHECK(device.is_cpu() || device.is_cuda(),
              "CacheConfig.device: expected cpu or cuda with host_offload but got ", device);
#ifndef STATICKV_HAS_CUDA
  TORCH_CHECK(device.is_cpu(),
              "CacheConfig.host_offload: expected a cpu device in a statickv "
              "built without CUDA (STATICKV_WITH_CUDA=OFF: no pinned host buffers) but got ",
              device);
#endif
}

}  // namespace

HostBuffer host_buffer(at::IntArrayRef shape, at::ScalarType dtype, const c10::Device& device) {
  check_offload_device(device);
#ifdef STATICKV_HAS_CUDA
  if (device.is_cuda()) return cuda_host_buffer(shape, dtype, device);
#endif
  at::Tensor host = at::zeros(shape, at::TensorOptions().dtype(dtype));
  return HostBuffer{host, host};
}

std::unique_ptr<OffloadCopier> make_offload_copier(const c10::Device& device) {
  check_offload_device(device);
#ifdef STATICKV_HAS_CUDA
  if (device.is_cuda()) return make_cuda_offload_copier(device);
#endif
  return std::make_unique<CpuCopier>();
}

}  // namespace statickv::detail
