#pragma once
// Scheduler::State: the Scheduler's state and the parts of its step, as a
// class of its own (docs/serving.md). scheduler.cpp builds it and forwards
// the public calls; scheduler_step.cpp is the step (admission, the prefill
// and decode calls, the picks, retirement); scheduler_prefix.cpp is Note
// [prefix cache]'s side of it. Not installed.

#include "prefix_pool.hpp"
#include "state.hpp"

#include <statickv/engine/cpu_threads.hpp>
#include <statickv/engine/scheduler.hpp>

#include <deque>
#include <memory>
#include <string>
#include <vector>

namespace statickv::reference {

/// The decode rows' call: q = 1, or under speculation each row's newest
/// token and its drafts (q = speculate + 1).
struct DecodeCall {
  at::Tensor logits;  // [b, vocab], or [b, k + 1, vocab]
  DraftSet drafts;    // speculation only
};

struct Scheduler::State {
  /// Resolves and checks `options` (throws c10::Error naming the field)
  /// and builds the head, the engine, the row table and the prefix pool.
  State(const LlamaModel& model, SchedulerOptions options);

  const LlamaModel& model;
  SchedulerOptions options;
  // The head outlives the engine, whose runners' steps may pick with it.
  std::unique_ptr<SamplingHead> head;  // every row's pick, on the cache's device
  std::unique_ptr<Engine> engine;      // the cache, backends and runners (draft model's too)
  std::unique_ptr<serving_detail::RowTable> table;     // rows()[r] lives in cache row r
  std::unique_ptr<serving_detail::PrefixPool> prefix;  // null: the prefix cache is off
  std::unique_ptr<CpuThreads> threads;                 // null: fit_threads is off
  std::deque<serving_detail::Active> waiting;
  std::vector<Completion> finished;
  SchedulerStats stats;
  double last_step_seconds = 0;  // Scheduler::last_step_seconds()

  void submit(Request request);
  bool cancel(const std::string& id);
  /// Counts a request that ended (completed or cancelled).
  void count_finished(Finish finish);
  /// One step (Scheduler::step): admit, prefill, decode, pick, retire.
  void step();

  // The step's parts (scheduler_step.cpp).
  /// Accounts for one call's real and padded tokens.
  void count_tokens(Pass pass, const StepInputs& in);
  /// run() with the head's pick of the rows in `takes` (inside the runner's
  /// step where the engine puts it there); each row's newest logits.
  at::Tensor run_and_pick(Pass pass, const StepInputs& in, const std::vector<bool>& takes);
  /// The verification call with the head's acceptance rule over `drafts`
  /// (inside the runner's step where the engine puts it there).
  at::Tensor run_and_verify(const StepInputs& in, const DraftSet& drafts,
                            const std::vector<bool>& takes);
  /// The decode call: every decoding row's newest token, or under
  /// speculation its newest token and drafts (prompt lookup or the draft
  /// model); the head picks, or verifies, for every decoding row.
  DecodeCall decode();
  /// The prefill call over rows [0, b), fed to the draft model's cache too
  /// (eagerly); the head picks the first token of each row whose prompt
  /// ends in it. A row asking for prompt log-probabilities makes the call
  /// eager at every position (the runner returns the last position's).
  void prefill(const std::vector<int64_t>& fed, int64_t b);
  /// An eager prefill with every position's logits: the prompt
  /// log-probabilities, then the head's pick from each row's last fed one.
  void prefill_every_position(const StepInputs& in, const std::vector<int64_t>& fed, int64_t b);
  /// Gives every live row what the step picked for it; returns the
  /// positions each row's cache keeps (under speculation, rejected drafts go).
  std::vector<int64_t> settle(const std::vector<int64_t>& fed, size_t prefilling,
                              const DecodeCall& decode, std::vector<Picked>& picked);
  /// Retires the finished rows, highest first (a row moved into a hole is
  /// never one still to retire), saving a chat's next turn first.
  void retire_finished();
  /// The draft cache keeps what the target keeps of what it drafted from
  /// (Note [ring rollback]): rejected drafts leave both caches.
  void roll_back_draft(const std::vector<int64_t>& kept);

  // Note [prefix cache] (scheduler_prefix.cpp).
  /// Admits waiting requests, in order, into free rows; a twin of a
  /// prefilling row stays waiting, in its place.
  void admit();
  /// The new request in row r starts from the longest prefix it shares
  /// with a saved one (restored, then rolled back to the shared length)
  /// and prefills only the rest.
  void reuse_prefix(size_t r);
  /// A request whose whole prompt a row is still prefilling waits for that
  /// prefill, then starts from the row the pool saved when it ended (the
  /// choices of one `n` prefill their prompt once). Only where the pool
  /// can serve it: on, a prompt longer than one block, no prompt
  /// log-probabilities on either side.
  bool waits_for_twin(const serving_detail::Active& a) const;
  /// Saves row r's cached tokens (its prompt, and what it generated but
  /// the newest token) to the pool, on the cache's device.
  void save_prefix(size_t r);
};

}  // namespace statickv::reference
