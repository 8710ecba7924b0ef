// The Scheduler's requests: the checks a request passes before it is queued,
// the pick of a row's next token, and a finished request's completion.

#include "state.hpp"

#include "../generation/sampling.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

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

double EngineStats::occupancy() const {
  return steps > 0 && max_batch > 0
             ? static_cast<double>(row_steps) / static_cast<double>(steps * max_batch)
             : 0.0;
}

double EngineStats::padded_fraction() const {
  const int64_t total = real_tokens + padded_tokens;
  return total > 0 ? static_cast<double>(padded_tokens) / static_cast<double>(total) : 0.0;
}

namespace serving_detail {

namespace {

void check_ids(const char* field, const std::vector<int64_t>& ids, int64_t vocab) {
  for (size_t t = 0; t < ids.size(); ++t) {
    TORCH_CHECK(ids[t] >= 0 && ids[t] < vocab, field, "[", t,
                "]: expected a token id in [0, vocab_size=", vocab, ") but got ", ids[t]);
  }
}

}  // namespace

Active checked_request(Request request, const ModelConfig& model, int64_t max_len) {
  TORCH_CHECK(!request.id.empty(), "id: expected a non-empty id but got an empty one");
  const int64_t len = static_cast<int64_t>(request.prompt.size());
  TORCH_CHECK(len >= 1, "prompt: expected at least one token but got none");
  check_ids("prompt", request.prompt, model.vocab_size);
  TORCH_CHECK(request.max_new_tokens >= 1, "max_new_tokens: expected >= 1 but got ",
              request.max_new_tokens);
  // Compared as max_new_tokens <= max_len - len: the sum may not fit in int64.
  TORCH_CHECK(len <= max_len && request.max_new_tokens <= max_len - len,
              "max_new_tokens: expected prompt length + max_new_tokens <= max_len=", max_len,
              " but got ", len, " + ", request.max_new_tokens);
  const Sampling& s = request.sampling;
  detail::check_sampling(s.temperature, s.top_k, s.top_p);
  if (request.stop) check_ids("stop", *request.stop, model.vocab_size);

  Active active;
  active.stop = request.stop ? *request.stop : model.eos_token_ids;
  active.arrival = request.arrival.value_or(ServeClock::now());
  if (request.sampling.temperature > 0.0) {
    active.generator = at::make_generator<at::CPUGeneratorImpl>(request.sampling.seed);
  }
  active.request = std::move(request);
  return active;
}

int64_t pick_token(Active& row, const at::Tensor& logits, int64_t greedy) {
  const Sampling& s = row.request.sampling;
  if (s.temperature <= 0.0) return greedy;
  // Generator's sampling on a one-row batch [1, vocab], so a request draws
  // what generating it alone with the same seed draws.
  return detail::sample_tokens(logits.view({1, -1}), s.temperature, s.top_k, s.top_p, row.generator)
      .item<int64_t>();
}

Completion complete(Active& row, Finish finish, ServeClock::time_point now) {
  using Seconds = std::chrono::duration<double>;
  Completion c;
  c.id = row.request.id;
  c.finish = finish;
  c.tokens = std::move(row.tokens);
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
