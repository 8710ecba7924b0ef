// Scheduler: the continuous-batching step loop over one cache (policy:
// docs/serving.md). A step admits waiting requests into free rows, feeds
// prompt chunks (admission order, under the token budget) to the prefill
// region [0, prefilling) in one runner call and every decoding row's newest
// token in another, picks the next token of every row that finished its
// prompt or decoded, moves rows whose prompt is complete into the decode
// region and retires finished rows by moving the last row into each hole.
// Under speculation the decode call verifies each row's drafts; a draft
// model's cache follows every row operation (RowTable) and prefill call.

#include "prefix_pool.hpp"
#include "state.hpp"

#include <statickv/cache.hpp>
#include <statickv/reference/speculative.hpp>

#include <c10/core/InferenceMode.h>

#include <algorithm>

namespace statickv::reference {

using serving_detail::Active;
using serving_detail::RowTable;

struct Scheduler::State {
  const LlamaModel& model;
  SchedulerOptions options;
  // The head outlives the engine, whose runners' steps may pick with it.
  std::unique_ptr<SamplingHead> head;  // every row's pick, on the cache's device
  std::unique_ptr<Engine> engine;      // the cache, backends and runners (draft model's too)
  std::unique_ptr<RowTable> table;     // rows()[r] lives in cache row r
  std::unique_ptr<serving_detail::PrefixPool> prefix;  // null: the prefix cache is off
  std::deque<Active> waiting;
  std::vector<Completion> finished;
  SchedulerStats stats;
  double last_step_seconds = 0;  // Scheduler::last_step_seconds()
};

namespace {

/// Note [prefix cache]: the combinations the pool cannot serve. An
/// explicit budget is refused with them; the default turns itself off.
void check_prefix_options(SchedulerOptions& o) {
  TORCH_CHECK(o.prefix_cache_bytes >= -1, "prefix_cache_bytes: expected >= 0 (0 = off) or -1 ",
              "(the default: the cache's bytes) but got ", o.prefix_cache_bytes);
  TORCH_CHECK(o.prefix_block >= 1, "prefix_block: expected >= 1 but got ", o.prefix_block);
  const bool quantized = o.kv_storage != KvStorage::kCompute;
  if (o.prefix_cache_bytes == -1 && (quantized || o.draft_model)) o.prefix_cache_bytes = 0;
  TORCH_CHECK(o.prefix_cache_bytes == 0 || !quantized,
              "prefix_cache_bytes: expected 0 with kv_storage=", to_string(o.kv_storage),
              " (row snapshots support plain storage only) but got ", o.prefix_cache_bytes);
  TORCH_CHECK(o.prefix_cache_bytes == 0 || !o.draft_model,
              "prefix_cache_bytes: expected 0 with a draft_model (its cache would need the same "
              "prefix) but got ",
              o.prefix_cache_bytes);
}

/// Resolves the Scheduler's own defaults and checks its own fields; what
/// it shares with Generator (the cache kind against the model, the draft
/// model, attend_buckets) the Engine checks and resolves.
SchedulerOptions resolved(SchedulerOptions o) {
  TORCH_CHECK(o.max_batch >= 1, "max_batch: expected >= 1 but got ", o.max_batch);
  TORCH_CHECK(o.max_len >= 2, "max_len: expected >= 2 but got ", o.max_len);
  TORCH_CHECK(o.prefill_chunk >= 0, "prefill_chunk: expected >= 0 (0 = default) but got ",
              o.prefill_chunk);
  const int64_t chunk = std::min(o.prefill_chunk > 0 ? o.prefill_chunk : 64, o.max_len);
  o.prefill_chunk = chunk;
  if (!o.prompt_buckets) o.prompt_buckets = ShapeBuckets::powers_of_two(chunk);
  TORCH_CHECK(o.prompt_buckets->max() >= chunk,
              "prompt_buckets: expected a largest bucket >= ", chunk,
              " (the prefill chunk) but got ", o.prompt_buckets->max());
  TORCH_CHECK(o.speculate >= 0, "speculate: expected >= 0 (0 = off) but got ", o.speculate);
  TORCH_CHECK(o.lookup_ngram >= 1, "lookup_ngram: expected >= 1 but got ", o.lookup_ngram);
  if (o.token_budget == 0) o.token_budget = o.max_batch - 1 + chunk;
  TORCH_CHECK(o.token_budget >= o.max_batch, "token_budget: expected >= max_batch=", o.max_batch,
              " (every decode row and one prompt token) or 0 but got ", o.token_budget);
  check_prefix_options(o);
  return o;
}

}  // namespace

Scheduler::Scheduler(const LlamaModel& model, SchedulerOptions options)
    : state_(new State{model, resolved(std::move(options)), {}, {}, {}, {}, {}, {}, {}}) {
  c10::InferenceMode inference;
  State& s = *state_;
  const SchedulerOptions& o = s.options;
  EngineOptions e;
  static_cast<EngineSettings&>(e) =
      o;  // one runner for decode and prefill: q = 1 is a prompt bucket
  e.max_batch = o.max_batch;
  e.max_len = o.max_len;
  // A full chunk pads to its bucket: the cache must take that many tokens
  // per row in one step (a sliding layer's ring grows by it).
  e.max_chunk = o.prompt_buckets->round_up(o.prefill_chunk, "prompt_buckets");
  TORCH_CHECK(e.max_chunk <= o.max_len, "prompt_buckets: expected the bucket serving a ",
              "full chunk of ", o.prefill_chunk, " tokens to be <= max_len=", o.max_len,
              " but got ", e.max_chunk);
  e.prefill_chunk = o.prefill_chunk;
  SamplingHeadOptions head;
  head.max_batch = o.max_batch;
  head.vocab_size = model.config().vocab_size;
  head.device = model.device();
  s.head = std::make_unique<SamplingHead>(head);
  s.engine = std::make_unique<Engine>(model, e, s.head.get());
  s.options.attend_buckets = s.engine->options().attend_buckets;  // options() shows the default
  s.table = std::make_unique<RowTable>(s.engine->cache(), s.engine->draft_cache(), *s.head);
  s.stats.max_batch = o.max_batch;
  if (o.prefix_cache_bytes != 0) {
    const Cache& cache = s.engine->cache();
    // A restored entry is rolled back to the shared length: any depth for
    // full layers, max_chunk for rings (Note [ring rollback]).
    const int64_t rollback =
        s.model.config().has_sliding() ? cache.config().effective_max_chunk() : o.max_len;
    const int64_t budget = o.prefix_cache_bytes > 0 ? o.prefix_cache_bytes : cache.memory_bytes();
    s.options.prefix_cache_bytes = budget;
    s.prefix = std::make_unique<serving_detail::PrefixPool>(budget, o.prefix_block, rollback);
  }
}

Scheduler::~Scheduler() = default;

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

/// The decode rows' call: q = 1, or under speculation each row's newest
/// token and its drafts (q = speculate + 1).
struct DecodeCall {
  at::Tensor logits;  // [b, vocab], or [b, k + 1, vocab]
  DraftSet drafts;    // speculation only
};

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

// Not in the anonymous namespace: it names the private State.
struct SchedulerSteps {
  /// Accounts for one call's real and padded tokens.
  static void count(Scheduler::State& s, Pass pass, const StepInputs& in) {
    const int64_t b = in.ids.size(0), q = in.ids.size(1);
    GraphRunner* runner = s.engine->runner(pass);
    const GraphKey key = runner ? runner->key_for(b, q, in.attend) : GraphKey{b, q, in.attend};
    s.stats.real_tokens += in.real;
    s.stats.padded_tokens += key.batch * key.query_len - in.real;
  }

