#pragma once
// Scheduler: continuous batching over one StaticCache or HybridCache.
//
// Requests are submitted at any time and wait in arrival order. Every
// step() admits waiting requests into free rows, feeds prompt chunks (under
// a token budget) to the prefilling rows, which sit at the front of the
// cache, in one bucketed runner call and every decoding row's newest token
// in a second (q = 1), hands each row that produced a token its next token,
// and retires finished rows by moving the last row into the hole
// (copy_row), so the live rows are always the prefix [0, live) of the cache
// and the batch bucket shrinks when load drops. The policy and its costs:
// docs/serving.md.
//
//   Scheduler scheduler(model, options);
//   scheduler.warm_up();                    // every GraphRunner key, once
//   scheduler.submit(request);              // throws FieldError naming the field
//   while (!scheduler.idle()) scheduler.step();
//   for (Completion& c : scheduler.take_finished()) ...
//
// One thread at a time, like the cache and the runner it owns.

#include <statickv/engine/engine.hpp>
#include <statickv/engine/generator.hpp>
#include <statickv/engine/speculative.hpp>
#include <statickv/graph_runner.hpp>
#include <statickv/model/model.hpp>
#include <statickv/sampling/head.hpp>

#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace statickv::reference {

using ServeClock = std::chrono::steady_clock;

struct Request {
  std::string id;  ///< unique among the requests waiting or running
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 16;
  /// Greedy or sampled, penalties, logit bias, min_tokens and per-token
  /// log-probabilities (sampling.hpp), picked on the device by the
  /// Scheduler's SamplingHead. Under speculation only temperature, top_k,
  /// top_p and seed apply; the others are refused, naming speculate.
  Sampling sampling;
  /// -1: none; 0..20: each prompt token's log-probability given the tokens
  /// before it (the first has none), with this many alternatives: what an
  /// evaluation harness scores. Its prefill runs eagerly at every position.
  int64_t prompt_logprobs = -1;
  /// Tokens that end the request (kept in its tokens); nullopt: the
  /// model's eos ids. An empty list: no stop token.
  std::optional<std::vector<int64_t>> stop;
  /// When the request arrived (queue time counts from here); nullopt, or a
  /// time after submit()'s call: that call.
  std::optional<ServeClock::time_point> arrival;
  /// Called on the engine's thread with each token as it is produced.
  std::function<void(const std::string& id, int64_t token)> on_token;
  /// sampling.logprobs >= 0: called on the engine's thread just before
  /// on_token with that token's log-probability and alternatives.
  std::function<void(const std::string& id, const TokenLogprob& logprob)> on_logprob;
};

enum class Finish { kLength, kStop, kCancelled, kError };
const char* to_string(Finish finish);  // "length" | "stop" | "cancelled" | "error"

struct RequestStats {
  double queue_seconds = 0;  ///< arrival to admission into a row
  double ttft_seconds = 0;   ///< arrival to the first token (0 if none)
  /// Tokens after the first over the time after the first (0 with < 2 tokens).
  double decode_tokens_per_second = 0;
  double total_seconds = 0;  ///< arrival to finish
};

struct Completion {
  std::string id;
  std::vector<int64_t> tokens;  ///< generated ids (a stop token included)
  /// One per generated token when sampling.logprobs >= 0.
  std::vector<TokenLogprob> logprobs;
  /// prompt_logprobs >= 0: prompt tokens 1.. (each given those before it).
  std::vector<TokenLogprob> prompt_logprobs;
  Finish finish = Finish::kLength;
  std::string error;  ///< kError only
  RequestStats stats;
};

/// The Scheduler's options: the settings it shares with Generator
/// (EngineSettings, engine.hpp: cache kind (kStatic or kHybrid), kernel,
/// storage, offload, buckets, speculation) plus its own. Query-length
/// buckets default to powers of two up to prefill_chunk (1 is the
/// decode-only bucket). Under speculation every decoding row verifies its
/// drafts in one call of speculate + 1 query tokens per row, which must fit
/// the cache's max_chunk (the bucket serving prefill_chunk); drafts do not
/// count against token_budget or burst_budget. A draft model's hybrid cache mirrors every
/// admission, prefill, move, reset and rollback of the target's rows, and
/// each step drafts `speculate` tokens per decoding row in as many calls.
struct SchedulerOptions : EngineSettings {
  int64_t max_batch = 8;
  int64_t max_len = 512;
  /// Most prompt tokens one row prefills in a step (0 = min(64, max_len)).
  /// A hybrid cache's sliding rings grow by the bucket serving it.
  int64_t prefill_chunk = 0;
  /// Most real tokens in a step in which at least as many rows decode as
  /// prefill, decode tokens first (0 = max_batch - 1 + prefill_chunk: every
  /// decode row plus one full chunk). >= max_batch. It bounds what a
  /// decoding row waits for.
  int64_t token_budget = 0;
  /// Most real tokens in a step in which more rows prefill than decode,
  /// decode tokens first: its stall falls on the fewer rows (0 =
  /// max(token_budget, max_batch x prefill_chunk): every prefilling row its
  /// chunk; token_budget gives one budget for every step). >= token_budget.
  int64_t burst_budget = 0;
  /// Note [prefix cache], docs/serving.md: bytes of saved prefixes (row
  /// snapshots on the cache's device, LRU) a new request may start from.
  /// -1 (default): as many as the cache's own bytes, or off where it cannot
  /// run (kv_storage int8/fp8, a draft model); 0: off; > 0: that budget,
  /// refused with quantized storage or a draft model, naming both.
  int64_t prefix_cache_bytes = -1;
  /// Tokens per block of the prefix lookup's hashes; a match reuses at
  /// least one block.
  int64_t prefix_block = 16;
  /// A CPU model only: before each step, fit the intra-op threads to the
  /// CPUs other processes leave idle, up to LibTorch's count at
  /// construction (CpuThreads, Note [threads beside a co-tenant]).
  bool fit_threads = false;
};

