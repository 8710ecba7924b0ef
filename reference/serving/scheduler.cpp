// Scheduler: the continuous-batching step loop over one cache (policy:
// docs/serving.md). A step admits waiting requests into free rows, packs one
// forward pass (every decoding row's newest token, then prompt chunks in
// admission order under the token budget), picks the next token of every
// row that finished its prompt or decoded, and retires finished rows by
// moving the last live row into each hole.

#include "state.hpp"

#include <statickv/cache.hpp>

#include <c10/core/InferenceMode.h>

#include <algorithm>

namespace statickv::reference {

using serving_detail::Active;
using serving_detail::StepInputs;

struct Scheduler::State {
  const LlamaModel& model;
  SchedulerOptions options;
  std::unique_ptr<Cache> cache;
  std::unique_ptr<CacheBackend> backend;
  std::unique_ptr<GraphRunner> runner;
  std::deque<Active> waiting;
  std::vector<Active> rows;  // rows[r] lives in cache row r; rows past size() are fresh
  std::vector<Completion> finished;
  EngineStats stats;
  int64_t next_order = 0;
};

namespace {

/// Resolves the options' defaults and checks them against the model.
SchedulerOptions resolved(const LlamaModel& model, SchedulerOptions o) {
  TORCH_CHECK(o.cache != CacheKind::kDynamic,
              "cache: expected static or hybrid (one preallocated cache) but got dynamic");
  TORCH_CHECK(o.cache != CacheKind::kStatic || !model.config().has_sliding(),
              "cache: expected hybrid for a model with sliding-window layers but got static");
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
  if (!o.attend_buckets) {
    o.attend_buckets = ShapeBuckets::powers_of_two(o.max_len, std::min<int64_t>(64, o.max_len));
  }
  TORCH_CHECK(o.attend_buckets->max() == o.max_len, "attend_buckets: expected a largest bucket of ",
              o.max_len, " (max_len) but got ", o.attend_buckets->max());
  if (o.token_budget == 0) o.token_budget = o.max_batch - 1 + chunk;
  TORCH_CHECK(o.token_budget >= o.max_batch, "token_budget: expected >= max_batch=", o.max_batch,
              " (every decode row and one prompt token) or 0 but got ", o.token_budget);
  return o;
}

}  // namespace

Scheduler::Scheduler(const LlamaModel& model, SchedulerOptions options)
    : state_(new State{model, resolved(model, std::move(options)), {}, {}, {}, {}, {}, {}, {}}) {
  c10::InferenceMode inference;
  State& s = *state_;
  const SchedulerOptions& o = s.options;
  CacheConfig config = model.cache_config(o.max_batch, o.max_len);
  // A full chunk pads to its bucket: the cache must take that many tokens
  // per row in one step (a sliding layer's ring grows by it).
  config.max_chunk = o.prompt_buckets->round_up(o.prefill_chunk, "prompt_buckets");
  TORCH_CHECK(config.max_chunk <= o.max_len, "prompt_buckets: expected the bucket serving a ",
              "full chunk of ", o.prefill_chunk, " tokens to be <= max_len=", o.max_len,
              " but got ", config.max_chunk);
  if (o.cache == CacheKind::kStatic) {
    s.cache = std::make_unique<StaticCache>(config);
  } else {
    s.cache = std::make_unique<HybridCache>(config);
  }
  s.backend = std::make_unique<CacheBackend>(*s.cache, o.kernel);
  s.stats.max_batch = o.max_batch;
  if (!o.bucketed) return;
  GraphRunner::Options ro;
  ro.device = s.model.device();
  ro.use_graphs = o.cuda_graphs;
  ro.batch_buckets = ShapeBuckets::powers_of_two(o.max_batch);
  ro.query_buckets = *o.prompt_buckets;
  ro.attend_buckets = *o.attend_buckets;
  ro.row_outputs = {0};  // each row's newest token's logits: [B, vocab]
  State* state = &s;
  // One step for decode and prefill alike: padded tokens and rows carry
  // position -1 and land in the scratch slot (Invariant [scratch slot]).
  GraphRunner::StepFn step = [state](const std::vector<at::Tensor>& in, const GraphKey& key) {
    return std::vector<at::Tensor>{
        state->model.forward(in[0], in[1], *state->backend, key.attend_len, Logits::kLast)};
  };
  s.runner = std::make_unique<GraphRunner>(
      std::vector<InputSpec>{{"ids", at::kLong, {}, 0}, {"positions", at::kLong, {}, -1}},
      std::move(step), ro);
}

Scheduler::~Scheduler() = default;

namespace {

void admit(std::deque<Active>& waiting, std::vector<Active>& rows, int64_t max_batch,
           int64_t& next_order) {
  const auto now = ServeClock::now();
  while (static_cast<int64_t>(rows.size()) < max_batch && !waiting.empty()) {
    Active a = std::move(waiting.front());
    waiting.pop_front();
    a.admitted = now;
    a.order = next_order++;
    rows.push_back(std::move(a));  // the row past the live prefix: fresh
  }
}

/// How many tokens each row feeds this step: 1 per decoding row, then prompt
/// chunks (at most `chunk` each) in admission order while the budget lasts.
std::vector<int64_t> allot(const std::vector<Active>& rows, int64_t chunk, int64_t budget) {
  std::vector<int64_t> fed(rows.size(), 0);
  std::vector<size_t> prefilling;
  for (size_t r = 0; r < rows.size(); ++r) {
    if (rows[r].decoding()) {
      fed[r] = 1;
      --budget;
    } else {
      prefilling.push_back(r);
    }
  }
  std::sort(prefilling.begin(), prefilling.end(),
            [&](size_t a, size_t b) { return rows[a].order < rows[b].order; });
  for (size_t r : prefilling) {
    fed[r] = std::min({rows[r].prompt_len() - rows[r].prompt_done, chunk, budget});
    budget -= fed[r];
  }
  return fed;
}

/// The step's [b, q] ids and positions: each row's tokens from column 0,
/// position -1 past them.
StepInputs pack(const std::vector<Active>& rows, std::vector<int64_t> fed) {
  StepInputs in;
  const int64_t b = static_cast<int64_t>(rows.size());
  const int64_t q = std::max<int64_t>(1, *std::max_element(fed.begin(), fed.end()));
  std::vector<int64_t> ids(static_cast<size_t>(b * q), 0), pos(ids.size(), -1);
  for (int64_t r = 0; r < b; ++r) {
    const Active& row = rows[r];
    if (row.decoding() && fed[r] == 1) {
      ids[r * q] = row.tokens.back();
      pos[r * q] = row.prompt_len() + static_cast<int64_t>(row.tokens.size()) - 1;
    } else {
      for (int64_t t = 0; t < fed[r]; ++t) {
        ids[r * q + t] = row.request.prompt[row.prompt_done + t];
        pos[r * q + t] = row.prompt_done + t;
      }
      in.mixed = in.mixed || fed[r] > 0;
    }
    if (fed[r] > 0) in.attend = std::max(in.attend, pos[r * q + fed[r] - 1] + 1);
    in.real += fed[r];
  }
  const auto opts = at::TensorOptions().dtype(at::kLong);
  in.ids = at::tensor(ids, opts).view({b, q});
  in.positions = at::tensor(pos, opts).view({b, q});
  in.fed = std::move(fed);
  return in;
}

bool is_stop(const Active& row, int64_t token) {
  return std::find(row.stop.begin(), row.stop.end(), token) != row.stop.end();
}

}  // namespace

void Scheduler::submit(Request request) {
  State& s = *state_;
  const std::string& id = request.id;
  auto same = [&](const Active& a) { return a.request.id == id; };
  try {
    TORCH_CHECK(std::none_of(s.waiting.begin(), s.waiting.end(), same) &&
                    std::none_of(s.rows.begin(), s.rows.end(), same),
                "id: expected an id not already waiting or running but got '", id, "'");
    s.waiting.push_back(
        serving_detail::checked_request(std::move(request), s.model.config(), s.options.max_len));
  } catch (const c10::Error&) {
    ++s.stats.rejected;
    throw;
  }
  ++s.stats.submitted;
}

namespace {

/// Retires row r: its completion, then the last live row moves into the hole
/// (one copy_row) and the vacated last row is reset, so the live rows stay
/// the prefix [0, live) and every row past it is fresh (Note [a reset row is
/// a fresh row]).
void retire(Cache& cache, std::vector<Active>& rows, size_t r, Finish finish,
            std::vector<Completion>& finished, EngineStats& stats) {
  finished.push_back(serving_detail::complete(rows[r], finish, ServeClock::now()));
  ++(finish == Finish::kCancelled ? stats.cancelled : stats.completed);
  const size_t last = rows.size() - 1;
  if (r != last) {
    cache.copy_row(static_cast<int64_t>(last), static_cast<int64_t>(r));
    rows[r] = std::move(rows[last]);
    ++stats.row_moves;
  }
  cache.reset_rows(at::tensor({static_cast<int64_t>(last)}, at::TensorOptions().dtype(at::kLong)));
  rows.pop_back();
}

}  // namespace

bool Scheduler::cancel(const std::string& id) {
  c10::InferenceMode inference;
  State& s = *state_;
  for (auto it = s.waiting.begin(); it != s.waiting.end(); ++it) {
    if (it->request.id != id) continue;
    s.finished.push_back(serving_detail::complete(*it, Finish::kCancelled, ServeClock::now()));
    ++s.stats.cancelled;
    s.waiting.erase(it);
    return true;
  }
  for (size_t r = 0; r < s.rows.size(); ++r) {
    if (s.rows[r].request.id != id) continue;
    retire(*s.cache, s.rows, r, Finish::kCancelled, s.finished, s.stats);
    return true;
  }
  return false;
}

void Scheduler::step() {
  c10::InferenceMode inference;
  State& s = *state_;
  admit(s.waiting, s.rows, s.options.max_batch, s.next_order);
  if (s.rows.empty()) return;
  const StepInputs in =
      pack(s.rows, allot(s.rows, s.options.prefill_chunk, s.options.token_budget));
  const at::Device device = s.model.device();
  const at::Tensor ids = in.ids.to(device), pos = in.positions.to(device);
  const at::Tensor logits = s.runner
                                ? s.runner->run({ids, pos}, in.attend)[0]
                                : s.model.forward(ids, pos, *s.backend, in.attend, Logits::kLast);
  const int64_t b = ids.size(0), q = ids.size(1);
  const GraphKey key = s.runner ? s.runner->key_for(b, q, in.attend) : GraphKey{b, q, in.attend};
  ++s.stats.steps;
  s.stats.mixed_steps += in.mixed ? 1 : 0;
  s.stats.row_steps += b;
  s.stats.real_tokens += in.real;
  s.stats.padded_tokens += key.batch * key.query_len - in.real;

  // Every row whose prompt is now in the cache picks its next token.
  const at::Tensor greedy = logits.argmax(-1).cpu();
  const auto now = ServeClock::now();
  std::vector<std::pair<size_t, Finish>> done;
  for (size_t r = 0; r < s.rows.size(); ++r) {
    Active& row = s.rows[r];
    if (in.fed[r] == 0) continue;
    if (!row.decoding()) {
      row.prompt_done += in.fed[r];
      if (!row.decoding()) continue;
    }
    const int64_t token = serving_detail::pick_token(
        row, logits[static_cast<int64_t>(r)], greedy[static_cast<int64_t>(r)].item<int64_t>());
    if (row.tokens.empty()) row.first_token = now;
    row.tokens.push_back(token);
    if (row.request.on_token) row.request.on_token(row.request.id, token);
    if (is_stop(row, token)) {
      done.emplace_back(r, Finish::kStop);
    } else if (static_cast<int64_t>(row.tokens.size()) >= row.request.max_new_tokens) {
      done.emplace_back(r, Finish::kLength);
    }
  }
  // Highest row first: a row moved into a hole is never one still to retire.
  for (auto it = done.rbegin(); it != done.rend(); ++it) {
    retire(*s.cache, s.rows, it->first, it->second, s.finished, s.stats);
  }
}

void Scheduler::run_until_idle() {
  while (!idle()) step();
}

bool Scheduler::idle() const { return state_->waiting.empty() && state_->rows.empty(); }
int64_t Scheduler::live_rows() const { return static_cast<int64_t>(state_->rows.size()); }
int64_t Scheduler::waiting() const { return static_cast<int64_t>(state_->waiting.size()); }

std::vector<Completion> Scheduler::take_finished() {
  std::vector<Completion> out;
  out.swap(state_->finished);
  return out;
}

void Scheduler::warm_up() {
  c10::InferenceMode inference;
  if (state_->runner) state_->runner->capture_all();
}

EngineStats Scheduler::stats() const {
  EngineStats out = state_->stats;
  if (state_->runner) out.runner = state_->runner->stats();
  return out;
}

const SchedulerOptions& Scheduler::options() const { return state_->options; }
const Cache& Scheduler::cache() const { return *state_->cache; }

GraphKey Scheduler::key_for(int64_t b, int64_t q, int64_t attend_len) const {
  TORCH_CHECK(state_->runner != nullptr, "key_for: expected a bucketed scheduler");
  return state_->runner->key_for(b, q, attend_len);
}

}  // namespace statickv::reference