  /// run() with the head's pick of the rows in `takes` (inside the runner's
  /// step where the engine puts it there); each row's newest logits.
  static at::Tensor run_and_pick(Scheduler::State& s, Pass pass, const StepInputs& in,
                                 const std::vector<bool>& takes) {
    count(s, pass, in);
    return s.engine->run_and_pick(pass, in, takes);
  }

  /// The verification call with the head's acceptance rule over `drafts`
  /// (inside the runner's step where the engine puts it there).
  static at::Tensor run_and_verify(Scheduler::State& s, const StepInputs& in,
                                   const DraftSet& drafts, const std::vector<bool>& takes) {
    count(s, Pass::kVerify, in);
    return s.engine->run_and_verify(in, drafts, takes);
  }

  /// The decode call: every decoding row's newest token, or under
  /// speculation its newest token and drafts (prompt lookup or the draft
  /// model); the head picks, or verifies, for every decoding row.
  static DecodeCall decode(Scheduler::State& s, RowTable& table) {
    DecodeCall out;
    const int64_t k = s.options.speculate;
    std::vector<bool> takes(table.live(), false);
    std::fill(takes.begin() + static_cast<int64_t>(table.prefilling()), takes.end(), true);
    if (k == 0) {
      out.logits = run_and_pick(s, Pass::kDecode, pack_decode(table), takes);
    } else {
      if (s.options.draft_model) {
        out.drafts = serving_detail::model_drafts(table, *s.engine, *s.head, k);
      } else {
        out.drafts.ids.resize(table.live());
        for (size_t r = table.prefilling(); r < table.live(); ++r) {
          out.drafts.ids[r] =
              serving_detail::lookup_drafts(table.rows()[r], k, s.options.lookup_ngram);
        }
      }
      // The acceptance rule on the device; fetch() reads its verdicts.
      out.logits = run_and_verify(s, serving_detail::pack_verify(table, out.drafts.ids, k),
                                  out.drafts, takes);
      ++s.stats.speculation.verify_steps;
    }
    return out;
  }

