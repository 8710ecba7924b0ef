// Prompt-lookup drafting and the acceptance rule (speculative.hpp). Host
// code only: each verification step's ids and probabilities are already on
// the host when these run.

#include <statickv/engine/speculative.hpp>

#include <statickv/model/model.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>
#include <mutex>

namespace statickv::reference {

std::vector<int64_t> prompt_lookup_draft(const std::vector<int64_t>& tokens, int64_t k,
                                         int64_t max_ngram) {
  TORCH_CHECK(k >= 0, "k: expected >= 0 but got ", k);
  TORCH_CHECK(max_ngram >= 1, "max_ngram: expected >= 1 but got ", max_ngram);
  const auto size = static_cast<int64_t>(tokens.size());
  for (int64_t n = std::min(max_ngram, size - 1); n >= 1 && k > 0; --n) {
    const auto suffix = tokens.end() - n;
    // The most recent earlier start i whose n tokens equal the suffix.
    for (int64_t i = size - n - 1; i >= 0; --i) {
      if (!std::equal(suffix, tokens.end(), tokens.begin() + i)) continue;
      const int64_t from = i + n, to = std::min(size, from + k);
      return std::vector<int64_t>(tokens.begin() + from, tokens.begin() + to);
    }
  }
  return {};
}

Verdict verify_greedy(const std::vector<int64_t>& drafts, const std::vector<int64_t>& target_ids) {
  TORCH_CHECK(target_ids.size() == drafts.size() + 1, "target_ids: expected ", drafts.size() + 1,
              " ids (one per draft and the bonus) but got ", target_ids.size());
  Verdict v;
  while (v.accepted < static_cast<int64_t>(drafts.size()) &&
         drafts[v.accepted] == target_ids[v.accepted]) {
    v.tokens.push_back(drafts[v.accepted++]);
  }
  v.tokens.push_back(target_ids[v.accepted]);
  return v;
}

namespace {

/// A uniform double in [0, 1) from the CPU generator (53 random bits).
double uniform(at::Generator& generator) {
  auto* impl = at::check_generator<at::CPUGeneratorImpl>(generator);
  std::lock_guard<std::mutex> lock(impl->mutex_);
  return static_cast<double>(impl->random64() >> 11) * 0x1.0p-53;
}

/// One draw from the unnormalized weights w[0..vocab) (sum > 0).
int64_t draw(const double* w, int64_t vocab, at::Generator& generator) {
  double total = 0;
  for (int64_t x = 0; x < vocab; ++x) total += w[x];
  double u = uniform(generator) * total;
  for (int64_t x = 0; x < vocab; ++x) {
    if (u < w[x]) return x;
    u -= w[x];
  }
  for (int64_t x = vocab; x-- > 0;) {  // rounding left u past the end: the last nonzero weight
    if (w[x] > 0) return x;
  }
  return vocab - 1;
}

/// norm(max(0, p - q)) drawn; q null: a point mass at `draft`. Falls back to
/// p where p <= q everywhere (rounding: the draft would have been accepted).
int64_t draw_residual(const double* p, const double* q, int64_t draft, int64_t vocab,
                      at::Generator& generator) {
  std::vector<double> residual(static_cast<size_t>(vocab));
  bool any = false;
  for (int64_t x = 0; x < vocab; ++x) {
    const double qx = q ? q[x] : (x == draft ? 1.0 : 0.0);
    residual[x] = std::max(0.0, p[x] - qx);
    any = any || residual[x] > 0;
  }
  return any ? draw(residual.data(), vocab, generator) : draw(p, vocab, generator);
}

void check_distributions(const std::vector<int64_t>& drafts, const at::Tensor& p,
                         const at::Tensor& q) {
  const auto k = static_cast<int64_t>(drafts.size());
  TORCH_CHECK(p.dim() == 2 && p.size(0) == k + 1, "p: expected [", k + 1,
              ", vocab] (one distribution per draft and the bonus) but got ", p.sizes());
  TORCH_CHECK(!q.defined() || (q.dim() == 2 && q.size(0) == k && q.size(1) == p.size(1)),
              "q: expected undefined (point-mass drafts) or [", k, ", ", p.size(1), "] but got ",
              q.sizes());
  for (const int64_t x : drafts) {
    TORCH_CHECK(x >= 0 && x < p.size(1), "drafts: expected ids in [0, ", p.size(1), ") but got ",
                x);
  }
}

}  // namespace

Verdict verify_sampled(const std::vector<int64_t>& drafts, const at::Tensor& p, const at::Tensor& q,
                       at::Generator& generator) {
  check_distributions(drafts, p, q);
  const at::Tensor ph = p.to(at::kCPU, at::kDouble).contiguous();
  const at::Tensor qh = q.defined() ? q.to(at::kCPU, at::kDouble).contiguous() : at::Tensor();
  const int64_t vocab = ph.size(1);
  Verdict v;
  for (const int64_t x : drafts) {
    const double* pi = ph.data_ptr<double>() + v.accepted * vocab;
    const double* qi = qh.defined() ? qh.data_ptr<double>() + v.accepted * vocab : nullptr;
    const double qx = qi ? qi[x] : 1.0;
    // Accept with probability min(1, p(x) / q(x)): u * q(x) < p(x), u in [0, 1).
    if (uniform(generator) * qx < pi[x]) {
      v.tokens.push_back(x);
      ++v.accepted;
      continue;
    }
    v.tokens.push_back(draw_residual(pi, qi, x, vocab, generator));
    return v;
  }
  v.tokens.push_back(draw(ph.data_ptr<double>() + v.accepted * vocab, vocab, generator));
  return v;
}

void check_draft_model(const LlamaModel& target, const LlamaModel* draft, int64_t speculate) {
  if (draft == nullptr) return;
  TORCH_CHECK(
      speculate > 0,
      "draft_model: expected speculate >= 1 with a draft model but got speculate=", speculate);
  TORCH_CHECK(draft->config().vocab_size == target.config().vocab_size,
              "draft_model: expected vocab_size=", target.config().vocab_size,
              " (the target's) but got ", draft->config().vocab_size);
  TORCH_CHECK(draft->device() == target.device(), "draft_model: expected device ", target.device(),
              " (the target's) but got ", draft->device());
}

}  // namespace statickv::reference
