// Host offload on CUDA (offload.hpp, Note [host offload]): pinned, mapped
// host buffers and the side-stream copies into the staging ring. Compiled
// only with a CUDA LibTorch (STATICKV_WITH_CUDA).

#include <statickv/detail/offload.hpp>

#include <ATen/cuda/CUDAContext.h>
#include <ATen/cuda/CUDAEvent.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGraphsC10Utils.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <cuda_runtime_api.h>

#include <array>
#include <cstring>
#include <memory>

namespace statickv::detail {

namespace {

// One cudaMemcpy2DAsync moves a [rows, heads, n, head_dim] prefix of a
// contiguous [max_batch, heads, slots, head_dim] buffer: rows * heads runs
// of n * head_dim elements, one buffer pitch (slots * head_dim) apart.
struct Copy2D {
  size_t pitch = 0;  // bytes between runs
  size_t width = 0;  // bytes of one run
  size_t height = 0;
};

Copy2D plan_copy(const at::Tensor& t) {
  const int64_t element = static_cast<int64_t>(t.element_size());
  TORCH_CHECK(t.dim() == 4 && t.stride(3) == 1 && t.stride(2) == t.size(3) &&
                  t.stride(0) == t.size(1) * t.stride(1) && t.stride(1) >= t.size(2) * t.size(3),
              "offload copy: expected a [rows, heads, n, head_dim] prefix of a contiguous buffer "
              "but got sizes ",
              t.sizes(), " and strides ", t.strides());
  return Copy2D{static_cast<size_t>(t.stride(1) * element),
                static_cast<size_t>(t.size(2) * t.size(3) * element),
                static_cast<size_t>(t.size(0) * t.size(1))};
}

class CudaCopier final : public OffloadCopier {
 public:
  explicit CudaCopier(const c10::Device& device)
      : device_(checked(device)), side_(c10::cuda::getStreamFromPool(true, device.index())) {}
  CudaCopier(const CudaCopier&) = delete;
  CudaCopier& operator=(const CudaCopier&) = delete;
  ~CudaCopier() override { (void)cudaStreamSynchronize(side_); }

  static const c10::Device& checked(const c10::Device& device) {
    TORCH_CHECK(device.is_cuda() && device.has_index(),
                "offload copier: expected a cuda device with an index but got ", device);
    return device;
  }

  void copy_in(int slot, const std::array<at::Tensor, 2>& dst,
               const std::array<at::Tensor, 2>& src) override {
    const c10::cuda::CUDAGuard guard(device_);
    const c10::cuda::CUDAStream main = c10::cuda::getCurrentCUDAStream(device_.index());
    fork_.record(main);  // the copy overwrites what the caller's stream read before
    fork_.block(side_);
    for (size_t i = 0; i < dst.size(); ++i) {
      const Copy2D to = plan_copy(dst[i]);
      const Copy2D from = plan_copy(src[i]);
      TORCH_CHECK(to.width == from.width && to.height == from.height,
                  "offload copy: expected a destination of the source's shape ", src[i].sizes(),
                  " but got ", dst[i].sizes());
      C10_CUDA_CHECK(cudaMemcpy2DAsync(dst[i].data_ptr(), to.pitch, src[i].data_ptr(), from.pitch,
                                       from.width, from.height, cudaMemcpyHostToDevice, side_));
    }
    done_[static_cast<size_t>(slot)].record(side_);
    pending_[static_cast<size_t>(slot)] = Pending{true, capturing()};
  }

  void wait(int slot) override {
    const c10::cuda::CUDAGuard guard(device_);
    done_[static_cast<size_t>(slot)].block(c10::cuda::getCurrentCUDAStream(device_.index()));
    pending_[static_cast<size_t>(slot)] = Pending{};
  }

  // Only a copy recorded in the same mode: a capture cannot wait on an
  // event recorded outside it (nor an eager stream on one inside it).
  void drain() override {
    for (int slot = 0; slot < 2; ++slot) {
      const Pending& p = pending_[static_cast<size_t>(slot)];
      if (p.issued && p.captured == capturing()) wait(slot);
    }
  }

 private:
  struct Pending {
    bool issued = false;    // copied in, not yet waited for
    bool captured = false;  // recorded while the caller's stream was capturing
  };

  static bool capturing() {
    return c10::cuda::currentStreamCaptureStatusMayInitCtx() != c10::cuda::CaptureStatus::None;
  }

  c10::Device device_;
  c10::cuda::CUDAStream side_;
  at::cuda::CUDAEvent fork_;
  std::array<at::cuda::CUDAEvent, 2> done_;
  std::array<Pending, 2> pending_;
};

}  // namespace

HostBuffer cuda_host_buffer(at::IntArrayRef shape, at::ScalarType dtype,
                            const c10::Device& device) {
  TORCH_CHECK(device.is_cuda() && device.has_index(),
              "host buffer: expected a cuda device with an index but got ", device);
  const c10::cuda::CUDAGuard guard(device);
  const at::Device& cuda = device;
  int64_t numel = 1;
  for (int64_t n : shape) numel *= n;
  const size_t bytes = static_cast<size_t>(numel) * c10::elementSize(dtype);
  void* host = nullptr;
  C10_CUDA_CHECK(
      cudaHostAlloc(&host, bytes == 0 ? 1 : bytes, cudaHostAllocMapped | cudaHostAllocPortable));
  std::memset(host, 0, bytes);
  std::shared_ptr<void> owner(host, [](void* p) { (void)cudaFreeHost(p); });
  void* mapped = nullptr;
  C10_CUDA_CHECK(cudaHostGetDevicePointer(&mapped, host, 0));
  HostBuffer buffer;
  buffer.host = at::for_blob(host, shape)
                    .deleter([owner](void*) {})
                    .options(at::TensorOptions().dtype(dtype))
                    .target_device(at::Device(at::kCPU))
                    .make_tensor();
  buffer.store = at::for_blob(mapped, shape)
                     .deleter([owner](void*) {})
                     .options(at::TensorOptions().dtype(dtype).device(cuda))
                     .target_device(cuda)
                     .make_tensor();
  return buffer;
}

std::unique_ptr<OffloadCopier> make_cuda_offload_copier(const c10::Device& device) {
  return std::make_unique<CudaCopier>(device);
}

}  // namespace statickv::detail