  /// The prefill call over rows [0, b), fed to the draft model's cache too
  /// (eagerly); the head picks the first token of each row whose prompt
  /// ends in it. A row asking for prompt log-probabilities makes the call
  /// eager at every position (the runner returns the last position's).
  static void prefill(Scheduler::State& s, const std::vector<int64_t>& fed, int64_t b) {
    RowTable& table = *s.table;
    const StepInputs in = pack_prefill(table, fed, b);
    bool every_position = false;
    for (int64_t r = 0; r < b; ++r)
      every_position =
          every_position || table.rows()[static_cast<size_t>(r)].request.prompt_logprobs >= 0;
    if (every_position) {
      prefill_every_position(s, in, fed, b);
    } else {
      run_and_pick(s, Pass::kPrefill, in, prompt_ends(table, fed, b));
    }
    if (s.options.draft_model) s.engine->run_draft(in);
  }

  /// An eager prefill with every position's logits: the prompt
  /// log-probabilities, then the head's pick from each row's last fed one.
  static void prefill_every_position(Scheduler::State& s, const StepInputs& in,
                                     const std::vector<int64_t>& fed, int64_t b) {
    RowTable& table = *s.table;
    s.stats.real_tokens += in.real;
    s.stats.padded_tokens += in.ids.numel() - in.real;
    const at::Tensor all = run_pass(s.model, nullptr, s.engine->backend(), in, Logits::kAll);
    record_prompt_logprobs(table, fed, all);
    std::vector<int64_t> ends(fed.begin(), fed.begin() + b);
    for (int64_t& e : ends) e = std::max<int64_t>(e - 1, 0);
    const at::Tensor at = at::tensor(ends).to(all.device());
    const at::Tensor last = all.gather(1, at.view({b, 1, 1}).expand({b, 1, all.size(2)}));
    s.head->pick(last.squeeze(1), prompt_ends(table, fed, b));
  }

  /// Note [prefix cache]: the new request in row r starts from the longest
  /// prefix it shares with a saved one (restored, then rolled back to the
  /// shared length) and prefills only the rest.
  static void reuse_prefix(Scheduler::State& s, size_t r) {
    if (!s.prefix) return;
    Active& row = s.table->rows()[r];
    if (row.request.prompt_logprobs >= 0) return;  // every prompt token is scored
    const serving_detail::PrefixMatch match = s.prefix->find(row.request.prompt);
    if (match.state == nullptr) return;
    Cache& cache = s.engine->cache();
    const auto i = static_cast<int64_t>(r);
    cache.restore_row(*match.state, i);
    if (match.reused < match.state->length) {
      const at::Tensor lengths = cache.seq_lengths().narrow(0, 0, i + 1).cpu();
      std::vector<int64_t> kept(lengths.data_ptr<int64_t>(), lengths.data_ptr<int64_t>() + i + 1);
      kept[r] = match.reused;
      cache.rollback(kept);
    }
    row.prompt_done = match.reused;
    ++s.stats.prefix_hits;
    s.stats.prefix_tokens_reused += match.reused;
  }

  /// Note [prefix cache], shared prompts: a request whose whole prompt a
  /// row is still prefilling waits for that prefill, then starts from the
  /// row the pool saved when it ended (the choices of one `n` prefill their
  /// prompt once). Only where the pool can serve it: on, a prompt longer
  /// than one block, no prompt log-probabilities on either side.
  static bool waits_for_twin(const Scheduler::State& s, const Active& a) {
    const std::vector<int64_t>& prompt = a.request.prompt;
    if (!s.prefix || a.request.prompt_logprobs >= 0 ||
        static_cast<int64_t>(prompt.size()) <= s.options.prefix_block)
      return false;
    const auto& rows = s.table->rows();
    const auto end = rows.begin() + static_cast<std::ptrdiff_t>(s.table->prefilling());
    return std::any_of(rows.begin(), end, [&](const Active& row) {
      return row.request.prompt_logprobs < 0 && row.request.prompt == prompt;
    });
  }

