#pragma once
// Test support for the reference decoder's generation paths (Catch2).

#include "../support.hpp"
#include "sampling.hpp"

#include <statickv/engine/generator.hpp>
#include <statickv/engine/scheduler.hpp>

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace statickv::test {

/// Three ragged prompts: 13, 2 and 5 tokens.
inline const std::vector<std::vector<int64_t>>& ragged_prompts() {
  static const std::vector<std::vector<int64_t>> prompts = {
      {5, 9, 14, 2, 77, 31, 8, 64, 3, 19, 42, 7, 1}, {11, 4}, {90, 13, 27, 6, 55}};
  return prompts;
}

/// Generates ragged_prompts() twice, eagerly at exact shapes and through the
/// bucketed runners (CUDA graphs on a GPU) of a max_batch-row session, and
/// requires the same tokens and logits within `tol`. Returns the bucketed
/// run, whose runner statistics the caller checks.
inline reference::GenerateResult require_bucketed_equals_plain(const reference::LlamaModel& model,
                                                               int64_t new_tokens,
                                                               int64_t max_batch, double tol) {
  reference::GenerateOptions options;
  options.max_new_tokens = new_tokens;
  options.record_logits = true;
  options.bucketed = false;
  const reference::GenerateResult plain = reference::generate(model, ragged_prompts(), options);
  REQUIRE(plain.decode_runner.keys.empty());
  options.bucketed = true;
  reference::GenerateResult bucketed =
      reference::generate(model, ragged_prompts(), options, max_batch);
  CHECK(bucketed.tokens == plain.tokens);
  for (size_t r = 0; r < ragged_prompts().size(); ++r) {
    INFO("row " << r << " max diff " << max_diff(bucketed.logits[r], plain.logits[r]));
    CHECK(close(bucketed.logits[r], plain.logits[r], tol));
  }
  return bucketed;
}

/// Generates ragged_prompts() through the plain and the fused decoder path
/// (Note [fused decode path]) with `options` otherwise alike, and requires
/// the same greedy tokens and logits within `tol`.
inline void require_fused_equals_plain(const reference::LlamaModel& model,
                                       reference::GenerateOptions options, double tol) {
  options.record_logits = true;
  options.path = reference::DecodePath::kPlain;
  const reference::GenerateResult plain = reference::generate(model, ragged_prompts(), options);
  options.path = reference::DecodePath::kFused;
  const reference::GenerateResult fused = reference::generate(model, ragged_prompts(), options);
  CHECK(fused.tokens == plain.tokens);
  for (size_t r = 0; r < ragged_prompts().size(); ++r) {
    INFO("row " << r << " max diff " << max_diff(fused.logits[r], plain.logits[r]));
    CHECK(close(fused.logits[r], plain.logits[r], tol));
  }
}

/// A Scheduler over a static cache of `max_batch` rows of 64 positions.
inline reference::SchedulerOptions static_rows(int64_t max_batch) {
  reference::SchedulerOptions o;
  o.cache = reference::CacheKind::kStatic;
  o.max_batch = max_batch;
  o.max_len = 64;
  return o;
}

/// `batch` requests of four prompt tokens, 8 new tokens each, no stop id:
/// greedy, or sampled (temperature 0.8, top_p 0.95, presence penalty 0.5,
/// seeded by row, 2 log-probability alternatives): the batch a counted
/// Scheduler step serves (Note [sampling head]).
inline void submit_counted_batch(reference::Scheduler& engine, int64_t batch, bool sampled) {
  for (int64_t r = 0; r < batch; ++r) {
    reference::Request q;
    q.id = std::to_string(r);
    q.prompt = {1, 2, 3, r};
    q.max_new_tokens = 8;
    q.stop = std::vector<int64_t>{};
    if (sampled) {
      q.sampling.temperature = 0.8, q.sampling.top_p = 0.95;
      q.sampling.seed = static_cast<uint64_t>(r);
      q.sampling.presence_penalty = 0.5, q.sampling.logprobs = 2;
    }
    engine.submit(std::move(q));
  }
}

/// Sampled requests (top-k, top-p, min-p, each with its own seed) whose
/// prompts repeat a phrase, so prompt lookup drafts; 12 new tokens each.
inline std::vector<reference::Request> sampled_speculation_requests() {
  std::vector<reference::Request> requests(4);
  for (size_t i = 0; i < requests.size(); ++i) {
    reference::Request& r = requests[i];
    r.id = "s" + std::to_string(i);
    const auto base = static_cast<int64_t>(3 + 7 * i);
    r.prompt = {base, base + 1, base + 2, base + 3, base, base + 1, base + 2};
    r.max_new_tokens = 12;
    r.sampling.temperature = 0.6 + 0.2 * static_cast<double>(i);
    r.sampling.seed = 100 + i;
    r.sampling.top_k = i == 1 ? 5 : 0;
    r.sampling.top_p = i == 2 ? 0.9 : 1.0;
    r.sampling.min_p = i == 3 ? 0.05 : 0.0;
  }
  return requests;
}

/// Serves sampled_speculation_requests() (the first made greedy) under
/// speculation (k = 3) through a Scheduler of four rows on `model`'s
/// device, drafting by prompt lookup or with `draft`, verifying inside the
/// verification runner's step or after it (head_in_step; unset: the
/// engine's default). Tokens by id; `stats` gets the engine's statistics.
inline std::map<std::string, std::vector<int64_t>> serve_speculation(
    const reference::LlamaModel& model, const reference::LlamaModel* draft,
    std::optional<bool> head_in_step, reference::SchedulerStats* stats = nullptr) {
  reference::SchedulerOptions o = static_rows(4);
  o.speculate = 3;
  o.prefix_cache_bytes = 0;
  o.head_in_step = head_in_step;
  o.draft_model = draft;
  reference::Scheduler engine(model, o);
  std::vector<reference::Request> requests = sampled_speculation_requests();
  requests[0].sampling = reference::Sampling{};  // one greedy row among the sampled
  for (const reference::Request& r : requests) engine.submit(r);
  engine.run_until_idle();
  std::map<std::string, std::vector<int64_t>> served;
  for (const reference::Completion& c : engine.take_finished()) served[c.id] = c.tokens;
  if (stats) *stats = engine.stats();
  return served;
}

/// Serves five staggered requests (greedy and sampled, penalties, bias,
/// min_tokens, log-probabilities) through a Scheduler of four rows on
/// `model`'s device whose head picks inside the runners' steps or after the
/// passes (head_in_step; unset: the engine's default). Completions by id;
/// `runner` gets the prefill runner's statistics.
inline std::vector<reference::Completion> serve_mixed_sampling(const reference::LlamaModel& model,
                                                               std::optional<bool> head_in_step,
                                                               RunnerStats* runner = nullptr) {
  reference::SchedulerOptions o = static_rows(4);
  o.prefill_chunk = 4;
  o.head_in_step = head_in_step;
  reference::Scheduler engine(model, o);
  std::vector<reference::Request> requests(5);
  for (size_t i = 0; i < requests.size(); ++i) {
    reference::Request& q = requests[i];
    q.id = std::to_string(i);
    q.prompt = {3, 1, 4, 1, 5, 9, 2, static_cast<int64_t>(i)};
    q.prompt.resize(3 + 2 * i);
    q.max_new_tokens = 6 + static_cast<int64_t>(i);
    q.stop = std::vector<int64_t>{7};
    q.sampling.seed = 40 + i;
  }
  requests[0].sampling.temperature = 0.9, requests[0].sampling.top_p = 0.8;
  requests[1].sampling.repetition_penalty = 1.3, requests[1].sampling.logprobs = 3;
  requests[2].sampling.temperature = 1.2, requests[2].sampling.top_k = 7;
  requests[2].sampling.logit_bias = {{11, 2.5}}, requests[2].sampling.min_tokens = 4;
  requests[3].sampling.temperature = 0.7, requests[3].sampling.min_p = 0.1;
  requests[3].sampling.frequency_penalty = 0.6, requests[3].sampling.logprobs = 1;
  requests[4].sampling.temperature = 1.0, requests[4].sampling.presence_penalty = 0.8;
  for (const reference::Request& q : requests) {
    engine.submit(q);
    engine.step();  // arrivals between steps: rows move, prefill meets decode
  }
  engine.run_until_idle();
  if (runner) *runner = engine.stats().runner;
  std::vector<reference::Completion> done = engine.take_finished();
  std::sort(
      done.begin(), done.end(),
      [](const reference::Completion& a, const reference::Completion& b) { return a.id < b.id; });
  return done;
}

/// The same tokens, log-probabilities (within 1e-5) and alternatives.
inline void require_same_completions(const std::vector<reference::Completion>& a,
                                     const std::vector<reference::Completion>& b) {
  REQUIRE(a.size() == b.size());
  for (size_t i = 0; i < a.size(); ++i) {
    INFO("request " << a[i].id);
    CHECK(a[i].tokens == b[i].tokens);
    REQUIRE(a[i].logprobs.size() == b[i].logprobs.size());
    for (size_t t = 0; t < a[i].logprobs.size(); ++t) {
      CHECK(a[i].logprobs[t].logprob == Approx(b[i].logprobs[t].logprob).margin(1e-5));
      CHECK(a[i].logprobs[t].top.size() == b[i].logprobs[t].top.size());
    }
  }
}

}  // namespace statickv::test
