#pragma once
// Comparing two generation runs of one model, as statickv-demo compares its
// static/hybrid run with the DynamicCache baseline: do they agree, up to the
// rounding their dtype allows?
//
// Note [comparing with the baseline]: the two runs compute the same function
// but not with the same operations (padded shapes, another reduction order,
// masks over more slots), so their logits differ by rounding: ~1e-7 in fp32,
// up to a few tenths in fp16/bf16. Where two candidates' logits nearly tie,
// that rounding can flip an argmax, and from there the runs decode different
// sequences, which then say nothing about the caches. So logits are compared
// only over the steps both runs took from the same prefix (through each
// prompt's first differing token, whose logits still saw the same inputs),
// against a tolerance of the dtype; and a differing greedy token is accepted
// only where the baseline's own logits (float32 tensors, whatever the run's
// dtype) put the two tokens within a near-tie margin.

#include <ATen/ATen.h>

#include <cmath>
#include <cstdint>
#include <limits>
#include <optional>
#include <vector>

namespace statickv::apps {

struct Tolerance {
  double logits;  ///< largest |difference| of any compared logit
  double tie;     ///< largest baseline margin at which a greedy token may differ
};

/// fp32: 1e-4, and a token may differ only where both logits moving by the
/// tolerance could swap it (2e-4); fp16/bf16: 0.5, and top-1 agreement
/// wherever the baseline's margin exceeds 0.1.
inline Tolerance tolerance_for(at::ScalarType dtype) {
  if (dtype == at::kFloat || dtype == at::kDouble) return {1e-4, 2e-4};
  return {0.5, 0.1};
}

/// A prompt's first differing token.
struct Divergence {
  size_t prompt = 0;
  size_t step = 0;  ///< 0: the token the prefill picked
  int64_t ours = 0, baseline = 0;
  double margin = 0;  ///< the baseline's logit of its token minus its logit of ours
};

struct Comparison {
  double max_diff = 0;                  ///< over the compared steps; NaN if any logit is NaN
  int64_t steps = 0;                    ///< (prompt, step) pairs compared
  std::vector<Divergence> divergences;  ///< one per prompt whose tokens differ, in prompt order
};

/// Tokens [prompt][step] and logits [prompt] = [steps, vocab] of each run.
inline Comparison compare_runs(const std::vector<std::vector<int64_t>>& ours,
                               const std::vector<at::Tensor>& our_logits,
                               const std::vector<std::vector<int64_t>>& baseline,
                               const std::vector<at::Tensor>& baseline_logits) {
  TORCH_CHECK(ours.size() == baseline.size() && our_logits.size() == ours.size() &&
                  baseline_logits.size() == ours.size(),
              "compare_runs: expected tokens and logits for ", ours.size(),
              " prompts in both runs");
  Comparison c;
  for (size_t r = 0; r < ours.size(); ++r) {
    const std::vector<int64_t>& a = ours[r];
    const std::vector<int64_t>& b = baseline[r];
    const size_t both = std::min(a.size(), b.size());
    size_t same = 0;
    while (same < both && a[same] == b[same]) ++same;
    const int64_t compared = static_cast<int64_t>(std::min(both, same + 1));
    if (compared > 0) {
      const double d = (our_logits[r].narrow(0, 0, compared).to(at::kDouble) -
                        baseline_logits[r].narrow(0, 0, compared).to(at::kDouble))
                           .abs()
                           .max()
                           .item<double>();
      c.max_diff = std::isnan(d) || std::isnan(c.max_diff)
                       ? std::numeric_limits<double>::quiet_NaN()
                       : std::max(c.max_diff, d);
      c.steps += compared;
    }
    if (same < both) {
      const at::Tensor row = baseline_logits[r][static_cast<int64_t>(same)].to(at::kDouble);
      c.divergences.push_back(
          {r, same, a[same], b[same], (row[b[same]] - row[a[same]]).item<double>()});
    }
  }
  return c;
}

struct Verdict {
  bool logits_ok = false;  ///< max_diff within the tolerance (false for NaN)
  /// The first divergence no near tie explains (greedy only: a sampled token
  /// may differ wherever the logits agree).
  std::optional<Divergence> unexplained;
  bool ok() const { return logits_ok && !unexplained; }
};

inline Verdict judge(const Comparison& c, const Tolerance& tol, bool greedy) {
  Verdict v;
  v.logits_ok = c.max_diff <= tol.logits;
  for (const Divergence& d : c.divergences) {
    if (greedy && !(d.margin <= tol.tie)) {
      v.unexplained = d;
      break;
    }
  }
  return v;
}

}  // namespace statickv::apps