  /// Admits waiting requests, in order, into free rows; a twin of a
  /// prefilling row stays waiting, in its place.
  static void admit(Scheduler::State& s) {
    RowTable& table = *s.table;
    const auto admitted = ServeClock::now();
    for (auto it = s.waiting.begin();
         it != s.waiting.end() && static_cast<int64_t>(table.live()) < s.options.max_batch;) {
      if (waits_for_twin(s, *it)) {
        ++it;
        continue;
      }
      Active a = std::move(*it);
      it = s.waiting.erase(it);
      a.admitted = admitted;
      table.admit(std::move(a));
      reuse_prefix(s, table.prefilling() - 1);
    }
  }

  /// Saves row r's cached tokens (its prompt, and what it generated but
  /// the newest token) to the pool, on the cache's device.
  static void save_prefix(Scheduler::State& s, size_t r) {
    if (!s.prefix) return;
    const Active& row = s.table->rows()[r];
    const Cache& cache = s.engine->cache();
    RowState state = cache.save_row(static_cast<int64_t>(r));
    std::vector<int64_t> tokens = row.request.prompt;
    tokens.insert(tokens.end(), row.tokens.begin(), row.tokens.end());
    if (state.length > static_cast<int64_t>(tokens.size())) return;
    tokens.resize(static_cast<size_t>(state.length));
    s.prefix->insert(std::move(tokens), state.to(cache.config().device));
  }

