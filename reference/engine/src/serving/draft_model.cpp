// The Scheduler's draft-model drafting (state.hpp, docs/speculative.md):
// k small eager calls of the draft model on its own cache, whose rows
// mirror the target cache's rows (RowTable applies every row operation to
// both).

#include "state.hpp"

#include <algorithm>

namespace statickv::reference::serving_detail {

namespace {

/// Drafts a decoding row may have: the tokens it emits stay within its limit.
int64_t allowance(const Active& row, int64_t k) {
  return std::min<int64_t>(
      k, row.request.max_new_tokens - static_cast<int64_t>(row.tokens.size()) - 1);
}

/// A row's ids so far: its prompt, its tokens, then this step's drafts.
std::vector<int64_t> row_ids(const Active& row) {
  std::vector<int64_t> ids(row.request.prompt);
  ids.insert(ids.end(), row.tokens.begin(), row.tokens.end());
  return ids;
}

/// One draft call over rows [0, b): row r feeds seqs[r] from its draft_len
/// to the end when `fed[r]`, else padding. Returns the newest logits [b, vocab].
at::Tensor draft_pass(RowTable& table, Engine& engine,
                      const std::vector<std::vector<int64_t>>& seqs, const std::vector<bool>& fed) {
  const auto b = static_cast<int64_t>(seqs.size());
  int64_t q = 1;
  for (int64_t r = 0; r < b; ++r) {
    const Active& row = table.rows()[static_cast<size_t>(r)];
    if (fed[r]) q = std::max(q, static_cast<int64_t>(seqs[r].size()) - row.draft_len);
  }
  StepPacker pack(b, q);
  for (int64_t r = 0; r < b; ++r) {
    Active& row = table.rows()[static_cast<size_t>(r)];
    if (!fed[r]) continue;
    const auto end = static_cast<int64_t>(seqs[r].size());
    for (int64_t p = row.draft_len; p < end; ++p) pack.put(r, p - row.draft_len, seqs[r][p], p);
    row.draft_len = end;
  }
  return engine.run_draft(pack.take());
}

}  // namespace

DraftSet model_drafts(RowTable& table, Engine& engine, SamplingHead& head, int64_t k) {
  const size_t b = table.live();
  DraftSet d{std::vector<std::vector<int64_t>>(b), at::Tensor()};
  std::vector<std::vector<int64_t>> seqs(b);
  std::vector<at::Tensor> qs;
  std::vector<int64_t> want(b, 0);
  for (size_t r = table.prefilling(); r < b; ++r) {
    want[r] = allowance(table.rows()[r], k);
    seqs[r] = row_ids(table.rows()[r]);
  }
  for (int64_t i = 0; i < *std::max_element(want.begin(), want.end()); ++i) {
    std::vector<bool> fed(b);
    for (size_t r = 0; r < b; ++r) fed[r] = want[r] > i;
    // Draft i of each row: the head's draw from the row's own distribution
    // (its argmax when greedy), keyed by the row's seed and draw index.
    auto [ids, q] = head.draft(draft_pass(table, engine, seqs, fed).to(at::kFloat), i);
    const at::Tensor host = ids.cpu().contiguous();
    const int64_t* drawn = host.data_ptr<int64_t>();
    qs.push_back(q);
    for (size_t r = 0; r < b; ++r) {
      if (!fed[r]) continue;
      const int64_t next = drawn[r];
      d.ids[r].push_back(next);
      seqs[r].push_back(next);
    }
  }
  d.q = draft_distributions(qs, k);
  return d;
}

}  // namespace statickv::reference::serving_detail
