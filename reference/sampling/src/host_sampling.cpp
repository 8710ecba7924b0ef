// The host sampler: the filtered distribution of one set of settings on
// the CPU, and a draw from a seeded CPU generator. No decode loop calls it:
// the sampling head (head.hpp) picks and verifies every token on
// the device. It is the oracle the head's tests hold its distribution to,
// and statickv_bench_step's host baseline (a pick per row on the CPU).

#include <statickv/sampling/host_sampling.hpp>

#include <limits>

namespace statickv::reference {

at::Tensor host_sampling_probs(const at::Tensor& logits, double temperature, int64_t top_k,
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

at::Tensor host_sample_tokens(const at::Tensor& logits, double temperature, int64_t top_k,
                              double top_p, at::Generator& generator) {
  return at::multinomial(host_sampling_probs(logits, temperature, top_k, top_p), 1, false,
                         generator)
      .view(-1);
}

}  // namespace statickv::reference