  /// The draft cache keeps what the target keeps of what it drafted from
  /// (Note [ring rollback]): rejected drafts leave both caches.
  static void roll_back_draft(Scheduler::State& s, const std::vector<int64_t>& kept) {
    Cache* draft_cache = s.engine->draft_cache();
    if (!draft_cache) return;
    std::vector<int64_t> lengths(kept.size());
    bool rejected = false;
    for (size_t r = 0; r < kept.size(); ++r) {
      Active& row = s.table->rows()[r];
      lengths[r] = r < s.table->prefilling() ? row.draft_len : std::min(row.draft_len, kept[r]);
      rejected = rejected || lengths[r] != row.draft_len;
      row.draft_len = lengths[r];
    }
    if (rejected) draft_cache->rollback(lengths);
  }
};

void Scheduler::submit(Request request) {
  State& s = *state_;
  const std::string& id = request.id;
  auto same = [&](const Active& a) { return a.request.id == id; };
  try {
    TORCH_CHECK(std::none_of(s.waiting.begin(), s.waiting.end(), same) &&
                    std::none_of(s.table->rows().begin(), s.table->rows().end(), same),
                "id: expected an id not already waiting or running but got '", id, "'");
    s.waiting.push_back(serving_detail::checked_request(std::move(request), s.model.config(),
                                                        s.options.max_len, s.head->options(),
                                                        s.options.speculate));
  } catch (const c10::Error&) {
    ++s.stats.rejected;
    throw;
  }
  ++s.stats.submitted;
}

namespace {

void count(SchedulerStats& stats, Finish finish) {
  ++(finish == Finish::kCancelled ? stats.cancelled : stats.completed);
}

}  // namespace

bool Scheduler::cancel(const std::string& id) {
  c10::InferenceMode inference;
  State& s = *state_;
  for (auto it = s.waiting.begin(); it != s.waiting.end(); ++it) {
    if (it->request.id != id) continue;
    s.finished.push_back(serving_detail::complete(*it, Finish::kCancelled, ServeClock::now()));
    count(s.stats, Finish::kCancelled);
    s.waiting.erase(it);
    return true;
  }
  for (size_t r = 0; r < s.table->live(); ++r) {
    if (s.table->rows()[r].request.id != id) continue;
    s.finished.push_back(s.table->retire(r, Finish::kCancelled));
    count(s.stats, Finish::kCancelled);
    return true;
  }
  return false;
}

void Scheduler::step() {
  c10::InferenceMode inference;
  State& s = *state_;
  RowTable& table = *s.table;
  const auto started = ServeClock::now();  // admission (prefix restores) included
  SchedulerSteps::admit(s);
  if (table.live() == 0) {
    s.last_step_seconds = 0;  // nothing ran; no step is counted
    return;
  }
  const size_t prefilling = table.prefilling();
  const int64_t decoding = static_cast<int64_t>(table.live() - prefilling);
  const std::vector<int64_t> fed =
      allot(table, s.options.prefill_chunk, s.options.token_budget - decoding);
  int64_t fed_rows = 0;  // one past the last prefilling row fed this step
  for (size_t r = 0; r < fed.size(); ++r)
    fed_rows = fed[r] > 0 ? static_cast<int64_t>(r) + 1 : fed_rows;

  // The head picks from each call's logits before the next call runs (the
  // decode call may reuse the prefill call's runner key and its outputs).
  if (fed_rows > 0) SchedulerSteps::prefill(s, fed, fed_rows);
  const DecodeCall decode = decoding > 0 ? SchedulerSteps::decode(s, table) : DecodeCall{};
  // The step's one device-to-host copy: every row's pick (Note [sampling head]).
  std::vector<Picked> picked = s.head->fetch(static_cast<int64_t>(table.live()));
  ++s.stats.steps;
  s.stats.mixed_steps += fed_rows > 0 && decoding > 0 ? 1 : 0;
  s.stats.row_steps += static_cast<int64_t>(table.live());

  const auto now = ServeClock::now();
  // Under speculation, the positions each row keeps (rejected drafts go).
  std::vector<int64_t> kept(table.live());
  const SpeculationStats& spec = s.stats.speculation;
  const int64_t rejected = spec.drafted - spec.accepted;
  for (size_t r = 0; r < table.live(); ++r) {
    Active& row = table.rows()[r];
    if (r < prefilling) {
      row.prompt_done += fed[r];
      row.draft_len = row.prompt_done;  // the draft model was fed the same chunk
      kept[r] = row.prompt_done;
      if (fed[r] == 0 || !row.decoding()) continue;
      SchedulerSteps::save_prefix(s, r);  // the whole prompt, before its first token
      accept(row, picked[r], now);
    } else if (s.options.speculate > 0) {
      kept[r] = accept_verdict(row, decode.drafts.ids[r], picked[r], now, s.stats.speculation);
    } else {
      accept(row, picked[r], now);
    }
  }
  if (spec.drafted - spec.accepted > rejected) {
    s.engine->cache().rollback(kept);  // Note [ring rollback]
  }                                    // Note [ring rollback]
  SchedulerSteps::roll_back_draft(s, kept);
  table.regroup();
  // Highest row first: a row moved into a hole is never one still to retire.
  for (size_t r = table.live(); r-- > 0;) {
    const std::optional<Finish> done = table.rows()[r].done;
    if (!done) continue;
    if (table.rows()[r].decoding()) SchedulerSteps::save_prefix(s, r);  // a chat's next turn
    s.finished.push_back(table.retire(r, *done));
    count(s.stats, *done);
  }
  s.stats.row_copies = table.row_copies();
  s.last_step_seconds = std::chrono::duration<double>(ServeClock::now() - started).count();
  s.stats.step_seconds += s.last_step_seconds;
}

void Scheduler::run_until_idle() {
  while (!idle()) step();
}

bool Scheduler::idle() const { return state_->waiting.empty() && state_->table->live() == 0; }
int64_t Scheduler::live_rows() const { return static_cast<int64_t>(state_->table->live()); }
int64_t Scheduler::waiting() const { return static_cast<int64_t>(state_->waiting.size()); }

double Scheduler::last_step_seconds() const { return state_->last_step_seconds; }

std::vector<Completion> Scheduler::take_finished() {
  std::vector<Completion> out;
  out.swap(state_->finished);
  return out;
}

void Scheduler::warm_up() {
  c10::InferenceMode inference;
  state_->engine->warm_up();
}

SchedulerStats Scheduler::stats() const {
  SchedulerStats out = state_->stats;
  if (const serving_detail::PrefixPool* p = state_->prefix.get()) {
    out.prefix_bytes = p->bytes();
    out.prefix_budget = p->budget();
    out.prefix_entries = p->entries();
    out.prefix_evictions = p->evictions();
  }
  out.row_copies = state_->table->row_copies();
  if (const GraphRunner* r = state_->engine->runner(Pass::kPrefill)) out.runner = r->stats();
  if (const GraphRunner* r = state_->engine->runner(Pass::kVerify)) out.verify_runner = r->stats();
  return out;
}

const SchedulerOptions& Scheduler::options() const { return state_->options; }
const Cache& Scheduler::cache() const { return state_->engine->cache(); }

GraphKey Scheduler::key_for(int64_t b, int64_t q, int64_t attend_len) const {
  const GraphRunner* runner = state_->engine->runner(Pass::kPrefill);
  TORCH_CHECK(runner != nullptr, "key_for: expected a bucketed scheduler");
  return runner->key_for(b, q, attend_len);
}

}  // namespace statickv::reference
