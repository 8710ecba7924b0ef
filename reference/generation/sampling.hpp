#pragma once
// Temperature / top-k / top-p sampling of one token per row, shared by Generator
// and the serving Scheduler (not installed), so a request served alone or in
// a batch draws the same token for the same seed.

#include <ATen/ATen.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <limits>

namespace statickv::reference::detail {

/// The sampling settings a request or a generate() call may take, by name:
/// temperature finite and >= 0 (0 = greedy), top_k >= 0 and top_p in (0, 1],
/// both filters off (0 and 1) unless temperature > 0.
inline void check_sampling(double temperature, int64_t top_k, double top_p) {
  TORCH_CHECK(std::isfinite(temperature) && temperature >= 0.0,
              "temperature: expected a finite number >= 0 (0 = greedy) but got ", temperature);
  TORCH_CHECK(top_k >= 0, "top_k: expected >= 0 (0 = no filter) but got ", top_k);
  TORCH_CHECK(top_k == 0 || temperature > 0.0,
              "top_k: expected 0 without sampling (temperature 0 is greedy) but got ", top_k);
  TORCH_CHECK(std::isfinite(top_p) && top_p > 0.0 && top_p <= 1.0,
              "top_p: expected a number in (0, 1] (1 = no filter) but got ", top_p);
  TORCH_CHECK(top_p == 1.0 || temperature > 0.0,
              "top_p: expected 1 without sampling (temperature 0 is greedy) but got ", top_p);
}

/// The distribution sampling draws from, per row of logits [..., vocab]
/// (any device): softmax(logits / temperature) over the top_k largest
/// (top_k 0 or >= vocab: all), then over the smallest set of those whose
/// probabilities sum to at least top_p (1: all), in transformers' order and
/// by its rule (TopKLogitsWarper, then TopPLogitsWarper: a token goes when
/// the mass of the tokens below it and itself is at most 1 - top_p; the
/// most likely one always stays). float32 on the CPU. Speculative
/// verification's p and a draft model's q (speculative.hpp) are this too.
inline at::Tensor sampling_probs(const at::Tensor& logits, double temperature, int64_t top_k,
                                 double top_p) {
  const float minus_inf = -std::numeric_limits<float>::infinity();
  at::Tensor scaled = logits.cpu().div(temperature);
  if (top_k > 0 && top_k < scaled.size(-1)) {
    const at::Tensor kth = std::get<0>(scaled.topk(top_k, -1)).narrow(-1, top_k - 1, 1);
    scaled = scaled.masked_fill(scaled.lt(kth), minus_inf);
  }
  if (top_p < 1.0) {
    auto [sorted, order] = scaled.sort(-1, /*descending=*/false);
    at::Tensor drop = at::softmax(sorted, -1).cumsum(-1).le(1.0 - top_p);
    drop.select(-1, drop.size(-1) - 1).fill_(false);
    scaled = scaled.masked_fill(drop.scatter(-1, order, drop), minus_inf);
  }
  return at::softmax(scaled, -1);
}

/// One token per row of logits [b, vocab] (any device), drawn on the host
/// from `generator` (a seeded CPU generator: reproducible on every device)
/// from sampling_probs. Returns int64 [b] on the CPU.
inline at::Tensor sample_tokens(const at::Tensor& logits, double temperature, int64_t top_k,
                                double top_p, at::Generator& generator) {
  return at::multinomial(sampling_probs(logits, temperature, top_k, top_p), 1, false, generator)
      .view(-1);
}

}  // namespace statickv::reference::detail
