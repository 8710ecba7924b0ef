// speculate_n_tokens: draft, verify, emit, roll back (speculative_decode.hpp).
// Everything a step reads back to the host (the target's argmax ids, or its
// probabilities when sampling) is read after the step's passes, as the plain
// decode reads its sampled ids.

#include "speculative_decode.hpp"

#include <algorithm>

namespace statickv::reference::detail {

namespace {

/// Host bookkeeping of one speculative run: positions each cache holds per
/// row (one past the newest), so rollback gets exact lengths.
struct Lengths {
  std::vector<int64_t> target, draft;
};

/// The position of row r's newest token (not yet in the target cache).
int64_t newest(const Rows& rows, const std::vector<int64_t>& lens, size_t r) {
  return lens[r] + static_cast<int64_t>(rows.tokens[r].size()) - 1;
}

/// Drafts a live row may have: the tokens it emits (drafts + 1) stay
/// within its limit.
int64_t allowance(const Call& call, const Rows& rows, size_t r, int64_t k) {
  if (rows.done[r]) return 0;
  return std::min<int64_t>(k, call.new_tokens - static_cast<int64_t>(rows.tokens[r].size()) - 1);
}

std::vector<int64_t> row_ids(const std::vector<int64_t>& prompt, const std::vector<int64_t>& gen) {
  std::vector<int64_t> all(prompt);
  all.insert(all.end(), gen.begin(), gen.end());
  return all;
}

DraftSet lookup_drafts(const Call& call, const Rows& rows,
                       const std::vector<std::vector<int64_t>>& prompts, const Speculator& spec) {
  DraftSet d{std::vector<std::vector<int64_t>>(rows.done.size()), at::Tensor()};
  for (size_t r = 0; r < d.ids.size(); ++r) {
    const int64_t n = allowance(call, rows, r, spec.k);
    if (n > 0) d.ids[r] = prompt_lookup_draft(row_ids(prompts[r], rows.tokens[r]), n, spec.ngram);
  }
  return d;
}

/// One draft-model pass: row r feeds its ids from position lengths.draft[r]
/// up to `upto[r]` (-1: not fed), padded; returns the newest logits [b, vocab].
at::Tensor draft_pass(const Speculator& spec, const std::vector<std::vector<int64_t>>& seqs,
                      const std::vector<int64_t>& upto, Lengths& lengths) {
  const auto b = static_cast<int64_t>(seqs.size());
  int64_t q = 1;
  for (int64_t r = 0; r < b; ++r) q = std::max(q, upto[r] - lengths.draft[r] + 1);
  StepPacker pack(b, q);
  for (int64_t r = 0; r < b; ++r) {
    if (upto[r] < 0) continue;
    const int64_t from = lengths.draft[r];
    for (int64_t p = from; p <= upto[r]; ++p) pack.put(r, p - from, seqs[r][p], p);
    lengths.draft[r] = std::max(lengths.draft[r], upto[r] + 1);
  }
  return run_pass(*spec.draft_model, nullptr, *spec.draft_backend, pack.take(), Logits::kLast);
}

/// Draft-model drafting: up to k autoregressive draft passes; the first
/// feeds each row's ids the draft cache lacks (its newest token, and the
/// last draft when all were accepted), the later ones the previous draft.
/// The head draws each draft from the row's distribution (SamplingHead::draft).
DraftSet model_drafts(Call& call, const Rows& rows,
                      const std::vector<std::vector<int64_t>>& prompts, const Speculator& spec,
                      Lengths& lengths) {
  const size_t b = rows.done.size();
  DraftSet d{std::vector<std::vector<int64_t>>(b), at::Tensor()};
  std::vector<std::vector<int64_t>> seqs(b);
  std::vector<int64_t> want(b);
  std::vector<at::Tensor> qs;
  for (size_t r = 0; r < b; ++r) {
    want[r] = allowance(call, rows, r, spec.k);
    seqs[r] = row_ids(prompts[r], rows.tokens[r]);
  }
  for (int64_t i = 0; i < *std::max_element(want.begin(), want.end()); ++i) {
    std::vector<int64_t> upto(b, -1);
    for (size_t r = 0; r < b; ++r)
      upto[r] = want[r] > i ? static_cast<int64_t>(seqs[r].size()) - 1 : -1;
    auto [ids, q] = call.head->draft(draft_pass(spec, seqs, upto, lengths).to(at::kFloat), i);
    const at::Tensor host = ids.cpu().contiguous();
    const int64_t* next = host.data_ptr<int64_t>();
    qs.push_back(q);
    for (size_t r = 0; r < b; ++r) {
      if (want[r] <= i) continue;
      d.ids[r].push_back(next[r]);
      seqs[r].push_back(d.ids[r].back());
    }
  }
  d.q = draft_distributions(qs, spec.k);
  return d;
}

/// The verification pass and the head's acceptance rule: row r feeds its
/// newest token and its drafts at consecutive positions, padded with -1 to
/// k + 1 tokens. Returns every token's logits [b, k + 1, vocab].
at::Tensor verify(const Call& call, const Rows& rows, const std::vector<int64_t>& lens,
                  const DraftSet& d, int64_t k) {
  const auto b = static_cast<int64_t>(rows.done.size());
  StepPacker pack(b, k + 1);
  for (int64_t r = 0; r < b; ++r) {
    if (rows.done[r]) continue;
    const int64_t start = newest(rows, lens, r);
    pack.put(r, 0, rows.tokens[r].back(), start);
    for (size_t t = 1; t <= d.ids[r].size(); ++t) {
      pack.put(r, static_cast<int64_t>(t), d.ids[r][t - 1], start + static_cast<int64_t>(t));
    }
  }
  return call.verify(pack.take(), d, rows.live());
}

/// Emits every row's verdict (the head's, from verify()'s acceptance rule
/// on the device; until the row is done), counts drafts and acceptances and
/// records how many positions each cache keeps. Returns true when some
/// cache holds rejected drafts to roll back.
bool emit_verdicts(Call& call, Rows& rows, const std::vector<int64_t>& lens, const DraftSet& d,
                   const at::Tensor& logits, Lengths& lengths, SpeculationStats& stats) {
  const std::vector<Picked> verdicts = call.head->fetch(static_cast<int64_t>(rows.done.size()));
  const at::Tensor all = call.options.record_logits ? logits.cpu() : at::Tensor();
  bool rejected = false;
  for (size_t r = 0; r < rows.done.size(); ++r) {
    if (rows.done[r]) continue;
    const Picked& v = verdicts[r];
    const int64_t kept = newest(rows, lens, r) + v.accepted + 1;
    rejected = rejected || v.accepted < static_cast<int64_t>(d.ids[r].size());
    lengths.target[r] = kept;
    lengths.draft[r] = std::min(lengths.draft[r], kept);
    stats.drafted += static_cast<int64_t>(d.ids[r].size());
    stats.accepted += v.accepted;
    std::vector<int64_t> tokens(d.ids[r].begin(), d.ids[r].begin() + v.accepted);
    tokens.push_back(v.token);
    const at::Tensor row = all.defined() ? all[static_cast<int64_t>(r)] : at::Tensor();
    for (size_t t = 0; t < tokens.size() && !rows.done[r]; ++t) {
      call.emit(rows, r, tokens[t], row.defined() ? row[static_cast<int64_t>(t)] : row);
    }
  }
  return rejected;
}

}  // namespace

SpeculationStats speculate_n_tokens(Call& call, Rows& rows,
                                    const std::vector<std::vector<int64_t>>& prompts,
                                    const std::vector<int64_t>& lens, const Speculator& spec) {
  SpeculationStats stats;
  Lengths lengths{lens, lens};
  const int64_t planned = call.new_tokens - 1;
  while (!rows.all_done()) {
    const DraftSet d = spec.draft_model ? model_drafts(call, rows, prompts, spec, lengths)
                                        : lookup_drafts(call, rows, prompts, spec);
    const at::Tensor logits = verify(call, rows, lens, d, spec.k);
    const std::vector<int64_t> drafted = lengths.draft;
    const bool rejected = emit_verdicts(call, rows, lens, d, logits, lengths, stats);
    // Rejected drafts leave both caches (Note [ring rollback]).
    if (rejected) spec.cache->rollback(lengths.target);
    if (spec.draft_cache && lengths.draft != drafted) spec.draft_cache->rollback(lengths.draft);
    ++stats.verify_steps;
    if (call.options.on_step) {
      size_t most = 0;
      for (const auto& t : rows.tokens) most = std::max(most, t.size());
      call.options.on_step(static_cast<int64_t>(most) - 1, planned);
    }
  }
  return stats;
}

}  // namespace statickv::reference::detail
