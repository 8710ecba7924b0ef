// Scheduler::State's step (scheduler_state.hpp; policy: docs/serving.md):
// admission, the prefill call over the prefill region and the decode call
// over the decoding rows (or, under speculation, the verification call),
// the one host copy of every row's pick, the rows' new tokens, rollback of
// rejected drafts, regrouping and retirement.

#include "scheduler_state.hpp"

#include <statickv/cache.hpp>

#include <algorithm>
#include <chrono>

namespace statickv::reference {

using serving_detail::Active;
using serving_detail::RowTable;

namespace {

/// Prompt tokens each prefilling row feeds this step: at most `chunk` per
/// row, in admission order (the prefill region's order), while `budget`
/// lasts.
std::vector<int64_t> allot(const RowTable& table, int64_t chunk, int64_t budget) {
  std::vector<int64_t> fed(table.prefilling(), 0);
  for (size_t r = 0; r < fed.size(); ++r) {
    const Active& row = table.rows()[r];
    fed[r] = std::min({row.prompt_len() - row.prompt_done, chunk, budget});
    budget -= fed[r];
  }
  return fed;
}

/// The prefill call: rows [0, b) of the prefill region, each row's chunk
/// from column 0, position -1 past it (b: one past the last row fed).
StepInputs pack_prefill(const RowTable& table, const std::vector<int64_t>& fed, int64_t b) {
  StepPacker pack(b, *std::max_element(fed.begin(), fed.begin() + b));
  for (int64_t r = 0; r < b; ++r) {
    const Active& row = table.rows()[static_cast<size_t>(r)];
    pack.put_run(r, row.request.prompt, row.prompt_done, fed[r]);
  }
  return pack.take();
}

/// The decode call: rows [0, live) at q = 1, the prefill region as padding.
StepInputs pack_decode(const RowTable& table) {
  StepPacker pack(static_cast<int64_t>(table.live()), 1);
  for (size_t r = table.prefilling(); r < table.live(); ++r) {
    const Active& row = table.rows()[r];
    pack.put(static_cast<int64_t>(r), 0, row.tokens.back(),
             row.prompt_len() + static_cast<int64_t>(row.tokens.size()) - 1);
  }
  return pack.take();
}

bool is_stop(const Active& row, int64_t token) {
  return std::find(row.stop.begin(), row.stop.end(), token) != row.stop.end();
}

/// Gives `row` its next token and marks it done
/// when the token is a stop id or the last one it may have.
void emit(Active& row, int64_t token, ServeClock::time_point now) {
  if (row.tokens.empty()) row.first_token = now;
  row.tokens.push_back(token);
  if (row.request.on_token) row.request.on_token(row.request.id, token);
  if (is_stop(row, token)) {
    row.done = Finish::kStop;
  } else if (static_cast<int64_t>(row.tokens.size()) >= row.request.max_new_tokens) {
    row.done = Finish::kLength;
  }
}

/// Emits the head's pick for `row`, with its log-probability when asked.
void accept(Active& row, Picked& picked, ServeClock::time_point now) {
  if (row.request.sampling.logprobs >= 0) {
    row.logprobs.push_back(std::move(picked.logprob));
    if (row.request.on_logprob) row.request.on_logprob(row.request.id, row.logprobs.back());
  }
  emit(row, picked.token, now);
}

/// The rows of the prefill call whose prompt ends in it: they take a token.
std::vector<bool> prompt_ends(const RowTable& table, const std::vector<int64_t>& fed, int64_t b) {
  std::vector<bool> takes(static_cast<size_t>(b));
  for (size_t r = 0; r < takes.size(); ++r) {
    const Active& row = table.rows()[r];
    takes[r] = fed[r] > 0 && row.prompt_done + fed[r] == row.prompt_len();
  }
  return takes;
}

/// Each prompt_logprobs row's log-probabilities of the prompt tokens after
/// its chunk's positions, from every position's logits [b, q, vocab].
void record_prompt_logprobs(RowTable& table, const std::vector<int64_t>& fed,
                            const at::Tensor& logits) {
  for (int64_t r = 0; r < logits.size(0); ++r) {
    Active& row = table.rows()[static_cast<size_t>(r)];
    if (row.request.prompt_logprobs < 0 || fed[r] == 0) continue;
    std::vector<int64_t> next;
    for (int64_t g = row.prompt_done + 1; g < row.prompt_done + fed[r] + 1 && g < row.prompt_len();
         ++g) {
      next.push_back(row.request.prompt[static_cast<size_t>(g)]);
    }
    if (next.empty()) continue;
    const auto n = static_cast<int64_t>(next.size());
    for (TokenLogprob& p : SamplingHead::prompt_logprobs(logits[r].narrow(0, 0, n), next,
                                                         row.request.prompt_logprobs)) {
      row.prompt_logprobs.push_back(std::move(p));
    }
  }
}

/// Emits a speculating row's verdict (the head's: its accepted drafts, then
/// its token) until the row is done; returns the positions its cache row
/// keeps (its newest token and accepted drafts).
int64_t accept_verdict(Active& row, const std::vector<int64_t>& drafts, const Picked& verdict,
                       ServeClock::time_point now, SpeculationStats& stats) {
  const int64_t kept = row.prompt_len() + static_cast<int64_t>(row.tokens.size()) - 1;
  stats.drafted += static_cast<int64_t>(drafts.size());
  stats.accepted += verdict.accepted;
  for (int64_t t = 0; t < verdict.accepted && !row.done; ++t)
    emit(row, drafts[static_cast<size_t>(t)], now);
  if (!row.done) emit(row, verdict.token, now);
  return kept + verdict.accepted + 1;
}

}  // namespace

void Scheduler::State::step() {
  RowTable& t = *table;
  const auto started = ServeClock::now();  // admission (prefix restores) included
  admit();
  if (t.live() == 0) {
    last_step_seconds = 0;  // nothing ran; no step is counted
    return;
  }
  const size_t prefilling = t.prefilling();
  const int64_t decoding = static_cast<int64_t>(t.live() - prefilling);
  // The token budget bounds what decoding rows wait for; while fewer rows
  // decode than wait on their prompt, the stall falls on the few and the
  // step keeps to the burst budget (docs/serving.md, "Token budget").
  const int64_t budget =
      (decoding >= static_cast<int64_t>(prefilling) ? options.token_budget : options.burst_budget) -
      decoding;
  const std::vector<int64_t> fed = allot(t, options.prefill_chunk, budget);
  int64_t fed_rows = 0;  // one past the last prefilling row fed this step
  for (size_t r = 0; r < fed.size(); ++r)
    fed_rows = fed[r] > 0 ? static_cast<int64_t>(r) + 1 : fed_rows;

  // The head picks from each call's logits before the next call runs (the
  // decode call may reuse the prefill call's runner key and its outputs).
  if (fed_rows > 0) prefill(fed, fed_rows);
  const DecodeCall decoded = decoding > 0 ? decode() : DecodeCall{};
  // The step's one device-to-host copy: every row's pick (Note [sampling head]).
  std::vector<Picked> picked = head->fetch(static_cast<int64_t>(t.live()));
  ++stats.steps;
  stats.mixed_steps += fed_rows > 0 && decoding > 0 ? 1 : 0;
  stats.row_steps += static_cast<int64_t>(t.live());

  const SpeculationStats& spec = stats.speculation;
  const int64_t rejected = spec.drafted - spec.accepted;
  const std::vector<int64_t> kept = settle(fed, prefilling, decoded, picked);
  if (spec.drafted - spec.accepted > rejected) {
    engine->cache().rollback(kept);  // Note [ring rollback]
  }
  roll_back_draft(kept);
  t.regroup();
  retire_finished();
  stats.row_copies = t.row_copies();
  last_step_seconds = std::chrono::duration<double>(ServeClock::now() - started).count();
  stats.step_seconds += last_step_seconds;
}

std::vector<int64_t> Scheduler::State::settle(const std::vector<int64_t>& fed, size_t prefilling,
                                              const DecodeCall& decoded,
                                              std::vector<Picked>& picked) {
  RowTable& t = *table;
  const auto now = ServeClock::now();
  std::vector<int64_t> kept(t.live());
  for (size_t r = 0; r < t.live(); ++r) {
    Active& row = t.rows()[r];
    if (r < prefilling) {
      row.prompt_done += fed[r];
      row.draft_len = row.prompt_done;  // the draft model was fed the same chunk
      row.cached = kept[r] = row.prompt_done;
      if (fed[r] == 0 || !row.decoding()) continue;
      save_prefix(r);  // the whole prompt, before its first token
      accept(row, picked[r], now);
    } else if (options.speculate > 0) {
      const std::vector<int64_t>& drafts = decoded.drafts.ids[r];
      const auto fed_to = static_cast<int64_t>(row.tokens.size() + drafts.size());
      row.written = std::max(row.written, row.prompt_len() + fed_to);
      kept[r] = accept_verdict(row, drafts, picked[r], now, stats.speculation);
      row.cached = kept[r];  // what the rollback after settle() leaves
    } else {
      accept(row, picked[r], now);
      row.cached =
          row.prompt_len() + static_cast<int64_t>(row.tokens.size()) - 1;  // not the newest
    }
  }
  return kept;
}

void Scheduler::State::retire_finished() {
  RowTable& t = *table;
  for (size_t r = t.live(); r-- > 0;) {
    const std::optional<Finish> done = t.rows()[r].done;
    if (!done) continue;
    if (t.rows()[r].decoding()) save_prefix(r);  // a chat's next turn
    finished.push_back(t.retire(r, *done));
    count_finished(*done);
  }
}

void Scheduler::State::count_tokens(Pass pass, const StepInputs& in) {
  const int64_t b = in.ids.size(0), q = in.ids.size(1);
  GraphRunner* runner = engine->runner(pass);
  const GraphKey key = runner ? runner->key_for(b, q, in.attend) : GraphKey{b, q, in.attend};
  stats.real_tokens += in.real;
  stats.padded_tokens += key.batch * key.query_len - in.real;
}

at::Tensor Scheduler::State::run_and_pick(Pass pass, const StepInputs& in,
                                          const std::vector<bool>& takes) {
  count_tokens(pass, in);
  return engine->run_and_pick(pass, in, takes);
}

at::Tensor Scheduler::State::run_and_verify(const StepInputs& in, const DraftSet& drafts,
                                            const std::vector<bool>& takes) {
  count_tokens(Pass::kVerify, in);
  return engine->run_and_verify(in, drafts, takes);
}

DecodeCall Scheduler::State::decode() {
  RowTable& t = *table;
  DecodeCall out;
  const int64_t k = options.speculate;
  std::vector<bool> takes(t.live(), false);
  std::fill(takes.begin() + static_cast<int64_t>(t.prefilling()), takes.end(), true);
  if (k == 0) {
    out.logits = run_and_pick(Pass::kDecode, pack_decode(t), takes);
  } else {
    if (options.draft_model) {
      out.drafts = serving_detail::model_drafts(t, *engine, *head, k);
    } else {
      out.drafts.ids.resize(t.live());
      for (size_t r = t.prefilling(); r < t.live(); ++r) {
        out.drafts.ids[r] = serving_detail::lookup_drafts(t.rows()[r], k, options.lookup_ngram);
      }
    }
    // The acceptance rule on the device; fetch() reads its verdicts.
    out.logits =
        run_and_verify(serving_detail::pack_verify(t, out.drafts.ids, k), out.drafts, takes);
    ++stats.speculation.verify_steps;
  }
  return out;
}

void Scheduler::State::prefill(const std::vector<int64_t>& fed, int64_t b) {
  RowTable& t = *table;
  const StepInputs in = pack_prefill(t, fed, b);
  bool every_position = false;
  for (int64_t r = 0; r < b; ++r)
    every_position =
        every_position || t.rows()[static_cast<size_t>(r)].request.prompt_logprobs >= 0;
  if (every_position) {
    prefill_every_position(in, fed, b);
  } else {
    run_and_pick(Pass::kPrefill, in, prompt_ends(t, fed, b));
  }
  if (options.draft_model) engine->run_draft(in);
}

void Scheduler::State::prefill_every_position(const StepInputs& in, const std::vector<int64_t>& fed,
                                              int64_t b) {
  RowTable& t = *table;
  stats.real_tokens += in.real;
  stats.padded_tokens += in.ids.numel() - in.real;
  const at::Tensor all = run_pass(model, nullptr, engine->backend(), in, Logits::kAll);
  record_prompt_logprobs(t, fed, all);
  std::vector<int64_t> ends(fed.begin(), fed.begin() + b);
  for (int64_t& e : ends) e = std::max<int64_t>(e - 1, 0);
  const at::Tensor at = at::tensor(ends).to(all.device());
  const at::Tensor last = all.gather(1, at.view({b, 1, 1}).expand({b, 1, all.size(2)}));
  head->pick(last.squeeze(1), prompt_ends(t, fed, b));
}

void Scheduler::State::roll_back_draft(const std::vector<int64_t>& kept) {
  Cache* draft_cache = engine->draft_cache();
  if (!draft_cache) return;
  std::vector<int64_t> lengths(kept.size());
  bool rejected = false;
  for (size_t r = 0; r < kept.size(); ++r) {
    Active& row = table->rows()[r];
    lengths[r] = r < table->prefilling() ? row.draft_len : std::min(row.draft_len, kept[r]);
    rejected = rejected || lengths[r] != row.draft_len;
    row.draft_len = lengths[r];
  }
  if (rejected) draft_cache->rollback(lengths);
}

}  // namespace statickv::reference
