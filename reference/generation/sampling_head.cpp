// SamplingHead: the on-device pick of each row's next token (Note
// [sampling head], docs/sampling.md). Every per-row setting lives in a
// preallocated [max_batch] table on the head's device; a call runs only the
// stages some taking row asks for, and writes its rows' results into one
// table that fetch() copies to the host once.

#include <statickv/kernel_switches.hpp>
#include <statickv/reference/sampling.hpp>

#include "sampling_fused.hpp"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <set>
#include <tuple>

namespace statickv::reference {

namespace {

using namespace detail;  // the tables' columns (Param, Key) and mix32

constexpr int64_t kMask = 0xffffffffLL;
constexpr int64_t kMix = 0x45d9f3bLL;      // < 2^27: x * kMix < 2^59 for x < 2^32
constexpr int64_t kGolden = 0x9e3779b1LL;  // < 2^32: id * kGolden < 2^56 for ids < 2^24
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

/// mix32 on int64 tensors holding values in [0, 2^32): the same bits.
at::Tensor mix(at::Tensor x) {
  x = x.bitwise_xor(x.bitwise_right_shift(16)).mul_(kMix).bitwise_and_(kMask);
  x = x.bitwise_xor(x.bitwise_right_shift(16)).mul_(kMix).bitwise_and_(kMask);
  return x.bitwise_xor(x.bitwise_right_shift(16));
}

int64_t seed_key(uint64_t seed) {
  return mix32(static_cast<uint32_t>(seed) ^ mix32(static_cast<uint32_t>(seed >> 32)));
}

bool sampled(const Sampling& s) { return s.temperature > 0.0; }

/// Host values on `device` without a host sync: on CUDA they go through
/// pinned memory with a non-blocking copy (a copy from pageable memory
/// would wait for the stream). The caching host allocator keeps the pinned
/// block until the copy is done.
template <typename T>
at::Tensor upload(const std::vector<T>& values, const at::Device& device) {
  at::Tensor host = at::tensor(values);
  if (device.is_cpu()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}
bool has_penalty(const Sampling& s) {
  return s.repetition_penalty != 1.0 || s.presence_penalty != 0.0 || s.frequency_penalty != 0.0;
}

}  // namespace

int64_t draw_key(uint64_t seed, int64_t index) {
  return (seed_key(seed) + index * kGolden) & kMask;
}

namespace {

/// Uniform numbers in (0, 1) from hashes h in [0, 2^32): their top 23
/// bits, centred in their interval. Exact in float (24 bits would round
/// the top one to 1, whose noise is infinite), so a log of them is finite.
at::Tensor unit(const at::Tensor& h) {
  return h.bitwise_right_shift(9).to(at::kFloat).add_(0.5).mul_(1.0 / 8388608.0);
}

/// Gumbel noise from hashed ids ((id * kGolden) mod 2^32) and keys [b].
at::Tensor gumbel(const at::Tensor& hashed_ids, const at::Tensor& keys) {
  return unit(mix(hashed_ids.bitwise_xor(keys.unsqueeze(1)))).log_().neg_().log_().neg_();
}

/// The per-draw keys of draw indices `index` for rows with seed keys
/// `seed` (broadcast alike): draw_key on the device.
at::Tensor draw_keys(const at::Tensor& index, const at::Tensor& seed) {
  return index.mul(kGolden).add_(seed).bitwise_and_(kMask);
}

}  // namespace

at::Tensor sampling_noise(const at::Tensor& keys, const at::Tensor& ids) {
  TORCH_CHECK(keys.dim() == 1 && ids.dim() == 2 && keys.size(0) == ids.size(0),
              "sampling_noise: expected keys [b] and ids [b, n] but got ", keys.sizes(), " and ",
              ids.sizes());
  return gumbel(ids.mul(kGolden).bitwise_and_(kMask), keys);
}

at::Tensor SamplingHead::noise(const at::Tensor& keys) const {
  return gumbel(hashed_ids_.unsqueeze(0), keys);
}

void check_sampling(const Sampling& s, int64_t vocab_size, int64_t max_bias, int64_t max_logprobs) {
  const double t = s.temperature;
  TORCH_CHECK(std::isfinite(t) && t >= 0.0,
              "temperature: expected a finite number >= 0 (0 = greedy) but got ", t);
  TORCH_CHECK(s.top_k >= 0, "top_k: expected >= 0 (0 = no filter) but got ", s.top_k);
  TORCH_CHECK(s.top_k == 0 || t > 0.0,
              "top_k: expected 0 without sampling (temperature 0 is greedy) but got ", s.top_k);
  TORCH_CHECK(std::isfinite(s.top_p) && s.top_p > 0.0 && s.top_p <= 1.0,
              "top_p: expected a number in (0, 1] (1 = no filter) but got ", s.top_p);
  TORCH_CHECK(s.top_p == 1.0 || t > 0.0,
              "top_p: expected 1 without sampling (temperature 0 is greedy) but got ", s.top_p);
  TORCH_CHECK(std::isfinite(s.min_p) && s.min_p >= 0.0 && s.min_p <= 1.0,
              "min_p: expected a number in [0, 1] (0 = no filter) but got ", s.min_p);
  TORCH_CHECK(s.min_p == 0.0 || t > 0.0,
              "min_p: expected 0 without sampling (temperature 0 is greedy) but got ", s.min_p);
  TORCH_CHECK(std::isfinite(s.repetition_penalty) && s.repetition_penalty > 0.0,
              "repetition_penalty: expected a finite number > 0 (1 = off) but got ",
              s.repetition_penalty);
  TORCH_CHECK(std::isfinite(s.presence_penalty),
              "presence_penalty: expected a finite number but got ", s.presence_penalty);
  TORCH_CHECK(std::isfinite(s.frequency_penalty),
              "frequency_penalty: expected a finite number but got ", s.frequency_penalty);
  TORCH_CHECK(static_cast<int64_t>(s.logit_bias.size()) <= max_bias,
              "logit_bias: expected at most ", max_bias, " token ids but got ",
              s.logit_bias.size());
  std::set<int64_t> ids;
  for (const auto& [id, bias] : s.logit_bias) {
    TORCH_CHECK(id >= 0 && id < vocab_size,
                "logit_bias: expected token ids in [0, vocab_size=", vocab_size, ") but got ", id);
    TORCH_CHECK(std::isfinite(bias), "logit_bias[", id, "]: expected a finite number but got ",
                bias);
    TORCH_CHECK(ids.insert(id).second, "logit_bias: expected distinct token ids but got ", id,
                " twice");
  }
  TORCH_CHECK(s.min_tokens >= 0, "min_tokens: expected >= 0 but got ", s.min_tokens);
  TORCH_CHECK(s.logprobs >= -1 && s.logprobs <= max_logprobs, "logprobs: expected -1 (none) or 0..",
              max_logprobs, " alternatives but got ", s.logprobs);
}

SamplingHead::SamplingHead(const SamplingHeadOptions& options) : options_(options) {
  const SamplingHeadOptions& o = options_;
  TORCH_CHECK(o.max_batch >= 1, "max_batch: expected >= 1 but got ", o.max_batch);
  TORCH_CHECK(o.vocab_size >= 1 && o.vocab_size <= (int64_t{1} << 24),
              "vocab_size: expected 1..2^24 (ids travel as float32) but got ", o.vocab_size);
  TORCH_CHECK(o.max_logprobs >= 0 && o.max_logprobs <= 20, "max_logprobs: expected 0..20 but got ",
              o.max_logprobs);
  TORCH_CHECK(o.max_bias >= 1, "max_bias: expected >= 1 but got ", o.max_bias);
  TORCH_CHECK(o.max_stop >= 1, "max_stop: expected >= 1 but got ", o.max_stop);
  const auto on = at::TensorOptions().device(o.device);
  const int64_t b = o.max_batch;
  params_ = at::zeros({b, kParams}, on.dtype(at::kFloat));
  keys_ = at::zeros({b, kKeys}, on.dtype(at::kLong));
  generated_ = at::zeros({b, o.vocab_size}, on.dtype(at::kBool));
  seen_ = at::zeros({b, o.vocab_size}, on.dtype(at::kBool));
  penalty_ = at::zeros({b, o.vocab_size}, on.dtype(at::kFloat));
  bias_ids_ = at::zeros({b, o.max_bias}, on.dtype(at::kLong));
  bias_vals_ = at::zeros({b, o.max_bias}, on.dtype(at::kFloat));
  stop_ids_ = at::zeros({b, o.max_stop}, on.dtype(at::kLong));
  out_ = at::zeros({b, 3 + 2 * o.max_logprobs}, on.dtype(at::kFloat));
  hashed_ids_ = at::arange(o.vocab_size, on.dtype(at::kLong)).mul_(kGolden).bitwise_and_(kMask);
  if (fused() && o.device.is_cuda()) {
    scratch_ = at::empty({b, o.vocab_size}, on.dtype(at::kFloat));
#if defined(STATICKV_HAS_CUDA)
    // The greedy grid's partials, for its widest grid (batch 1).
    const int64_t ctas = detail::pick_grid_ctas(o.device, o.vocab_size, 1);
    grid_best_ = at::empty({b * ctas * 16}, on.dtype(at::kByte));
    grid_norm_ = at::empty({b * ctas * 16}, on.dtype(at::kByte));
    grid_done_ = at::zeros({b}, on.dtype(at::kInt));
#endif
  }
  host_.assign(static_cast<size_t>(b), Sampling{});
  for (int64_t r = 0; r < b; ++r) set_row(r, Sampling{}, {}, {});
}

void SamplingHead::set_row(int64_t r, const Sampling& s, const std::vector<int64_t>& prompt,
                           const std::vector<int64_t>& stop_ids) {
  const SamplingHeadOptions& o = options_;
  TORCH_CHECK(r >= 0 && r < o.max_batch, "row: expected 0..", o.max_batch - 1, " but got ", r);
  check_sampling(s, o.vocab_size, o.max_bias, o.max_logprobs);
  const bool masks = s.min_tokens > 0 && !stop_ids.empty();
  TORCH_CHECK(!masks || static_cast<int64_t>(stop_ids.size()) <= o.max_stop,
              "stop: expected at most max_stop=", o.max_stop, " ids with min_tokens > 0 but got ",
              stop_ids.size());
  const int64_t kth = s.top_k > 0 && s.top_k < o.vocab_size ? o.vocab_size - s.top_k : 0;
  const std::vector<float> params = {static_cast<float>(sampled(s) ? s.temperature : 1.0),
                                     static_cast<float>(1.0 - s.top_p),
                                     static_cast<float>(std::log(s.min_p)),
                                     static_cast<float>(s.repetition_penalty),
                                     static_cast<float>(s.presence_penalty),
                                     static_cast<float>(s.frequency_penalty)};
  const bool plain = !sampled(s) && s.logit_bias.empty() && s.repetition_penalty == 1.0 &&
                     s.presence_penalty == 0.0 && s.frequency_penalty == 0.0;
  const std::vector<int64_t> keys = {
      seed_key(s.seed), 0, kth, masks ? s.min_tokens : 0, sampled(s) ? 1 : 0, plain ? 1 : 0};
  std::vector<int64_t> bias_ids(static_cast<size_t>(o.max_bias), 0);
  std::vector<float> bias_vals(static_cast<size_t>(o.max_bias), 0.0f);
  for (size_t i = 0; i < s.logit_bias.size(); ++i) {
    bias_ids[i] = s.logit_bias[i].first;
    bias_vals[i] = static_cast<float>(s.logit_bias[i].second);
  }
  std::vector<int64_t> stops(static_cast<size_t>(o.max_stop), masks ? stop_ids[0] : 0);
  if (masks) std::copy(stop_ids.begin(), stop_ids.end(), stops.begin());
  params_[r].copy_(upload(params, o.device));
  keys_[r].copy_(upload(keys, o.device));
  bias_ids_[r].copy_(upload(bias_ids, o.device));
  bias_vals_[r].copy_(upload(bias_vals, o.device));
  stop_ids_[r].copy_(upload(stops, o.device));
  generated_[r].zero_();
  seen_[r].zero_();
  penalty_[r].zero_();
  if (s.repetition_penalty != 1.0 && !prompt.empty()) {
    seen_[r].index_fill_(0, upload(prompt, o.device), true);
  }
  host_[static_cast<size_t>(r)] = s;
}

void SamplingHead::copy_row(int64_t from, int64_t to) {
  for (at::Tensor* t : {&params_, &keys_, &generated_, &seen_, &penalty_, &bias_ids_, &bias_vals_,
                        &stop_ids_, &out_}) {
    (*t)[to].copy_((*t)[from]);
  }
  host_[static_cast<size_t>(to)] = host_[static_cast<size_t>(from)];
}

void SamplingHead::reorder(const at::Tensor& index) {
  const int64_t n = index.size(0);
  const at::Tensor on_device = index.to(options_.device);
  for (at::Tensor* t : {&params_, &keys_, &generated_, &seen_, &penalty_, &bias_ids_, &bias_vals_,
                        &stop_ids_, &out_}) {
    t->narrow(0, 0, n).copy_(t->index_select(0, on_device));
  }
  std::vector<Sampling> moved;
  for (int64_t i = 0; i < n; ++i) moved.push_back(host_[index[i].item<int64_t>()]);
  std::copy(moved.begin(), moved.end(), host_.begin());
}

struct SamplingHead::Rows {
  int64_t b = 0;
  bool any = false, sampled = false, top_k = false, top_p = false, min_p = false;
  bool repetition = false, additive = false, bias = false, min_tokens = false, marks = false;
  int64_t logprobs = -1;        // the most alternatives a taking row asks for; -1: none
  std::vector<int64_t> sorted;  // the sampled rows with top-k or top-p
};

SamplingHead::Rows SamplingHead::scan(int64_t b, const std::vector<bool>* takes) const {
  Rows rows;
  rows.b = b;
  for (int64_t r = 0; r < b; ++r) {
    if (takes && !(*takes)[static_cast<size_t>(r)]) continue;
    const Sampling& s = host_[static_cast<size_t>(r)];
    rows.any = true;
    rows.sampled = rows.sampled || sampled(s);
    const bool top_k = s.top_k > 0 && s.top_k < options_.vocab_size, top_p = s.top_p < 1.0;
    rows.top_k = rows.top_k || top_k;
    rows.top_p = rows.top_p || top_p;
    rows.min_p = rows.min_p || s.min_p > 0.0;
    if (sampled(s) && (top_k || top_p)) rows.sorted.push_back(r);
    rows.repetition = rows.repetition || s.repetition_penalty != 1.0;
    rows.additive = rows.additive || s.presence_penalty != 0.0 || s.frequency_penalty != 0.0;
    rows.bias = rows.bias || !s.logit_bias.empty();
    rows.min_tokens = rows.min_tokens || s.min_tokens > 0;
    rows.marks = rows.marks || has_penalty(s);
    rows.logprobs = std::max(rows.logprobs, s.logprobs);
  }
  return rows;
}

at::Tensor SamplingHead::column(int64_t c, int64_t b) const {
  return params_.narrow(0, 0, b).select(1, c).unsqueeze(1);
}

struct SamplingHead::Table {
  at::Tensor params, keys;  // [n, kParams] and [n, kKeys]
  at::Tensor column(int64_t c) const { return params.select(1, c).unsqueeze(1); }
};

SamplingHead::Table SamplingHead::table(int64_t b) const {
  return {params_.narrow(0, 0, b), keys_.narrow(0, 0, b)};
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

bool SamplingHead::fused() const {
  if (!options_.fused) return false;
#if defined(STATICKV_HAS_CUDA)
  if (options_.device.is_cuda()) return kernel_enabled("sample_pick");  // Note [kernel switches]
#endif
  return options_.device.is_cpu();
}

void SamplingHead::pick_fused(const at::Tensor& logits, const at::Tensor& take, int64_t logprobs) {
  const int64_t b = logits.size(0);
  detail::FusedPick p;
  p.logits = logits.contiguous();
  p.params = params_.narrow(0, 0, b);
  p.keys = keys_.narrow(0, 0, b);
  p.generated = generated_.narrow(0, 0, b);
  p.seen = seen_.narrow(0, 0, b);
  p.penalty = penalty_.narrow(0, 0, b);
  p.bias_ids = bias_ids_.narrow(0, 0, b);
  p.bias_vals = bias_vals_.narrow(0, 0, b);
  p.stop_ids = stop_ids_.narrow(0, 0, b);
  p.hashed_ids = hashed_ids_;
  p.take = take.contiguous();
  p.logprobs = logprobs >= 0;
  if (logprobs > 0) {
    std::tie(p.top_logits, p.top_ids) = p.logits.topk(logprobs);
  } else {
    p.top_logits = at::empty({b, 0}, p.logits.options());
    p.top_ids = at::empty({b, 0}, p.take.options());
  }
  p.out = out_.narrow(0, 0, b);
  // One kernel on either device; named for OpCounter (Note [counted step]).
  RECORD_FUNCTION("statickv::sample_pick", std::vector<c10::IValue>({p.logits, p.params}));
#if defined(STATICKV_HAS_CUDA)
  if (options_.device.is_cuda()) {
    p.scratch = scratch_.narrow(0, 0, b);
    // Note [kernel switches]: pick_grid off, every row takes one block.
    p.ctas = kernel_enabled("pick_grid")
                 ? detail::pick_grid_ctas(options_.device, options_.vocab_size, b)
                 : 0;
    p.grid_best = grid_best_;
    p.grid_norm = grid_norm_;
    p.grid_done = grid_done_;
    detail::fused_pick_cuda(p);
    return;
  }
#endif
  detail::fused_pick_cpu(p);
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

namespace {

// Streams of the speculative draws (Note [sampling head]): a draw key is
// mixed with one of these before use, so the draft model's draws, the
// acceptance tests and the target's draws at one index are independent.
constexpr int64_t kDraftStream = 0x6a09e667LL;
constexpr int64_t kAcceptStream = 0xbb67ae85LL;

/// Uniform numbers in (0, 1) from keys (int64 in [0, 2^32)) on `stream`.
at::Tensor uniform(const at::Tensor& keys, int64_t stream) {
  return unit(mix(keys.bitwise_xor(stream)));
}

}  // namespace

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
  TORCH_CHECK(!rows.marks && !rows.bias && !rows.min_tokens && rows.logprobs < 0,
              "verify: expected rows without penalties, logit_bias, min_tokens or logprobs "
              "(they depend on each accepted token) but a taking row has one");
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

std::vector<TokenLogprob> SamplingHead::prompt_logprobs(const at::Tensor& logits,
                                                        const std::vector<int64_t>& next,
                                                        int64_t n) {
  const int64_t q = logits.size(0);
  TORCH_CHECK(logits.dim() == 2 && static_cast<int64_t>(next.size()) == q,
              "prompt_logprobs: expected logits [q, vocab] and q next ids but got ", logits.sizes(),
              " and ", next.size());
  TORCH_CHECK(n >= 0 && n <= 20, "prompt_logprobs: expected 0..20 alternatives but got ", n);
  const at::Tensor lp = logits.to(at::kFloat).log_softmax(-1);
  const at::Tensor ids = upload(next, logits.device()).unsqueeze(1);
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
