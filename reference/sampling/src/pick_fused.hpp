#pragma once
// The sampling head's fused pick (Note [sampling head]): everything a pick
// does for its taking rows in one kernel per device: the logit bias, the
// min_tokens mask, the repetition, presence and frequency penalties, the
// greedy argmax, the sampled draw (temperature, the top-k, top-p and min-p
// floor, the counter-based Gumbel draw), the log-probabilities of the
// chosen token and of the alternatives top-k found, the draw index, the
// token marks and the result table. It computes what the head's tensor
// composition computes. Not installed; pick_fused.cpp calls it.

#include "pick_tables.hpp"

#include <ATen/ATen.h>

#include <cstdint>

namespace statickv::reference::detail {

/// One fused pick over rows [0, b): views of the head's tables.
struct FusedPick {
  at::Tensor logits;                    // float32 [b, vocab], contiguous
  at::Tensor params, keys;              // [b, kParams] float32, [b, kKeys] int64
  at::Tensor generated, seen, penalty;  // [b, vocab]: bool, bool, float32
  at::Tensor bias_ids, bias_vals;       // [b, max_bias]: int64, float32
  at::Tensor stop_ids;                  // [b, max_stop] int64
  at::Tensor hashed_ids;                // int64 [vocab]: (id * golden) mod 2^32
  at::Tensor take;                      // int64 [b]: 1 where the row picks
  at::Tensor top_ids, top_logits;       // [b, n] int64, float32: the raw logits' top n
  bool logprobs = false;                // write the log-probability columns
  at::Tensor out;                       // float32 [b, >= 3 + 2n]: the result table's rows
  at::Tensor scratch;                   // float32 [b, vocab] (CUDA): the penalized logits
  /// CUDA's greedy grid (pick_grid.hpp): blocks per row (0: every row in
  /// one block), each block's partials (16 bytes each, [b, ctas]) and each
  /// row's count of finished blocks (int32 [b], zero between picks).
  int64_t ctas = 0;
  at::Tensor grid_best, grid_norm, grid_done;
};

/// On the CPU (rows in parallel).
void fused_pick_cpu(const FusedPick& p);
#if defined(STATICKV_HAS_CUDA)
/// On CUDA: one block per row, or `ctas` for a row on the greedy grid, on
/// the current stream; no host sync.
void fused_pick_cuda(const FusedPick& p);
/// Blocks per row of the greedy grid for `batch` rows of `vocab` logits on
/// `device` (pick_grid.hpp's grid_ctas over its multiprocessors).
int64_t pick_grid_ctas(const at::Device& device, int64_t vocab, int64_t batch);
#endif

}  // namespace statickv::reference::detail
