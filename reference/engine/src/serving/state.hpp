#pragma once
// The Scheduler's rows and requests: Active (a request and what it has
// produced), RowTable (the live rows in their two regions) and the free
// functions over them that the step (scheduler_step.cpp), the request
// checks (requests.cpp) and speculation (speculation.cpp, draft_model.cpp)
// share. The Scheduler's own state is scheduler_state.hpp. Not installed.

#include <statickv/cache.hpp>
#include <statickv/engine/engine.hpp>
#include <statickv/engine/scheduler.hpp>
#include <statickv/engine/speculative.hpp>
#include <statickv/sampling/head.hpp>

#include <ATen/ATen.h>

#include <deque>
#include <memory>
#include <optional>
#include <vector>

namespace statickv::reference::serving_detail {

/// A request and what it has produced so far, waiting or in a cache row.
struct Active {
  Request request;
  std::vector<int64_t> stop;  // resolved: the request's or the model's eos ids
  int64_t prompt_done = 0;    // prompt tokens already in the cache
  int64_t draft_len = 0;      // draft-model drafting: positions in the draft cache
  int64_t cached = 0;         // positions in its cache row, known on the host (save_prefix)
  int64_t written = 0;        // speculation: one past the highest position ever fed, drafts too
  std::vector<int64_t> tokens;
  std::vector<TokenLogprob> logprobs, prompt_logprobs;
  ServeClock::time_point arrival, admitted, first_token;
  std::optional<Finish> done;  // set by the step that finished it

  int64_t prompt_len() const { return static_cast<int64_t>(request.prompt.size()); }
  bool decoding() const { return prompt_done == prompt_len(); }
};

/// The cache rows of the live requests in two regions (Note [live rows are
/// a prefix], docs/serving.md): [0, prefilling) prompts still being fed,
/// [prefilling, live) decoding; every row past live is fresh. Row moves are
/// in-place row operations of the cache (Invariant [stable addresses]),
/// applied to the draft model's cache too when there is one, so its rows
/// mirror the target's.
class RowTable {
 public:
  /// `head`'s rows follow the cache's: a row's settings, token marks and
  /// picks move with it, and an admitted request's settings go into its row.
  RowTable(Cache& cache, Cache* draft, SamplingHead& head) : caches_{&cache}, head_(&head) {
    if (draft) caches_.push_back(draft);
  }

  std::vector<Active>& rows() { return rows_; }
  const std::vector<Active>& rows() const { return rows_; }
  size_t live() const { return rows_.size(); }
  size_t prefilling() const { return prefilling_; }
  int64_t row_copies() const { return copies_; }

  /// A new request takes row `prefilling` (the first decoding row, if any,
  /// moves to row `live`, and the row it leaves is reset).
  void admit(Active request);
  /// Rows whose prompt is now complete leave the prefill region for the
  /// decode region (one reorder of the prefill region, when needed).
  void regroup();
  /// Ends row r: the last row of its region fills the hole, and the last
  /// live row fills the prefill region's hole; the vacated row is reset.
  Completion retire(size_t r, Finish finish);

 private:
  void move_row(size_t from, size_t to);
  void copy_row(size_t from, size_t to);
  void reset_row(size_t r);

  std::vector<Cache*> caches_;  // the target's, then the draft model's
  SamplingHead* head_;
  std::vector<Active> rows_;
  size_t prefilling_ = 0;
  int64_t copies_ = 0;
};

/// Checks a request against the model, the cache and the head (throws
/// FieldError naming the field; under speculation, what only the head
/// does is refused naming speculate) and returns it ready to queue.
Active checked_request(Request request, const ModelConfig& model, int64_t max_len,
                       const SamplingHeadOptions& head, int64_t speculate);

/// Speculation (speculation.cpp): a decoding row's prompt-lookup drafts,
/// at most k and within its token limit.
std::vector<int64_t> lookup_drafts(const Active& row, int64_t k, int64_t ngram);

/// Draft-model drafting (draft_model.cpp): up to k eager calls of the draft
/// model on its cache over rows [0, live); the first feeds each decoding
/// row what its draft cache lacks (its newest token, and the last draft
/// when all were accepted), the later ones the previous draft. The head
/// draws each draft (SamplingHead::draft) and keeps its distribution q.
/// Advances each row's draft_len.
DraftSet model_drafts(RowTable& table, Engine& engine, SamplingHead& head, int64_t k);

/// The verification call: rows [0, live), each decoding row's newest token
/// and drafts at consecutive positions, q = k + 1; the prefill region and
/// the tokens past a row's drafts are padding.
StepInputs pack_verify(const RowTable& table, const std::vector<std::vector<int64_t>>& drafts,
                       int64_t k);

/// The completion of `row` finished for `finish` at `now`.
Completion complete(Active& row, Finish finish, ServeClock::time_point now);

}  // namespace statickv::reference::serving_detail