/// Fills prefill_chunk, token_budget and burst_budget where 0 with their
/// defaults (above), the chunk at most max_len; checks nothing. The
/// Scheduler resolves its options with it, and so does a front end that
/// checks the same fields under its own names (statickv-serve's flags).
void resolve_step_budgets(SchedulerOptions& o);

struct SchedulerStats {
  int64_t max_batch = 0;
  int64_t steps = 0;
  int64_t mixed_steps = 0;    ///< steps with a prefill call and a decode call
  int64_t row_steps = 0;      ///< live rows summed over steps
  int64_t real_tokens = 0;    ///< decode and prompt tokens fed
  int64_t padded_tokens = 0;  ///< computed at the padded shape but not real
  int64_t submitted = 0, rejected = 0, completed = 0, cancelled = 0;
  int64_t row_copies = 0;   ///< cache rows copied by moves (copy_row) and regroups (reorder)
  double step_seconds = 0;  ///< wall time inside the steps counted (`steps`)
  /// Note [prefix cache]: requests that started from a saved or live
  /// prefix, the prompt tokens they did not prefill, and the pool.
  int64_t prefix_hits = 0, prefix_tokens_reused = 0;
  int64_t prefix_bytes = 0, prefix_budget = 0, prefix_entries = 0, prefix_evictions = 0;
  RunnerStats runner;            ///< captures, replays, eager runs, per key (bucketed only)
  RunnerStats verify_runner;     ///< speculation: the verification calls' runner
  SpeculationStats speculation;  ///< speculation: drafts and acceptances
  /// fit_threads: the intra-op threads now, the most it may use, and how
  /// many times the count changed (0, 0, 0 without fit_threads).
  int threads = 0, max_threads = 0;
  int64_t thread_changes = 0;
  /// Mean live rows per step over max_batch.
  double occupancy() const;
  /// Padded over computed tokens.
  double padded_fraction() const;
  /// Mean wall seconds of a step (0 before the first).
  double mean_step_seconds() const;
};

class Scheduler {
 public:
  /// Builds the cache (max_batch x max_len) and, bucketed, the runner.
  Scheduler(const LlamaModel& model, SchedulerOptions options);
  ~Scheduler();
  Scheduler(const Scheduler&) = delete;
  Scheduler& operator=(const Scheduler&) = delete;

  /// Queues a request. A bad one (empty prompt, an id outside the vocabulary,
  /// prompt + max_new_tokens over max_len, a limit below 1, a negative or
  /// non-finite sampling value, a duplicate id) throws FieldError (a
  /// c10::Error; <statickv/support/field_error.hpp>) naming the field, in
  /// its text and as field(), before anything changes (Invariant [checked
  /// before written]).
  void submit(Request request);
  /// Ends a waiting or running request now, as kCancelled with the tokens it
  /// has; returns false when no such request is waiting or running.
  bool cancel(const std::string& id);
  /// One engine step: admit, one forward pass, emit tokens, retire.
  /// Does nothing when idle.
  void step();
  /// Steps until nothing waits or runs.
  void run_until_idle();
  bool idle() const;
  int64_t live_rows() const;
  int64_t waiting() const;
  /// Wall time of the latest step (its share of EngineStats::step_seconds);
  /// 0 when it had no row to run.
  double last_step_seconds() const;

  /// Completions since the last call, in the order the requests finished.
  std::vector<Completion> take_finished();

  /// Captures (CUDA) or allocates (CPU) every key the step can use, so no
  /// later arrival pattern captures again.
  void warm_up();

  SchedulerStats stats() const;
  /// The options in force (defaults resolved).
  const SchedulerOptions& options() const;
  const Cache& cache() const;
  /// The runner's key for a step of b rows and q tokens attending attend_len
  /// (bucketed only).
  GraphKey key_for(int64_t b, int64_t q, int64_t attend_len) const;

 private:
  struct State;
  std::unique_ptr<State> state_;
};

}  // namespace statickv::reference
