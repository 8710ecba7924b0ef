#pragma once
// The sampling head (docs/sampling.md): every row's next token, its
// log-probability and its top alternatives, picked on the logits' device
// from per-row settings held in preallocated [max_batch] device tensors,
// with one device-to-host copy per step (Note [sampling head]).
//
//   SamplingHead head({max_batch, vocab, device});
//   head.set_row(r, sampling, prompt, stop_ids);   // a request takes row r
//   head.pick(logits, takes);                     // [b, vocab], any number of calls
//   const std::vector<Picked> picked = head.fetch(b);   // the one host copy
//
// Generator and the Scheduler own one each. One thread at a time.

#include <statickv/sampling/sampling.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace statickv::reference {

struct SamplingHeadOptions {
  int64_t max_batch = 1;
  int64_t vocab_size = 0;
  at::Device device = at::Device(at::kCPU);
  int64_t max_logprobs = kMaxLogprobs;  ///< widest top-N a row may ask (<= kMaxLogprobs)
  int64_t max_bias = 300;               ///< most logit-bias ids per row
  int64_t max_stop = 16;                ///< most stop ids min_tokens masks per row
  /// A pick is one fused kernel (penalties, greedy and sampled draws, log-
  /// probabilities, bookkeeping) on the CPU and, in a CUDA build, on CUDA;
  /// false: the tensor composition that computes the same, for tests and
  /// the benchmark.
  bool fused = true;
};
class SamplingHead {
 public:
  explicit SamplingHead(const SamplingHeadOptions& options);

  const SamplingHeadOptions& options() const { return options_; }

  /// Row r takes a new request: its settings (checked first, by name),
  /// the prompt its repetition penalty covers and the stop ids min_tokens
  /// masks (at most max_stop when min_tokens > 0). Resets the row's token
  /// marks, penalties and draw index.
  void set_row(int64_t r, const Sampling& s, const std::vector<int64_t>& prompt,
               const std::vector<int64_t>& stop_ids);
  /// Row `to` becomes a copy of row `from` (the Scheduler's row moves).
  void copy_row(int64_t from, int64_t to);
  /// Rows [0, n) become old rows index[0..n) (index: int64 [n], host).
  void reorder(const at::Tensor& index);

  /// Picks the next token of every row r < b with takes[r] from logits [b,
  /// vocab] (float32, the head's device), advancing its marks, penalties
  /// and draw index and writing its result for fetch(); other rows are
  /// untouched.
  /// No host sync.
  void pick(const at::Tensor& logits, const std::vector<bool>& takes);
  /// pick() with every stage run whatever the rows ask, and `takes` an
  /// int64 [b] tensor (1: the row picks) on the head's device: the same
  /// launches for any settings and no host value, so a CUDA graph can
  /// capture it once and replay it as rows' settings change (set_row is a
  /// copy into the tables). Picks what pick() picks.
  void pick_all(const at::Tensor& logits, const at::Tensor& takes);
  /// Speculative verification (Note [sampling head], docs/speculative.md):
  /// for every row r < b with takes[r], the acceptance rule over its drafts
  /// and the target's logits [b, k + 1, vocab] (position t: the logits
  /// after draft t - 1), on the device. Draft t is accepted with
  /// probability min(1, p_t(x_t) / q_t(x_t)), p the row's own
  /// distribution (temperature, top-k, top-p, min-p); at the first
  /// rejection the token comes from norm(max(0, p_t - q_t)), after all k
  /// from p_k. A greedy row accepts exactly the drafts that equal the
  /// target's argmax. The draws are counter-based (seed, draw index,
  /// position), so a row verifies alone as in any batch. fetch() then
  /// returns each row's accepted count and token; the row's draw index
  /// advances by the tokens it emits. No host sync. Refuses rows with
  /// penalties, logit bias, min_tokens or log-probabilities, naming those
  /// settings.
  void verify(const at::Tensor& logits, const DraftSet& drafts, const std::vector<bool>& takes);
  /// verify()'s checks of `drafts` (k per row at most) and of the rows in
  /// `takes`, without verifying: what a caller runs before verify_all.
  void check_verify(int64_t k, const DraftSet& drafts, const std::vector<bool>& takes) const;
  /// verify() inside a captured step: every stage for every row and no
  /// host value. `ids` and `positions` [b, k + 1] are the verification
  /// pass's inputs (a row's drafts are its ids at columns 1..k whose
  /// positions are >= 0), `takes` int64 [b] on the head's device, `q` a
  /// draft model's distributions [b, k, vocab] or undefined (drafts as
  /// point masses). Verifies what verify() verifies; the caller refuses
  /// the rows verify() refuses first (check_verify).
  void verify_all(const at::Tensor& logits, const at::Tensor& ids, const at::Tensor& positions,
                  const at::Tensor& takes, const at::Tensor& q);
  /// Draft `i` of rows [0, b) from a draft model's logits [b, vocab]: each
  /// row's distribution q under its own settings (a point mass for a
  /// greedy row) and a draw from it keyed by (seed, draw index + i) on a
  /// stream of its own. Returns {ids int64 [b], q float32 [b, vocab]} on
  /// the head's device; changes no state.
  std::pair<at::Tensor, at::Tensor> draft(const at::Tensor& logits, int64_t i) const;
  /// Rows [0, b)'s latest picks: one device-to-host copy.
  std::vector<Picked> fetch(int64_t b) const;
  /// Rows [0, b)'s latest picked ids written into `ids` (int64 [b] on the
  /// head's device, b = ids.size(0)) on the device: one kernel, no host
  /// sync, so a captured step can feed its pick back as the next input.
  void copy_picks(const at::Tensor& ids) const;

