// The Scheduler's speculative decoding (state.hpp, docs/speculative.md):
// prompt-lookup drafts, the verification call's inputs, verdicts (draft
// models: draft_model.cpp).

#include "state.hpp"

#include <algorithm>

namespace statickv::reference::serving_detail {

namespace {

/// The position of a decoding row's newest token (not yet in the cache).
int64_t newest(const Active& row) {
  return row.prompt_len() + static_cast<int64_t>(row.tokens.size()) - 1;
}

}  // namespace

std::vector<int64_t> lookup_drafts(const Active& row, int64_t k, int64_t ngram) {
  const int64_t n = std::min<int64_t>(
      k, row.request.max_new_tokens - static_cast<int64_t>(row.tokens.size()) - 1);
  if (n <= 0) return {};
  std::vector<int64_t> ids(row.request.prompt);
  ids.insert(ids.end(), row.tokens.begin(), row.tokens.end());
  return prompt_lookup_draft(ids, n, ngram);
}

StepInputs pack_verify(const RowTable& table, const std::vector<std::vector<int64_t>>& drafts,
                       int64_t k) {
  const auto b = static_cast<int64_t>(table.live());
  StepPacker pack(b, k + 1);
  for (int64_t r = static_cast<int64_t>(table.prefilling()); r < b; ++r) {
    const Active& row = table.rows()[static_cast<size_t>(r)];
    const std::vector<int64_t>& d = drafts[static_cast<size_t>(r)];
    pack.put(r, 0, row.tokens.back(), newest(row));
    for (size_t t = 1; t <= d.size(); ++t) {
      pack.put(r, static_cast<int64_t>(t), d[t - 1], newest(row) + static_cast<int64_t>(t));
    }
  }
  return pack.take();
}

}  // namespace statickv::reference::serving_detail
