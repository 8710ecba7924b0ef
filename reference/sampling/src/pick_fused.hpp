#pragma once
// The sampling head's fused pick (Note [sampling head]): everything a pick
// does for its taking rows in one kernel per device: the logit bias, the
// min_tokens mask, the repetition, presence and frequency penalties, the
// greedy argmax, the sampled draw (temperature, the top-k, top-p and min-p
// floor, the counter-based Gumbel draw), the log-probabilities of the
// chosen token and of the alternatives top-k found, the draw index, the
// token marks and the result table. It computes what the head's tensor
// composition computes. Not installed; pick_fused.cpp calls it.

#include <ATen/ATen.h>

#include <cstdint>

namespace statickv::reference::detail {

/// The draws' 32-bit mixer (docs/sampling.md): one home for the host
/// mirror (draw keys) and the fused kernels, on uint32_t or a vector of
/// them (the CPU pick's lanes); the tensor form is in draws.cpp.
template <typename Word>
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline Word
    mix32(Word x) {
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  return x ^ (x >> 16);
}

/// The columns of SamplingHead's per-row tables. params (float32):
enum Param : int64_t {
  kTemperature,  // the divisor: the row's temperature, 1 for a greedy row
  kOneMinusTopP,
  kLogMinP,  // log(min_p): -inf when off
  kRepetition,
  kPresence,
  kFrequency,
  kParams
};
/// keys (int64):
/// kPlain: 1 for a greedy row with no logit bias and no penalties, whose
/// argmax is of the raw logits once past min_tokens (the greedy grid,
/// pick_grid.hpp).
enum Key : int64_t { kSeedKey, kDrawIndex, kKthPosition, kMinTokens, kSampled, kPlain, kKeys };

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
