#pragma once
// Temperature / top-k sampling of one token per row, shared by Generator
// and the serving Scheduler (not installed), so a request served alone or in
// a batch draws the same token for the same seed.

#include <ATen/ATen.h>

#include <limits>

namespace statickv::reference::detail {

/// The distribution sampling draws from, per row of logits [..., vocab]
/// (any device): softmax(logits / temperature) over the top_k largest
/// (top_k 0 or >= vocab: all). float32 on the CPU. Speculative
/// verification's p and a draft model's q (speculative.hpp) are this too.
inline at::Tensor sampling_probs(const at::Tensor& logits, double temperature, int64_t top_k) {
  at::Tensor scaled = logits.cpu().div(temperature);
  if (top_k > 0 && top_k < scaled.size(-1)) {
    const at::Tensor kth = std::get<0>(scaled.topk(top_k, -1)).narrow(-1, top_k - 1, 1);
    scaled = scaled.masked_fill(scaled.lt(kth), -std::numeric_limits<float>::infinity());
  }
  return at::softmax(scaled, -1);
}

/// One token per row of logits [b, vocab] (any device), drawn on the host
/// from `generator` (a seeded CPU generator: reproducible on every device)
/// from sampling_probs. Returns int64 [b] on the CPU.
inline at::Tensor sample_tokens(const at::Tensor& logits, double temperature, int64_t top_k,
                                at::Generator& generator) {
  return at::multinomial(sampling_probs(logits, temperature, top_k), 1, false, generator).view(-1);
}

}  // namespace statickv::reference::detail
