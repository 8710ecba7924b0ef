#pragma once
// Test support for the reference decoder's generation paths (Catch2).

#include "../support.hpp"

#include <statickv/reference/generator.hpp>
#include <statickv/reference/scheduler.hpp>

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

}  // namespace statickv::test
