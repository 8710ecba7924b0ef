// The sampling head's fused pick (pick_fused.hpp): one kernel per device
// for everything a pick does, the CPU twin (pick_cpu.cpp) and the CUDA
// kernel (pick_cuda.cu) behind the "sample_pick" switch (Note [kernel
// switches]); the greedy grid behind "pick_grid".

#include <statickv/kernel_switches.hpp>

#include "draws.hpp"

#include <ATen/record_function.h>

#include <tuple>

namespace statickv::reference {

using namespace detail;  // the tables' columns (Param, Key)

bool SamplingHead::fused() const {
  if (!options_.fused) return false;
#if defined(STATICKV_HAS_CUDA)
  if (options_.device.is_cuda()) return kernel_enabled("sample_pick");  // Note [kernel switches]
#endif
  return options_.device.is_cpu();
}

void SamplingHead::pick_fused(const at::Tensor& logits, const at::Tensor& take, int64_t logprobs) {
  const int64_t b = logits.size(0);
  detail::FusedPick p;
  p.logits = logits.contiguous();
  p.params = params_.narrow(0, 0, b);
  p.keys = keys_.narrow(0, 0, b);
  p.generated = generated_.narrow(0, 0, b);
  p.seen = seen_.narrow(0, 0, b);
  p.penalty = penalty_.narrow(0, 0, b);
  p.bias_ids = bias_ids_.narrow(0, 0, b);
  p.bias_vals = bias_vals_.narrow(0, 0, b);
  p.stop_ids = stop_ids_.narrow(0, 0, b);
  p.hashed_ids = hashed_ids_;
  p.take = take.contiguous();
  p.logprobs = logprobs >= 0;
  if (logprobs > 0) {
    std::tie(p.top_logits, p.top_ids) = p.logits.topk(logprobs);
  } else {
    p.top_logits = at::empty({b, 0}, p.logits.options());
    p.top_ids = at::empty({b, 0}, p.take.options());
  }
  p.out = out_.narrow(0, 0, b);
  // One kernel on either device; named for OpCounter (Note [counted step]).
  RECORD_FUNCTION("statickv::sample_pick", std::vector<c10::IValue>({p.logits, p.params}));
#if defined(STATICKV_HAS_CUDA)
  if (options_.device.is_cuda()) {
    p.scratch = scratch_.narrow(0, 0, b);
    // Note [kernel switches]: pick_grid off, every row takes one block.
    p.ctas = kernel_enabled("pick_grid")
                 ? detail::pick_grid_ctas(options_.device, options_.vocab_size, b)
                 : 0;
    p.grid_best = grid_best_;
    p.grid_norm = grid_norm_;
    p.grid_done = grid_done_;
    detail::fused_pick_cuda(p);
    return;
  }
#endif
  detail::fused_pick_cpu(p);
}

}  // namespace statickv::reference
