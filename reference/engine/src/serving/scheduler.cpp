// Scheduler: the continuous-batching step loop over one cache (policy:
// docs/serving.md). This file resolves its options, builds its state
// (Scheduler::State, scheduler_state.hpp) and answers the public calls;
// the step is scheduler_step.cpp. A step admits waiting requests into free rows, feeds
// prompt chunks (admission order, under the token budget) to the prefill
// region [0, prefilling) in one runner call and every decoding row's newest
// token in another, picks the next token of every row that finished its
// prompt or decoded, moves rows whose prompt is complete into the decode
// region and retires finished rows by moving the last row into each hole.
// Under speculation the decode call verifies each row's drafts; a draft
// model's cache follows every row operation (RowTable) and prefill call.

#include "scheduler_state.hpp"

#include <statickv/cache.hpp>
#include <statickv/support/field_error.hpp>

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>

namespace statickv::reference {

using serving_detail::Active;
using serving_detail::RowTable;

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
  resolve_step_budgets(o);
  const int64_t chunk = o.prefill_chunk;
  if (!o.prompt_buckets) o.prompt_buckets = ShapeBuckets::powers_of_two(chunk);
  TORCH_CHECK(o.prompt_buckets->max() >= chunk,
              "prompt_buckets: expected a largest bucket >= ", chunk,
              " (the prefill chunk) but got ", o.prompt_buckets->max());
  TORCH_CHECK(o.speculate >= 0, "speculate: expected >= 0 (0 = off) but got ", o.speculate);
  TORCH_CHECK(o.lookup_ngram >= 1, "lookup_ngram: expected >= 1 but got ", o.lookup_ngram);
  TORCH_CHECK(o.token_budget >= o.max_batch, "token_budget: expected >= max_batch=", o.max_batch,
              " (every decode row and one prompt token) or 0 but got ", o.token_budget);
  TORCH_CHECK(o.burst_budget >= o.token_budget,
              "burst_budget: expected >= token_budget=", o.token_budget,
              " (a burst's step is never smaller than another) or 0 but got ", o.burst_budget);
  check_prefix_options(o);
  return o;
}

}  // namespace

void resolve_step_budgets(SchedulerOptions& o) {
  o.prefill_chunk = std::min<int64_t>(o.prefill_chunk > 0 ? o.prefill_chunk : 64, o.max_len);
  if (o.token_budget == 0) o.token_budget = o.max_batch - 1 + o.prefill_chunk;
  if (o.burst_budget == 0) {
    o.burst_budget = std::max(o.token_budget, o.max_batch * o.prefill_chunk);
  }
}

Scheduler::State::State(const LlamaModel& target, SchedulerOptions requested)
    : model(target), options(resolved(std::move(requested))) {
  c10::InferenceMode inference;
  const SchedulerOptions& o = options;
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
  SamplingHeadOptions head_options;
  head_options.max_batch = o.max_batch;
  head_options.vocab_size = model.config().vocab_size;
  head_options.device = model.device();
  head = std::make_unique<SamplingHead>(head_options);
  engine = std::make_unique<Engine>(model, e, head.get());
  options.attend_buckets = engine->options().attend_buckets;  // options() shows the default
  table = std::make_unique<RowTable>(engine->cache(), engine->draft_cache(), *head);
  stats.max_batch = o.max_batch;
  if (o.fit_threads) {
    TORCH_CHECK(model.device().is_cpu(),
                "fit_threads: expected a CPU model (the threads it fits are CPU threads) but got ",
                model.device());
    threads = std::make_unique<CpuThreads>(at::get_num_threads());
  }
  if (o.prefix_cache_bytes != 0) {
    const Cache& cache = engine->cache();
    // A restored entry is rolled back to the shared length: any depth for
    // full layers, max_chunk for rings (Note [ring rollback]).
    const int64_t rollback =
        model.config().has_sliding() ? cache.config().effective_max_chunk() : o.max_len;
    const int64_t budget = o.prefix_cache_bytes > 0 ? o.prefix_cache_bytes : cache.memory_bytes();
    options.prefix_cache_bytes = budget;
    prefix = std::make_unique<serving_detail::PrefixPool>(budget, o.prefix_block, rollback);
  }
}

void Scheduler::State::submit(Request request) {
  const std::string& id = request.id;
  auto same = [&](const Active& a) { return a.request.id == id; };
  try {
    STATICKV_CHECK_FIELD(std::none_of(waiting.begin(), waiting.end(), same) &&
                             std::none_of(table->rows().begin(), table->rows().end(), same),
                         "id", "expected an id not already waiting or running but got '", id, "'");
    waiting.push_back(serving_detail::checked_request(
        std::move(request), model.config(), options.max_len, head->options(), options.speculate));
  } catch (const c10::Error&) {
    ++stats.rejected;
    throw;
  }
  ++stats.submitted;
}

void Scheduler::State::count_finished(Finish finish) {
  ++(finish == Finish::kCancelled ? stats.cancelled : stats.completed);
}

bool Scheduler::State::cancel(const std::string& id) {
  for (auto it = waiting.begin(); it != waiting.end(); ++it) {
    if (it->request.id != id) continue;
    finished.push_back(serving_detail::complete(*it, Finish::kCancelled, ServeClock::now()));
    count_finished(Finish::kCancelled);
    waiting.erase(it);
    return true;
  }
  for (size_t r = 0; r < table->live(); ++r) {
    if (table->rows()[r].request.id != id) continue;
    finished.push_back(table->retire(r, Finish::kCancelled));
    count_finished(Finish::kCancelled);
    return true;
  }
  return false;
}

Scheduler::Scheduler(const LlamaModel& model, SchedulerOptions options)
    : state_(std::make_unique<State>(model, std::move(options))) {}

Scheduler::~Scheduler() = default;

void Scheduler::submit(Request request) { state_->submit(std::move(request)); }

bool Scheduler::cancel(const std::string& id) {
  c10::InferenceMode inference;
  return state_->cancel(id);
}

void Scheduler::step() {
  c10::InferenceMode inference;
  if (state_->threads) state_->threads->update();
  state_->step();
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
  if (const CpuThreads* t = state_->threads.get()) {
    out.threads = t->threads();
    out.max_threads = t->max_threads();
    out.thread_changes = t->changes();
  }
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
