#pragma once
// statickv-serve --http: what one request asks of the engine (a Scheduler
// request per choice: each prompt of a list times n) and of its answer
// (echo, log-probabilities, a prompt scored alone), checked against the
// server's limits before anything reaches the engine.

#include "request.hpp"
#include "scheduler_thread.hpp"
#include "serve/text_tools.hpp"
#include "server.hpp"

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace statickv::serve {

/// One prompt as the engine takes it, with the text echo returns.
struct PlannedPrompt {
  std::vector<int64_t> ids;
  std::string text;
};

struct Plan {
  Submission submission;  ///< choice c is submission.choices[c], prompt c / n
  std::vector<PlannedPrompt> prompts;
  int64_t n = 1;
  bool echo = false;
  bool score_only = false;  ///< max_tokens 0 with echo: the one token generated is dropped
  std::optional<int64_t> logprobs;

  const PlannedPrompt& prompt_of(int64_t choice) const {
    return prompts[static_cast<size_t>(choice / n)];
  }
  int64_t choices() const { return static_cast<int64_t>(submission.choices.size()); }
  /// Every prompt's tokens, each prompt once (usage's prompt_tokens).
  int64_t prompt_tokens() const;
};

/// The server's side of planning.
struct PlanContext {
  TextTools* text = nullptr;  ///< null: token ids only
  const HttpOptions& options;
  int64_t max_len = 0;
};

/// Plans `api` (throws ApiError 400 naming the field): choice c = prompt
/// c / n, its Scheduler id `id_prefix` + "-" + c, its seed `seed` + c.
Plan plan_request(const ApiRequest& api, const PlanContext& context, uint64_t seed,
                  const std::string& id_prefix, reference::ServeClock::time_point arrival);

}  // namespace statickv::serve
