// The sampling head's pick (Note [sampling head], docs/sampling.md): each
// taking row's next token on the logits' device, with one result table that
// fetch() copies to the host once. pick_rows runs the fused kernel where one
// serves the head's device (pick_fused.cpp) and otherwise this tensor
// composition, which computes the same and runs only the stages some taking
// row asks for; distribution() is the same composition as probabilities.

#include "draws.hpp"

#include <c10/util/Exception.h>

#include <tuple>

namespace statickv::reference {

using namespace detail;  // the tables' columns (Param, Key), the draws and upload

at::Tensor SamplingHead::noise(const at::Tensor& keys) const {
  return gumbel(hashed_ids_.unsqueeze(0), keys);
}

at::Tensor SamplingHead::penalized(const at::Tensor& logits, const Rows& rows) const {
  const int64_t b = rows.b;
  at::Tensor x = logits;
  if (rows.bias) x = x.scatter_add(1, bias_ids_.narrow(0, 0, b), bias_vals_.narrow(0, 0, b));
  if (rows.min_tokens) {
    const at::Tensor keys = keys_.narrow(0, 0, b);
    const at::Tensor active = keys.select(1, kDrawIndex).lt(keys.select(1, kMinTokens));
    const at::Tensor mask = at::where(active, kMinusInf, 0.0f).unsqueeze(1);
    x = x.scatter_add(1, stop_ids_.narrow(0, 0, b), mask.expand({b, options_.max_stop}));
  }
  if (rows.repetition) {
    // transformers' RepetitionPenaltyLogitsProcessor on prompt and generated ids.
    const at::Tensor p = column(kRepetition, b);
    x = at::where(seen_.narrow(0, 0, b), at::where(x.lt(0), x.mul(p), x.div(p)), x);
  }
  // OpenAI's presence and frequency penalties on generated ids, kept summed.
  if (rows.additive) x = x.sub(penalty_.narrow(0, 0, b));
  return x;
}

at::Tensor SamplingHead::floor(const at::Tensor& scaled, const at::Tensor& top, const Rows& rows,
                               const Table& t) const {
  // transformers' TopK, TopP and MinP keep the tokens at or above a value
  // per row; each row's floor is the highest of its filters'. Sorting (for
  // top-k and top-p) covers only the rows that ask.
  const int64_t b = rows.b, last = options_.vocab_size - 1;
  at::Tensor floor;
  if (rows.min_p) floor = top.add(t.column(kLogMinP));  // p >= min_p * p_max
  if (rows.sorted.empty()) return floor;
  const bool all = static_cast<int64_t>(rows.sorted.size()) == b;
  at::Tensor index;
  if (!all) {
    index = upload(rows.sorted, options_.device);
  }
  const auto pick_rows = [&](const at::Tensor& t) { return all ? t : t.index_select(0, index); };
  at::Tensor sorted = std::get<0>(pick_rows(scaled).sort(-1, /*descending=*/false));
  at::Tensor sub = sorted.gather(1, pick_rows(t.keys.narrow(1, kKthPosition, 1)));
  if (rows.top_k) sorted.masked_fill_(sorted.lt(sub), kMinusInf);
  if (rows.top_p) {
    // Ascending mass up to and including a token <= 1 - top_p drops it;
    // the dropped tokens are a prefix, the most likely one always stays.
    at::Tensor drop = sorted.softmax(-1).cumsum(-1).le(pick_rows(t.column(kOneMinusTopP)));
    drop.select(1, last).fill_(false);
    sub = at::maximum(sub, sorted.gather(1, drop.sum(-1, /*keepdim=*/true)));
  }
  if (!all) {
    sub = at::full({b, 1}, kMinusInf, scaled.options()).index_copy_(0, index, sub);
  }
  return floor.defined() ? at::maximum(floor, sub) : sub;
}

void SamplingHead::mark(const at::Tensor& chosen, const at::Tensor& take, int64_t b) {
  // Each taking row's token: its presence (first time) and frequency
  // penalties, added where they apply so that applying them is one
  // subtraction, and its marks as generated and, for the repetition
  // penalty, seen.
  const at::Tensor generated = generated_.narrow(0, 0, b), seen = seen_.narrow(0, 0, b);
  const at::Tensor before = generated.gather(1, chosen);
  const at::Tensor add =
      column(kFrequency, b).add(before.logical_not().mul(column(kPresence, b))).mul_(take);
  penalty_.narrow(0, 0, b).scatter_add_(1, chosen, add);
  generated.scatter_(1, chosen, before.logical_or(take));
  seen.scatter_(1, chosen, seen.gather(1, chosen).logical_or(take));
}

void SamplingHead::check_logits(const at::Tensor& logits) const {
  TORCH_CHECK(logits.dim() == 2 && logits.size(1) == options_.vocab_size &&
                  logits.size(0) <= options_.max_batch && logits.scalar_type() == at::kFloat,
              "logits: expected float32 [b <= ", options_.max_batch, ", ", options_.vocab_size,
              "] but got ", logits.scalar_type(), " ", logits.sizes());
  TORCH_CHECK(logits.device() == options_.device, "logits: expected a tensor on the head's device ",
              options_.device, " but got one on ", logits.device());
}

void SamplingHead::pick(const at::Tensor& logits, const std::vector<bool>& takes) {
  check_logits(logits);
  const int64_t b = logits.size(0);
  TORCH_CHECK(static_cast<int64_t>(takes.size()) == b, "takes: expected ", b,
              " flags (one per row of logits) but got ", takes.size());
  const Rows rows = scan(b, &takes);
  if (!rows.any) return;
  std::vector<int64_t> flags(takes.begin(), takes.end());
  pick_rows(logits, upload(flags, options_.device), rows);
}

void SamplingHead::pick_all(const at::Tensor& logits, const at::Tensor& takes) {
  check_logits(logits);
  const int64_t b = logits.size(0);
  TORCH_CHECK(takes.dim() == 1 && takes.size(0) == b && takes.scalar_type() == at::kLong &&
                  takes.device() == options_.device,
              "takes: expected int64 [", b, "] on the head's device ", options_.device, " but got ",
              takes.scalar_type(), " ", takes.sizes(), " on ", takes.device());
  // Every stage, whatever the rows ask: the same launches for any settings.
  Rows rows;
  rows.b = b;
  rows.any = rows.sampled = rows.top_k = rows.top_p = rows.min_p = true;
  rows.repetition = rows.additive = rows.bias = rows.min_tokens = rows.marks = true;
  rows.logprobs = options_.max_logprobs;
  for (int64_t r = 0; r < b; ++r) rows.sorted.push_back(r);
  pick_rows(logits, takes, rows);
}

void SamplingHead::pick_rows(const at::Tensor& logits, const at::Tensor& take, const Rows& rows) {
  if (fused()) return pick_fused(logits, take, rows.logprobs);
  const int64_t b = rows.b;
  const at::Tensor x = penalized(logits, rows);
  auto [top, chosen] = x.max(-1, /*keepdim=*/true);
  const at::Tensor keys = keys_.narrow(0, 0, b);
  if (rows.sampled) {
    const at::Tensor t = column(kTemperature, b);
    const at::Tensor scaled = x.div(t);
    const at::Tensor key = draw_keys(keys.select(1, kDrawIndex), keys.select(1, kSeedKey));
    at::Tensor score = scaled.add(noise(key));
    const at::Tensor low = floor(scaled, top.div(t), rows, table(b));
    if (low.defined()) score.masked_fill_(scaled.lt(low), kMinusInf);
    chosen = at::where(keys.narrow(1, kSampled, 1).to(at::kBool), score.argmax(-1, true), chosen);
  }
  chosen = chosen.squeeze(1);
  keys.select(1, kDrawIndex).add_(take);
  if (rows.marks) mark(chosen.unsqueeze(1), take.unsqueeze(1), b);
  at::Tensor fresh = at::stack({chosen.to(at::kFloat), at::zeros_like(chosen, at::kFloat)}, 1);
  if (rows.logprobs >= 0) {
    const at::Tensor lp = logits.log_softmax(-1);
    fresh = at::cat({fresh, lp.gather(1, chosen.unsqueeze(1))}, 1);
    if (rows.logprobs > 0) {
      const auto [best, ids] = lp.topk(rows.logprobs);
      fresh = at::cat(
          {fresh, at::stack({ids.to(at::kFloat), best}, 2).view({b, 2 * rows.logprobs})}, 1);
    }
  }
  const at::Tensor out = out_.narrow(0, 0, b).narrow(1, 0, fresh.size(1));
  out.copy_(at::where(take.unsqueeze(1).to(at::kBool), fresh, out));
}

std::vector<Picked> SamplingHead::fetch(int64_t b) const {
  TORCH_CHECK(b >= 0 && b <= options_.max_batch, "b: expected 0..", options_.max_batch, " but got ",
              b);
  const at::Tensor host = out_.narrow(0, 0, b).cpu();
  const float* row = host.data_ptr<float>();
  const int64_t width = host.size(1);
  std::vector<Picked> picked(static_cast<size_t>(b));
  for (int64_t r = 0; r < b; ++r, row += width) {
    Picked& p = picked[static_cast<size_t>(r)];
    p.token = static_cast<int64_t>(row[0]);
    p.accepted = static_cast<int64_t>(row[1]);
    const int64_t n = host_[static_cast<size_t>(r)].logprobs;
    if (n < 0) continue;
    p.logprob.token = p.token;
    p.logprob.logprob = row[2];
    for (int64_t i = 0; i < n; ++i) {
      p.logprob.top.emplace_back(static_cast<int64_t>(row[3 + 2 * i]), row[4 + 2 * i]);
    }
  }
  return picked;
}

void SamplingHead::copy_picks(const at::Tensor& ids) const {
  TORCH_CHECK(ids.dim() == 1 && ids.size(0) <= options_.max_batch &&
                  ids.scalar_type() == at::kLong && ids.device() == options_.device,
              "ids: expected int64 [b <= ", options_.max_batch, "] on the head's device ",
              options_.device, " but got ", ids.scalar_type(), " ", ids.sizes(), " on ",
              ids.device());
  // The id column is float32, exact for ids below 2^24; the copy converts.
  ids.copy_(out_.narrow(0, 0, ids.size(0)).select(1, 0));
}

at::Tensor SamplingHead::distribution(const at::Tensor& x, const Table& t, const Rows& rows) const {
  const auto [top, best] = x.max(-1, /*keepdim=*/true);
  at::Tensor point = at::zeros_like(x).scatter_(1, best, 1.0f);
  if (!rows.sampled) return point;
  const at::Tensor temperature = t.column(kTemperature);
  at::Tensor scaled = x.div(temperature);
  const at::Tensor low = floor(scaled, top.div(temperature), rows, t);
  if (low.defined()) scaled = scaled.masked_fill(scaled.lt(low), kMinusInf);
  const at::Tensor probs = scaled.softmax(-1);
  return at::where(t.keys.select(1, kSampled).to(at::kBool).unsqueeze(1), probs, point);
}

at::Tensor SamplingHead::probabilities(const at::Tensor& logits) const {
  const int64_t b = logits.size(0);
  const Rows rows = scan(b, nullptr);
  return distribution(penalized(logits, rows), table(b), rows);
}

}  // namespace statickv::reference
