// The sampling head's speculative verification (Note [sampling head],
// docs/speculative.md): the acceptance rule over a row's drafts and the
// target's distributions, the correction or bonus token, and a draft
// model's own draws, all on the device with counter-based keys.

#include "draws.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <sstream>
#include <string>

namespace statickv::reference {

using namespace detail;  // the tables' columns (Param, Key), the draws and upload

at::Tensor draft_distributions(const std::vector<at::Tensor>& qs, int64_t k) {
  if (qs.empty()) return at::Tensor();
  TORCH_CHECK(static_cast<int64_t>(qs.size()) <= k, "qs: expected at most k=", k,
              " draft passes but got ", qs.size());
  at::Tensor q = at::stack(qs, 1);
  if (q.size(1) == k) return q;
  return at::cat({q, at::zeros({q.size(0), k - q.size(1), q.size(2)}, q.options())}, 1);
}

std::pair<at::Tensor, at::Tensor> SamplingHead::draft(const at::Tensor& logits, int64_t i) const {
  check_logits(logits);
  const int64_t b = logits.size(0);
  const at::Tensor q = probabilities(logits);
  const at::Tensor keys = keys_.narrow(0, 0, b);
  const at::Tensor key = draw_keys(keys.select(1, kDrawIndex).add(i), keys.select(1, kSeedKey))
                             .bitwise_xor_(kDraftStream);
  return {q.log().add_(noise(mix(key))).argmax(-1), q};
}

at::Tensor SamplingHead::accepted_drafts(const at::Tensor& p, const at::Tensor& d,
                                         const at::Tensor& n, const at::Tensor& q,
                                         const at::Tensor& key) const {
  // Draft t is accepted when u_t * q_t(x_t) < p_t(x_t); positions past a
  // row's drafts never are. The accepted ones are the leading run.
  const int64_t b = p.size(0), k = d.size(1);
  const at::Tensor pd = p.narrow(1, 0, k).gather(2, d.unsqueeze(2)).squeeze(2);
  const at::Tensor u = uniform(key.narrow(1, 0, k), kAcceptStream);
  const at::Tensor test = q.defined() ? u.mul(q.gather(2, d.unsqueeze(2)).squeeze(2)) : u;
  const at::Tensor valid = at::arange(k, n.options()).unsqueeze(0).lt(n.unsqueeze(1));
  return test.lt(pd).logical_and_(valid).to(at::kLong).cumprod(1).sum(1).view({b, 1});
}

namespace {

/// The first setting of `s` that verification cannot apply, as "name=value"
/// ("" = none): each depends on every accepted token.
std::string unverifiable_setting(const Sampling& s) {
  std::ostringstream out;
  if (s.repetition_penalty != 1.0)
    out << "repetition_penalty=" << s.repetition_penalty;
  else if (s.presence_penalty != 0.0)
    out << "presence_penalty=" << s.presence_penalty;
  else if (s.frequency_penalty != 0.0)
    out << "frequency_penalty=" << s.frequency_penalty;
  else if (!s.logit_bias.empty())
    out << "logit_bias with " << s.logit_bias.size() << " entries";
  else if (s.min_tokens > 0)
    out << "min_tokens=" << s.min_tokens;
  else if (s.logprobs >= 0)
    out << "logprobs=" << s.logprobs;
  return out.str();
}

}  // namespace

SamplingHead::Rows SamplingHead::verified_rows(int64_t b, int64_t k, const DraftSet& drafts,
                                               const std::vector<bool>& takes) const {
  const int64_t vocab = options_.vocab_size;
  TORCH_CHECK(
      static_cast<int64_t>(takes.size()) == b && static_cast<int64_t>(drafts.ids.size()) == b,
      "verify: expected ", b, " takes flags and draft lists (one per row of logits) but got ",
      takes.size(), " and ", drafts.ids.size());
  TORCH_CHECK(!drafts.q.defined() || drafts.q.sizes() == at::IntArrayRef({b, k, vocab}),
              "q: expected [", b, ", ", k, ", ", vocab, "] but got ", drafts.q.sizes());
  const Rows rows = scan(b, &takes);
  if (!rows.any) return rows;
  for (int64_t r = 0; r < b; ++r) {
    if (!takes[static_cast<size_t>(r)]) continue;
    const std::string setting = unverifiable_setting(host_[static_cast<size_t>(r)]);
    TORCH_CHECK(setting.empty(),
                "verify: expected rows without penalties, logit_bias, "
                "min_tokens or logprobs (they depend on each accepted token) but row ",
                r, " has ", setting);
  }
  for (int64_t r = 0; r < b; ++r) {
    const std::vector<int64_t>& row = drafts.ids[static_cast<size_t>(r)];
    TORCH_CHECK(static_cast<int64_t>(row.size()) <= k, "drafts[", r, "]: expected at most k=", k,
                " ids but got ", row.size());
    for (const int64_t id : row) {
      TORCH_CHECK(id >= 0 && id < vocab, "drafts[", r, "]: expected ids in [0, ", vocab,
                  ") but got ", id);
    }
  }
  return rows;
}

void SamplingHead::check_verify(int64_t k, const DraftSet& drafts,
                                const std::vector<bool>& takes) const {
  TORCH_CHECK(k >= 1, "k: expected >= 1 drafts per row but got ", k);
  verified_rows(static_cast<int64_t>(takes.size()), k, drafts, takes);
}

/// A verification pass's logits: float32 [b, k + 1 >= 2, vocab] on the
/// head's device (check_logits' rule for every token's logits).
void SamplingHead::check_verify_logits(const at::Tensor& logits) const {
  const int64_t vocab = options_.vocab_size;
  TORCH_CHECK(logits.dim() == 3 && logits.size(0) <= options_.max_batch && logits.size(1) >= 2 &&
                  logits.size(2) == vocab && logits.scalar_type() == at::kFloat &&
                  logits.device() == options_.device,
              "logits: expected float32 [b <= ", options_.max_batch, ", k + 1 >= 2, ", vocab,
              "] on ", options_.device, " but got ", logits.scalar_type(), " ", logits.sizes(),
              " on ", logits.device());
}

void SamplingHead::verify(const at::Tensor& logits, const DraftSet& drafts,
                          const std::vector<bool>& takes) {
  check_verify_logits(logits);
  const int64_t b = logits.size(0), k = logits.size(1) - 1;
  const Rows rows = verified_rows(b, k, drafts, takes);
  if (!rows.any) return;
  std::vector<int64_t> ids(static_cast<size_t>(b * k), 0), counts(b),
      flags(takes.begin(), takes.end());
  for (int64_t r = 0; r < b; ++r) {
    const std::vector<int64_t>& row = drafts.ids[static_cast<size_t>(r)];
    std::copy(row.begin(), row.end(), ids.begin() + r * k);
    counts[static_cast<size_t>(r)] = static_cast<int64_t>(row.size());
  }
  const at::Device& device = options_.device;
  verify_rows(logits, upload(ids, device).view({b, k}), upload(counts, device),
              upload(flags, device), drafts.q, rows);
}

void SamplingHead::verify_all(const at::Tensor& logits, const at::Tensor& ids,
                              const at::Tensor& positions, const at::Tensor& takes,
                              const at::Tensor& q) {
  check_verify_logits(logits);
  const int64_t vocab = options_.vocab_size;
  const int64_t b = logits.size(0), k1 = logits.size(1), k = k1 - 1;
  TORCH_CHECK(ids.sizes() == at::IntArrayRef({b, k1}) && positions.sizes() == ids.sizes() &&
                  ids.scalar_type() == at::kLong && positions.scalar_type() == at::kLong,
              "ids, positions: expected int64 [", b, ", ", k1, "] but got ", ids.scalar_type(), " ",
              ids.sizes(), " and ", positions.scalar_type(), " ", positions.sizes());
  TORCH_CHECK(takes.dim() == 1 && takes.size(0) == b && takes.scalar_type() == at::kLong &&
                  takes.device() == options_.device,
              "takes: expected int64 [", b, "] on the head's device ", options_.device, " but got ",
              takes.scalar_type(), " ", takes.sizes(), " on ", takes.device());
  TORCH_CHECK(!q.defined() || q.sizes() == at::IntArrayRef({b, k, vocab}), "q: expected [", b, ", ",
              k, ", ", vocab, "] but got ", q.sizes());
  // Every sampling stage, whatever the rows ask: the same launches for any settings.
  Rows rows;
  rows.b = b;
  rows.any = rows.sampled = rows.top_k = rows.top_p = rows.min_p = true;
  for (int64_t r = 0; r < b; ++r) rows.sorted.push_back(r);
  const at::Tensor count = positions.narrow(1, 1, k).ge(0).sum(1);
  verify_rows(logits, ids.narrow(1, 1, k).contiguous(), count, takes, q, rows);
}

void SamplingHead::verify_rows(const at::Tensor& logits, const at::Tensor& d, const at::Tensor& n,
                               const at::Tensor& take, const at::Tensor& q, const Rows& rows) {
  const int64_t vocab = options_.vocab_size;
  const int64_t b = logits.size(0), k1 = logits.size(1), k = k1 - 1;
  // Each row's distribution at each of its k + 1 positions.
  Rows every = rows;
  every.b = b * k1;
  every.sorted.clear();
  for (const int64_t r : rows.sorted)
    for (int64_t t = 0; t < k1; ++t) every.sorted.push_back(r * k1 + t);
  const Table t{params_.narrow(0, 0, b).repeat_interleave(k1, 0),
                keys_.narrow(0, 0, b).repeat_interleave(k1, 0)};
  const at::Tensor p = distribution(logits.reshape({b * k1, vocab}), t, every).view({b, k1, vocab});
  // Position t's key: (seed, draw index + t), as a plain pick's.
  const at::Tensor keys = keys_.narrow(0, 0, b);
  const at::Tensor key =
      draw_keys(keys.select(1, kDrawIndex).unsqueeze(1).add(at::arange(k1, keys.options())),
                keys.select(1, kSeedKey).unsqueeze(1));
  const at::Tensor a = accepted_drafts(p, d, n, q, key);  // [b, 1]
  // The token at position a: from norm(max(0, p_a - q_a)) after a
  // rejection (q_a: the draft's distribution, or a point mass at it), from
  // p_a when every draft was accepted.
  const at::Tensor p_a = p.gather(1, a.unsqueeze(2).expand({b, 1, vocab})).squeeze(1);
  const at::Tensor at_draft = a.clamp_max(k - 1);
  at::Tensor q_a = q.defined() ? q.gather(1, at_draft.unsqueeze(2).expand({b, 1, vocab})).squeeze(1)
                               : at::zeros_like(p_a).scatter_(1, d.gather(1, at_draft), 1.0f);
  q_a = q_a.mul(a.lt(n.unsqueeze(1)));
  at::Tensor residual = p_a.sub(q_a).clamp_min_(0.0f);
  residual = at::where(residual.sum(-1, /*keepdim=*/true).gt(0), residual, p_a);
  const at::Tensor token = residual.log().add_(noise(key.gather(1, a).squeeze(1))).argmax(-1);
  keys.select(1, kDrawIndex).add_(a.squeeze(1).add(1).mul_(take));
  const at::Tensor fresh = at::stack({token.to(at::kFloat), a.squeeze(1).to(at::kFloat)}, 1);
  const at::Tensor out = out_.narrow(0, 0, b).narrow(1, 0, 2);
  out.copy_(at::where(take.unsqueeze(1).to(at::kBool), fresh, out));
}

}  // namespace statickv::reference
