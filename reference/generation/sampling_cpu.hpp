#pragma once
// The sampling head's fused CPU draw (Note [sampling head]): what the head's
// tensor composition computes for sampled rows (temperature, the top-k,
// top-p and min-p floor, the counter-based Gumbel draw), in one pass per
// row. Not installed; sampling_head.cpp calls it on the CPU.

#include <ATen/ATen.h>

#include <cstdint>

namespace statickv::reference::detail {

/// The draws' 32-bit mixer (docs/sampling.md): one home for the host
/// mirror (draw keys) and the fused CPU draw; the tensor form is in
/// sampling_head.cpp.
inline uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  return x ^ (x >> 16);
}

/// The columns of SamplingHead's per-row tables that the draw reads.
struct DrawColumns {
  int64_t temperature, one_minus_top_p, log_min_p;      // params (float32)
  int64_t seed_key, draw_index, kth_position, sampled;  // keys (int64)
};

/// For every sampled row r of x [b, vocab] (float32, CPU, contiguous),
/// writes chosen[r] (int64 [b, 1]) with the token the composition draws;
/// greedy rows keep theirs. `hashed_ids` [vocab]: (id * golden) mod 2^32.
void draw_sampled_cpu(const at::Tensor& x, const at::Tensor& params, const at::Tensor& keys,
                      const at::Tensor& hashed_ids, const DrawColumns& columns, at::Tensor& chosen);

}  // namespace statickv::reference::detail
