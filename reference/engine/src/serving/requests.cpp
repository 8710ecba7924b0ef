// The Scheduler's requests: the checks a request passes before it is queued
// (each refusal a FieldError naming its field), the pick of a row's next
// token, and a finished request's completion.

#include "state.hpp"

#include <statickv/sampling/head.hpp>
#include <statickv/support/field_error.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>

namespace statickv::reference {

const char* to_string(Finish finish) {
  switch (finish) {
    case Finish::kLength:
      return "length";
    case Finish::kStop:
      return "stop";
    case Finish::kCancelled:
      return "cancelled";
    case Finish::kError:
      return "error";
  }
  return "unknown";
}

double SchedulerStats::occupancy() const {
  return steps > 0 && max_batch > 0
             ? static_cast<double>(row_steps) / static_cast<double>(steps * max_batch)
             : 0.0;
}

double SchedulerStats::padded_fraction() const {
  const int64_t total = real_tokens + padded_tokens;
  return total > 0 ? static_cast<double>(padded_tokens) / static_cast<double>(total) : 0.0;
}

double SchedulerStats::mean_step_seconds() const {
  return steps > 0 ? step_seconds / static_cast<double>(steps) : 0.0;
}

namespace serving_detail {

namespace {

void check_ids(const char* field, const std::vector<int64_t>& ids, int64_t vocab) {
  for (size_t t = 0; t < ids.size(); ++t) {
    STATICKV_CHECK_FIELD_AT(ids[t] >= 0 && ids[t] < vocab, field, t,
                            "expected a token id in [0, vocab_size=", vocab, ") but got ", ids[t]);
  }
}

}  // namespace

/// What depends on each accepted token (penalties, bias, min_tokens,
/// log-probabilities) is refused under speculation: the head verifies a
/// row's drafts with its settings at the step's start.
void check_speculation(const Request& r, int64_t speculate) {
  if (speculate == 0) return;
  const Sampling& s = r.sampling;
  const auto refuse = [&](bool used, const char* field) {
    STATICKV_CHECK_FIELD(!used, field, "expected its default with speculate=", speculate,
                         " (speculative verification applies a row's settings as the step "
                         "starts) but got another value");
  };
  refuse(s.repetition_penalty != 1.0, "repetition_penalty");
  refuse(s.presence_penalty != 0.0, "presence_penalty");
  refuse(s.frequency_penalty != 0.0, "frequency_penalty");
  refuse(!s.logit_bias.empty(), "logit_bias");
  refuse(s.min_tokens != 0, "min_tokens");
  refuse(s.logprobs != -1, "logprobs");
  refuse(r.prompt_logprobs != -1, "prompt_logprobs");
}

Active checked_request(Request request, const ModelConfig& model, int64_t max_len,
                       const SamplingHeadOptions& head, int64_t speculate) {
  STATICKV_CHECK_FIELD(!request.id.empty(), "id", "expected a non-empty id but got an empty one");
  const int64_t len = static_cast<int64_t>(request.prompt.size());
  STATICKV_CHECK_FIELD(len >= 1, "prompt", "expected at least one token but got none");
  check_ids("prompt", request.prompt, model.vocab_size);
  STATICKV_CHECK_FIELD(request.max_new_tokens >= 1, "max_new_tokens", "expected >= 1 but got ",
                       request.max_new_tokens);
  // Compared as max_new_tokens <= max_len - len: the sum may not fit in int64.
  STATICKV_CHECK_FIELD(len <= max_len && request.max_new_tokens <= max_len - len, "max_new_tokens",
                       "expected prompt length + max_new_tokens <= max_len=", max_len, " but got ",
                       len, " + ", request.max_new_tokens);
  const Sampling& s = request.sampling;
  check_sampling(s, model.vocab_size, head.max_bias, head.max_logprobs);
  STATICKV_CHECK_FIELD(
      request.prompt_logprobs >= -1 && request.prompt_logprobs <= head.max_logprobs,
      "prompt_logprobs", "expected -1 (none) or 0..", head.max_logprobs, " alternatives but got ",
      request.prompt_logprobs);
  check_speculation(request, speculate);
  if (request.stop) check_ids("stop", *request.stop, model.vocab_size);

  Active active;
  active.stop = request.stop ? *request.stop : model.eos_token_ids;
  STATICKV_CHECK_FIELD(
      s.min_tokens == 0 || static_cast<int64_t>(active.stop.size()) <= head.max_stop, "stop",
      "expected at most ", head.max_stop, " ids with min_tokens > 0 but got ", active.stop.size());
  // An arrival ahead of now (another clock's) counts as now: a queue or
  // first-token time is never negative.
  const auto now = ServeClock::now();
  active.arrival = std::min(request.arrival.value_or(now), now);
  active.request = std::move(request);
  return active;
}

Completion complete(Active& row, Finish finish, ServeClock::time_point now) {
  using Seconds = std::chrono::duration<double>;
  Completion c;
  c.id = row.request.id;
  c.finish = finish;
  c.tokens = std::move(row.tokens);
  c.logprobs = std::move(row.logprobs);
  c.prompt_logprobs = std::move(row.prompt_logprobs);
  const bool admitted = row.admitted != ServeClock::time_point{};
  c.stats.queue_seconds = Seconds((admitted ? row.admitted : now) - row.arrival).count();
  c.stats.total_seconds = Seconds(now - row.arrival).count();
  if (!c.tokens.empty()) {
    c.stats.ttft_seconds = Seconds(row.first_token - row.arrival).count();
    const double after = Seconds(now - row.first_token).count();
    if (c.tokens.size() >= 2 && after > 0) {
      c.stats.decode_tokens_per_second = static_cast<double>(c.tokens.size() - 1) / after;
    }
  }
  return c;
}

}  // namespace serving_detail

}  // namespace statickv::reference