  /// The distribution rows [0, b) sample from (penalties, bias, min_tokens,
  /// temperature, top-k, top-p, min-p), [b, vocab] float32 in vocabulary
  /// order; a greedy row's is a point mass on its argmax.
  at::Tensor probabilities(const at::Tensor& logits) const;

  /// Each position's log-probability of `next` [q] given logits [q, vocab]
  /// (the prompt token that follows), with the top n alternatives: the
  /// prompt log-probabilities an evaluation scores. One host copy.
  static std::vector<TokenLogprob> prompt_logprobs(const at::Tensor& logits,
                                                   const std::vector<int64_t>& next, int64_t n);

 private:
  struct Rows;   // what rows [0, b) of this call ask for (host side)
  struct Table;  // the settings of the rows a distribution is computed for
  Rows scan(int64_t b, const std::vector<bool>* takes) const;
  Table table(int64_t b) const;
  at::Tensor distribution(const at::Tensor& x, const Table& t, const Rows& rows) const;
  at::Tensor accepted_drafts(const at::Tensor& p, const at::Tensor& d, const at::Tensor& n,
                             const at::Tensor& q, const at::Tensor& key) const;
  void check_logits(const at::Tensor& logits) const;
  void check_verify_logits(const at::Tensor& logits) const;
  void pick_rows(const at::Tensor& logits, const at::Tensor& take, const Rows& rows);
  Rows verified_rows(int64_t b, int64_t k, const DraftSet& drafts,
                     const std::vector<bool>& takes) const;
  void verify_rows(const at::Tensor& logits, const at::Tensor& d, const at::Tensor& n,
                   const at::Tensor& take, const at::Tensor& q, const Rows& rows);
  bool fused() const;  // the fused kernel serves this head's device
  void pick_fused(const at::Tensor& logits, const at::Tensor& take, int64_t logprobs);
  at::Tensor penalized(const at::Tensor& logits, const Rows& rows) const;
  at::Tensor floor(const at::Tensor& scaled, const at::Tensor& top, const Rows& rows,
                   const Table& t) const;
  at::Tensor noise(const at::Tensor& keys) const;
  void mark(const at::Tensor& chosen, const at::Tensor& take, int64_t b);
  at::Tensor column(int64_t c, int64_t b) const;

  SamplingHeadOptions options_;
  at::Tensor params_;     // float32 [B, kParams]: the per-row settings
  at::Tensor keys_;       // int64 [B, 2]: seed key, draw index
  at::Tensor generated_;  // bool [B, vocab]: generated tokens (presence penalty)
  at::Tensor seen_;       // bool [B, vocab]: prompt and generated tokens (repetition penalty)
  at::Tensor penalty_;    // float32 [B, vocab]: presence and frequency penalties so far
  at::Tensor bias_ids_;   // int64 [B, max_bias]
  at::Tensor bias_vals_;  // float32 [B, max_bias]
  at::Tensor stop_ids_;   // int64 [B, max_stop]
  at::Tensor
      out_;  // float32 [B, 3 + 2 * max_logprobs]: id, accepted, logprob, top ids, top logprobs
  at::Tensor hashed_ids_;  // int64 [vocab]: (id * golden) mod 2^32, the draws' per-id input
  at::Tensor scratch_;     // float32 [B, vocab] (fused, CUDA): the penalized logits
  at::Tensor grid_best_, grid_norm_, grid_done_;  // the fused CUDA pick's greedy grid
  std::vector<Sampling> host_;  // each row's settings, for what a call must compute
};

}  // namespace statickv::reference
