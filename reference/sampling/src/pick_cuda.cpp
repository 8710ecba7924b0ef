// The fused CUDA pick's host side (pick_fused.hpp): the tensors' pointers
// into the kernel's arguments, its launch on the current stream
// (pick_cuda.cu) and the greedy grid's size for a device.

#include "pick_fused.hpp"
#include "pick_launch.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>

#include <cstdint>

namespace statickv::reference::detail {

int64_t pick_grid_ctas(const at::Device& device, int64_t vocab, int64_t batch) {
  const int64_t sms = at::cuda::getDeviceProperties(device.index())->multiProcessorCount;
  // At least one group of four per thread: a slice of 2048 logits (63
  // blocks for Llama 3's 128256 at batch 1).
  return grid_ctas(vocab, batch, sms, 4 * kPickThreads);
}

void fused_pick_cuda(const FusedPick& p) {
  const c10::cuda::CUDAGuard guard(p.logits.device());
  const int64_t b = p.logits.size(0);
  if (b == 0) return;
  const PickArgs a{
      p.logits.data_ptr<float>(),
      p.params.data_ptr<float>(),
      p.keys.data_ptr<int64_t>(),
      p.generated.data_ptr<bool>(),
      p.seen.data_ptr<bool>(),
      p.penalty.data_ptr<float>(),
      p.bias_ids.data_ptr<int64_t>(),
      p.bias_vals.data_ptr<float>(),
      p.stop_ids.data_ptr<int64_t>(),
      p.hashed_ids.data_ptr<int64_t>(),
      p.take.data_ptr<int64_t>(),
      p.top_ids.data_ptr<int64_t>(),
      p.top_logits.data_ptr<float>(),
      p.out.data_ptr<float>(),
      p.scratch.data_ptr<float>(),
      p.logits.size(1),
      p.bias_ids.size(1),
      p.stop_ids.size(1),
      p.top_ids.size(1),
      p.out.size(1),
      p.logprobs,
      p.ctas,
      p.ctas > 0 ? reinterpret_cast<Best*>(p.grid_best.data_ptr()) : nullptr,
      p.ctas > 0 ? reinterpret_cast<Normalizer*>(p.grid_norm.data_ptr()) : nullptr,
      p.ctas > 0 ? reinterpret_cast<unsigned int*>(p.grid_done.data_ptr<int32_t>()) : nullptr};
  launch_fused_pick(a, b, at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}

}  // namespace statickv::reference::detail
