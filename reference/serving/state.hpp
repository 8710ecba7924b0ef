#pragma once
// The Scheduler's private state, shared by scheduler.cpp (the step loop) and
// requests.cpp (request checks, token picks, completions). Not installed.

#include <statickv/cache.hpp>
#include <statickv/reference/serving.hpp>

#include <ATen/ATen.h>

#include <deque>
#include <memory>
#include <vector>

namespace statickv::reference::serving_detail {

/// A request and what it has produced so far, waiting or in a cache row.
struct Active {
  Request request;
  std::vector<int64_t> stop;  // resolved: the request's or the model's eos ids
  int64_t order = 0;          // admission order: prefill chunks go first-come first-served
  int64_t prompt_done = 0;    // prompt tokens already in the cache
  std::vector<int64_t> tokens;
  at::Generator generator;  // sampling only
  ServeClock::time_point arrival, admitted, first_token;

  int64_t prompt_len() const { return static_cast<int64_t>(request.prompt.size()); }
  bool decoding() const { return prompt_done == prompt_len(); }
};

/// One step's inputs: [b, q] ids and positions (host), and per row the
/// tokens it feeds.
struct StepInputs {
  at::Tensor ids, positions;
  std::vector<int64_t> fed;  // per row: 0 (idle), 1 (decode) or a chunk length
  int64_t attend = 1;
  int64_t real = 0;
  bool mixed = false;
};

/// Checks a request against the model and the cache (throws c10::Error
/// naming the field) and returns it ready to queue.
Active checked_request(Request request, const ModelConfig& model, int64_t max_len);

/// The next token of `row` from its logits [vocab] (float32): greedy ids
/// are precomputed in `greedy`; sampling draws from the row's generator.
int64_t pick_token(Active& row, const at::Tensor& logits, int64_t greedy);

/// The completion of `row` finished for `finish` at `now`.
Completion complete(Active& row, Finish finish, ServeClock::time_point now);

}  // namespace statickv::reference::serving_detail
