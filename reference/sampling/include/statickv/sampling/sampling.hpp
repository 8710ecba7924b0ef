#pragma once
// What a request asks of the sampling head and what it gets back
// (docs/sampling.md): its settings (Sampling, checked by check_sampling),
// a picked token with its log-probabilities (Picked, TokenLogprob) and a
// speculative step's drafts (DraftSet). The head itself is head.hpp.

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace statickv::reference {

/// How a request picks its tokens. Greedy (temperature 0) or sampled from
/// softmax(logits / temperature) after transformers' filters in its order
/// (top-k, then top-p, then min-p), always after the penalties and the
/// logit bias, which apply to greedy rows too.
struct Sampling {
  double temperature = 0.0;  ///< finite, >= 0; 0 = greedy
  int64_t top_k = 0;         ///< >= 0; 0 = no filter; needs temperature > 0
  /// The draws' seed: a request draws the same tokens alone or in any batch.
  uint64_t seed = 0;
  double top_p = 1.0;  ///< (0, 1]; 1 = no filter; below 1 needs temperature > 0
  double min_p = 0.0;  ///< [0, 1]; 0 = no filter; above 0 needs temperature > 0
  /// transformers' RepetitionPenaltyLogitsProcessor over the prompt and the
  /// generated tokens: > 0, 1 = off.
  double repetition_penalty = 1.0;
  /// OpenAI's rule over generated tokens only: logit - presence * [count >
  /// 0] - frequency * count. Finite; 0 = off.
  double presence_penalty = 0.0;
  double frequency_penalty = 0.0;
  /// Added to a token's logit: at most SamplingHeadOptions::max_bias
  /// distinct ids, finite values.
  std::vector<std::pair<int64_t, double>> logit_bias;
  /// The stop ids are masked until this many tokens have been generated.
  int64_t min_tokens = 0;
  /// -1: none; 0..max_logprobs: the chosen token's log-probability (the
  /// model's raw distribution, before penalties and filters) and this many
  /// most likely alternatives.
  int64_t logprobs = -1;
};
/// The most alternatives a row may ask for at a position (`logprobs`,
/// `prompt_logprobs`; OpenAI's top_logprobs limit): the one home of the
/// bound the head, the Scheduler and statickv-serve's HTTP front refuse by.
inline constexpr int64_t kMaxLogprobs = 20;

/// Refuses, naming the argument, settings the head cannot take: a
/// non-finite or negative temperature, top_p outside (0, 1], min_p outside
/// [0, 1], a filter without sampling, a non-finite penalty or a repetition
/// penalty <= 0, more logit-bias ids than `max_bias`, a repeated or
/// out-of-vocabulary id, more alternatives than `max_logprobs`.
void check_sampling(const Sampling& s, int64_t vocab_size, int64_t max_bias = 300,
                    int64_t max_logprobs = kMaxLogprobs);

/// One log-probability and the most likely alternatives at that position.
struct TokenLogprob {
  int64_t token = 0;
  float logprob = 0;
  std::vector<std::pair<int64_t, float>> top;  ///< most likely first
};

/// What fetch() returns for one row.
struct Picked {
  /// pick: the next token; verify: the token after the accepted drafts
  /// (the correction, or the bonus token when all were accepted).
  int64_t token = 0;
  int64_t accepted = 0;  ///< verify: drafts accepted (a prefix of them); pick: 0
  TokenLogprob logprob;  ///< filled when the row asked for log-probabilities
};

/// A speculative step's drafts for rows [0, b): ids[r] (at most k each)
/// and, for drafts a model sampled, their distributions q [b, k, vocab] on
/// the head's device (undefined: every draft is a point mass, as prompt
/// lookup's are).
struct DraftSet {
  std::vector<std::vector<int64_t>> ids;
  at::Tensor q;
};

/// DraftSet::q from the q of each draft pass ([b, vocab] each, at most k):
/// [b, k, vocab], zeros past the last pass; undefined when there was none.
at::Tensor draft_distributions(const std::vector<at::Tensor>& qs, int64_t k);

}  // namespace statickv::reference
