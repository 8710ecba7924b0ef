#pragma once
// Speculative decoding's two pure parts (docs/speculative.md): drafting by
// prompt lookup, and verification, the rule that turns a row's k drafts and
// the target's k + 1 distributions into the tokens it emits, stated on the
// host for one row. Generator and the Scheduler run the same rule on the
// device for every row at once (SamplingHead::verify); the tests hold the
// head to these.

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace statickv::reference {

class LlamaModel;

/// Prompt-lookup drafting (no second model): finds the most recent earlier
/// occurrence of the longest n-gram (n = max_ngram down to 1) that ends
/// `tokens` (a row's prompt and generated ids) and proposes the up to k
/// tokens that followed it. Empty when no n-gram recurs.
std::vector<int64_t> prompt_lookup_draft(const std::vector<int64_t>& tokens, int64_t k,
                                         int64_t max_ngram = 3);

/// What one row emits after a verification step.
struct Verdict {
  int64_t accepted = 0;         ///< drafts accepted (always a prefix of them)
  std::vector<int64_t> tokens;  ///< the accepted drafts, then one token of the target's
};

/// Greedy verification: drafts are accepted while each equals the target's
/// argmax at its position; the target's argmax after the last accepted one
/// follows (a correction, or the bonus token when all are accepted).
/// target_ids: the argmax at each of the drafts.size() + 1 positions.
Verdict verify_greedy(const std::vector<int64_t>& drafts, const std::vector<int64_t>& target_ids);

/// Sampled verification, the standard acceptance rule (Leviathan et al.
/// 2023): draft x_i is accepted with probability min(1, p_i(x_i) / q_i(x_i));
/// at the first rejection a token is drawn from norm(max(0, p_i - q_i)) and
/// the step ends; when all k are accepted a bonus token is drawn from p_k.
/// The emitted tokens are then distributed as sampling from p alone.
/// p: target probabilities [k + 1, vocab]; q: draft probabilities [k, vocab],
/// or an undefined tensor for drafts that are a point mass (prompt lookup:
/// q_i(x_i) = 1). Draws from `generator` (a CPU generator), on the host.
Verdict verify_sampled(const std::vector<int64_t>& drafts, const at::Tensor& p, const at::Tensor& q,
                       at::Generator& generator);

/// Checks a draft model against its target, naming `draft_model`: one needs
/// speculate >= 1, the target's vocabulary and the target's device. A null
/// draft passes. Generator and the Scheduler call it before anything runs.
void check_draft_model(const LlamaModel& target, const LlamaModel* draft, int64_t speculate);

/// Draft and acceptance counts of a speculative run.
struct SpeculationStats {
  int64_t verify_steps = 0;  ///< verification steps (one per step of the batch)
  int64_t drafted = 0;       ///< draft tokens proposed, over every row
  int64_t accepted = 0;      ///< of them, accepted
  /// accepted / drafted (0 when nothing was drafted).
  double acceptance_rate() const {
    return drafted > 0 ? static_cast<double>(accepted) / static_cast<double>(drafted) : 0.0;
  }
};

}  // namespace statickv::reference
