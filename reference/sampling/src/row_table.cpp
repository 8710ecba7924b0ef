// The sampling head's row table (Note [sampling head]): every per-row
// setting in a preallocated [max_batch] tensor on the head's device, set
// when a request takes a row, moved with the Scheduler's rows, and scanned
// on the host for the stages a call must run.

#include <statickv/kernel_switches.hpp>

#include "draws.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

namespace statickv::reference {

using namespace detail;  // the tables' columns (Param, Key), the draws and upload

SamplingHead::SamplingHead(const SamplingHeadOptions& options) : options_(options) {
  const SamplingHeadOptions& o = options_;
  TORCH_CHECK(o.max_batch >= 1, "max_batch: expected >= 1 but got ", o.max_batch);
  TORCH_CHECK(o.vocab_size >= 1 && o.vocab_size <= (int64_t{1} << 24),
              "vocab_size: expected 1..2^24 (ids travel as float32) but got ", o.vocab_size);
  TORCH_CHECK(o.max_logprobs >= 0 && o.max_logprobs <= kMaxLogprobs, "max_logprobs: expected 0..",
              kMaxLogprobs, " but got ", o.max_logprobs);
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
  TORCH_CHECK(index.device().is_cpu() && index.scalar_type() == at::kLong && index.dim() == 1,
              "index: expected a host int64 [n] tensor but got ", index.scalar_type(), " ",
              index.sizes(), " on ", index.device());
  const int64_t n = index.size(0);
  const at::Tensor on_device = index.to(options_.device);
  for (at::Tensor* t : {&params_, &keys_, &generated_, &seen_, &penalty_, &bias_ids_, &bias_vals_,
                        &stop_ids_, &out_}) {
    t->narrow(0, 0, n).copy_(t->index_select(0, on_device));
  }
  // index is on the host: read it there, one element at a time would
  // dispatch an item() each.
  const at::Tensor order = index.contiguous();
  const int64_t* from = order.const_data_ptr<int64_t>();
  std::vector<Sampling> moved;
  for (int64_t i = 0; i < n; ++i) moved.push_back(host_[static_cast<size_t>(from[i])]);
  std::copy(moved.begin(), moved.end(), host_.begin());
}

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

SamplingHead::Table SamplingHead::table(int64_t b) const {
  return {params_.narrow(0, 0, b), keys_.narrow(0, 0, b)};
}

}  // namespace statickv::reference
