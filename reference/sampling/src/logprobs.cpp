// Prompt log-probabilities (docs/sampling.md): each prompt position's
// log-probability of the token that follows, with its top alternatives, in
// one host copy. A pick's own log-probabilities are columns of its result
// table (pick.cpp, pick_cpu.cpp, pick_cuda.cu).

#include "draws.hpp"

#include <c10/util/Exception.h>

namespace statickv::reference {

std::vector<TokenLogprob> SamplingHead::prompt_logprobs(const at::Tensor& logits,
                                                        const std::vector<int64_t>& next,
                                                        int64_t n) {
  const int64_t q = logits.size(0);
  TORCH_CHECK(logits.dim() == 2 && static_cast<int64_t>(next.size()) == q,
              "prompt_logprobs: expected logits [q, vocab] and q next ids but got ", logits.sizes(),
              " and ", next.size());
  TORCH_CHECK(n >= 0 && n <= 20, "prompt_logprobs: expected 0..20 alternatives but got ", n);
  const at::Tensor lp = logits.to(at::kFloat).log_softmax(-1);
  const at::Tensor ids = detail::upload(next, logits.device()).unsqueeze(1);
  const auto [top, top_ids] = lp.topk(n);
  const at::Tensor host =
      at::cat({lp.gather(1, ids), at::stack({top_ids.to(at::kFloat), top}, 2).view({q, 2 * n})}, 1)
          .cpu();
  std::vector<TokenLogprob> out(static_cast<size_t>(q));
  for (int64_t t = 0; t < q; ++t) {
    const float* row = host.data_ptr<float>() + t * host.size(1);
    TokenLogprob& p = out[static_cast<size_t>(t)];
    p.token = next[static_cast<size_t>(t)];
    p.logprob = row[0];
    for (int64_t i = 0; i < n; ++i)
      p.top.emplace_back(static_cast<int64_t>(row[1 + 2 * i]), row[2 + 2 * i]);
  }
  return out;
}

}  // namespace statickv::reference
