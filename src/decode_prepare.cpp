// The fused decode prepare's dispatch, its CPU twin and its CUDA kernel's
// launch (include/statickv/detail/decode_prepare.hpp; Note [decode
// prepare], docs/design.md).

#include <statickv/detail/decode_prepare.hpp>

#include "decode_prepare_row.hpp"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#ifdef STATICKV_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include <vector>

namespace statickv::detail {

static_assert(kPrepareArgsGroups == kDecodePrepareGroups,
              "decode_prepare_row.hpp's group count is decode_prepare.hpp's");

namespace {

/// The pointers of `p`'s tensors (the cache's own: contiguous, on one device).
PrepareArgs prepare_args(const DecodePrepare& p) {
  PrepareArgs a;
  a.positions = p.positions.data_ptr<int64_t>();
  a.position_stride = p.positions.stride(0);
  a.sane = p.sane.data_ptr<int64_t>();
  a.seq_lengths = p.seq_lengths.data_ptr<int64_t>();
  a.rows = p.positions.size(0);
  a.live_batch = p.live_batch;
  a.max_len = p.max_len;
  a.kv_heads = p.kv_heads;
  a.groups = static_cast<int>(p.groups.size());
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const DecodePrepareGroup& in = p.groups[g];
    PrepareGroupArgs& out = a.group[g];
    out.slot_positions = in.slot_positions.data_ptr<int64_t>();
    out.slots_len = in.slot_positions.size(1);
    out.slots = in.slots.data_ptr<int64_t>();
    out.flat_index = in.flat_index.defined() ? in.flat_index.data_ptr<int64_t>() : nullptr;
    out.seqused_k = in.seqused_k.data_ptr<int32_t>();
    out.ring = in.ring;
    out.scratch = in.scratch;
    out.view_len = in.view_len;
  }
  return a;
}

}  // namespace

void decode_prepare_cpu(const DecodePrepare& p) {
  const PrepareArgs a = prepare_args(p);
  for (int64_t r = 0; r < a.live_batch; ++r) prepare_row(a, r);
}

#ifdef STATICKV_HAS_CUDA
void decode_prepare_cuda(const DecodePrepare& p) {
  const c10::cuda::CUDAGuard guard(p.positions.device());
  launch_decode_prepare(prepare_args(p), at::cuda::getCurrentCUDAStream());
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
#endif

void decode_prepare(const DecodePrepare& p) {
  // One operator on either device (Note [counted step]).
  RECORD_FUNCTION("statickv::decode_prepare", std::vector<c10::IValue>({p.positions}));
  if (p.positions.is_cuda()) {
#ifdef STATICKV_HAS_CUDA
    decode_prepare_cuda(p);
#else
    TORCH_CHECK(false,
                "cache_position: expected a CPU tensor (statickv was built without CUDA) but got ",
                p.positions.device());
#endif
  } else {
    decode_prepare_cpu(p);
  }
}

}  // namespace statickv::detail
