#pragma once
// Temperature / top-k sampling of one token per row, shared by Generator
// and the serving Scheduler (not installed), so a request served alone or in
// a batch draws the same token for the same seed.

#include <ATen/ATen.h>

#include <limits>

namespace statickv::reference::detail {

/// One token per row of logits [b, vocab] (any device), drawn on the host
/// from `generator` (a seeded CPU generator: reproducible on every device):
/// logits / temperature, all but the top_k largest removed (top_k 0 or >=
/// vocab: none), then a softmax draw. Returns int64 [b] on the CPU.
inline at::Tensor sample_tokens(const at::Tensor& logits, double temperature, int64_t top_k,
                                at::Generator& generator) {
  at::Tensor scaled = logits.cpu().div(temperature);
  if (top_k > 0 && top_k < scaled.size(-1)) {
    const at::Tensor kth = std::get<0>(scaled.topk(top_k, -1)).narrow(-1, top_k - 1, 1);
    scaled = scaled.masked_fill(scaled.lt(kth), -std::numeric_limits<float>::infinity());
  }
  return at::multinomial(at::softmax(scaled, -1), 1, false, generator).view(-1);
}

}  // namespace statickv::reference::detail
