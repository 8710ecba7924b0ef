// generate(): ragged-batch prefill then decode through one of the caches.

#include <statickv/cache.hpp>
#include <statickv/engine/generator.hpp>

#include <statickv/model/prompt_cache.hpp>
#include "call.hpp"
#include "speculative_decode.hpp"

#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace statickv::reference {

using detail::Call;
using detail::check_prompts;
using detail::decode_n_tokens;
using detail::prefill;
using detail::Rows;

namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point start, const at::Device& device) {
  if (device.is_cuda()) torch::cuda::synchronize();
  return std::chrono::duration<double>(Clock::now() - start).count();
}

}  // namespace

struct Generator::State {
  const LlamaModel& model;
  GenerateOptions options;
  int64_t max_batch;
  int64_t max_len;
  int64_t chunk;  // most prompt tokens per prefill pass
  // The head outlives the engine, whose runners' steps may pick with it.
  std::unique_ptr<SamplingHead> head;  // every row's pick (Note [sampling head])
  std::unique_ptr<Engine> engine;      // static/hybrid caches; none for dynamic
};

namespace {

/// Row r's settings: the call's, seeded with seed + r, so a prompt draws
/// what it draws alone (row 0) with that seed, here or in a Scheduler.
Sampling row_sampling(const GenerateOptions& o, int64_t r) {
  Sampling s;
  s.temperature = o.temperature;
  s.top_k = o.top_k;
  s.top_p = o.top_p;
  s.seed = o.seed + static_cast<uint64_t>(r);
  return s;
}

/// Speculation's options against the model and the cache kind (before any
/// cache exists); max_chunk is checked once the cache is built.
void check_speculation(const GenerateOptions& o, const LlamaModel& model, int64_t max_len) {
  TORCH_CHECK(o.speculate >= 0, "speculate: expected >= 0 (0 = off) but got ", o.speculate);
  TORCH_CHECK(o.lookup_ngram >= 1, "lookup_ngram: expected >= 1 but got ", o.lookup_ngram);
  // The Engine checks the draft model of a static or hybrid cache.
  if (o.cache == CacheKind::kDynamic) check_draft_model(model, o.draft_model, o.speculate);
  if (o.speculate == 0) return;
  TORCH_CHECK(o.cache != CacheKind::kDynamic,
              "speculate: expected cache=static or hybrid (rejected drafts are rolled back with "
              "Cache::rollback) but got cache=dynamic");
  TORCH_CHECK(o.speculate < max_len, "speculate: expected < max_len=", max_len, " but got ",
              o.speculate);
}

/// Every option that can be checked before a cache exists, by name.
void check_options(const GenerateOptions& o, const LlamaModel& model, int64_t max_batch,
                   int64_t max_len) {
  TORCH_CHECK(max_batch >= 1, "max_batch: expected >= 1 but got ", max_batch);
  TORCH_CHECK(max_len >= 2, "max_len: expected >= 2 but got ", max_len);
  TORCH_CHECK(o.max_new_tokens >= 1, "max_new_tokens: expected >= 1 but got ", o.max_new_tokens);
  check_sampling(row_sampling(o, 0), model.config().vocab_size);
  TORCH_CHECK(o.cache != CacheKind::kStatic || !model.config().has_sliding(),
              "cache: expected hybrid or dynamic for a model with sliding-window layers but got "
              "static");
  check_speculation(o, model, max_len);
  TORCH_CHECK(o.cache != CacheKind::kDynamic || o.path != DecodePath::kFused,
              "path: expected plain or auto with cache dynamic (the fused path writes through a "
              "static or hybrid cache's rotary_update) but got fused");
}

}  // namespace

Generator::Generator(const LlamaModel& model, GenerateOptions options, int64_t max_batch,
                     int64_t max_len)
    : state_(new State{model, std::move(options), max_batch, max_len, 0, {}, {}}) {
  c10::InferenceMode inference;
  State& s = *state_;
  check_options(s.options, model, max_batch, max_len);
  SamplingHeadOptions head;
  head.max_batch = max_batch;
  head.vocab_size = model.config().vocab_size;
  head.device = model.device();
  head.max_logprobs = 0;
  s.head = std::make_unique<SamplingHead>(head);
  s.chunk = s.options.prefill_chunk > 0 ? std::min(s.options.prefill_chunk, max_len) : max_len;
  if (s.options.cache == CacheKind::kDynamic) return;
  EngineOptions e;
  static_cast<EngineSettings&>(e) = s.options;
  e.max_batch = max_batch;
  e.max_len = max_len;
  e.max_chunk = s.options.prefill_chunk > 0 ? s.chunk : 0;
  e.prefill_chunk = s.chunk;
  e.path = s.options.path;
  e.decode_runner = true;  // q = 1 steps get their own runner, every token's logits
  s.engine = std::make_unique<Engine>(model, e, s.head.get());
  s.chunk = s.engine->prefill_chunk();
}

Generator::~Generator() = default;

bool Generator::uses_graphs() const { return state_->engine && state_->engine->uses_graphs(); }

DecodePath Generator::path() const {
  return state_->engine ? state_->engine->options().path : DecodePath::kPlain;
}

namespace {

RunnerStats stats_of(const GraphRunner* runner) { return runner ? runner->stats() : RunnerStats{}; }

}  // namespace

RunnerStats Generator::prefill_stats() const {
  return state_->engine ? stats_of(state_->engine->runner(Pass::kPrefill)) : RunnerStats{};
}

RunnerStats Generator::decode_stats() const {
  if (!state_->engine) return RunnerStats{};
  const Pass pass = state_->options.speculate > 0 ? Pass::kVerify : Pass::kDecode;
  return stats_of(state_->engine->runner(pass));
}

GenerateResult generate(const LlamaModel& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& options, int64_t max_batch, int64_t max_len) {
  TORCH_CHECK(!prompts.empty(), "prompts: expected at least one prompt but got none");
  size_t longest = 0;
  for (const auto& p : prompts) longest = std::max(longest, p.size());
  const int64_t b = static_cast<int64_t>(prompts.size());
  TORCH_CHECK(max_batch == 0 || max_batch >= b, "max_batch: expected 0 or >= ", b,
              " (the number of prompts) but got ", max_batch);
  TORCH_CHECK(max_len > 0 || options.max_new_tokens <= std::numeric_limits<int64_t>::max() -
                                                           static_cast<int64_t>(longest),
              "max_new_tokens: expected a value whose sum with the longest prompt (", longest,
              ") fits in int64 but got ", options.max_new_tokens);
  const int64_t len =
      max_len > 0 ? max_len
                  : static_cast<int64_t>(longest) + std::max<int64_t>(options.max_new_tokens, 1);
  Generator session(model, options, std::max(b, max_batch), len);
  return session.generate(prompts);
}

GenerateResult Generator::generate(const std::vector<std::vector<int64_t>>& prompts,
                                   int64_t max_new_tokens, const TokenCallback& on_token) {
  return run(prompts, max_new_tokens, on_token, nullptr);
}

namespace {

/// Restores a prompt-cache file's row into row 0 (Note [a restored row is
/// the saved row]) and returns how many prompt tokens it covers: all of
/// them but the prompt's last, which is prefilled for the first logits
/// (rollback takes back the one extra, Note [ring rollback]).
int64_t restore_prefix(Cache& cache, const PromptCache& cached, int64_t prompt_len) {
  const int64_t saved = static_cast<int64_t>(cached.ids.size());
  cache.restore_row(cached.state.to(cache.config().device), 0);
  const int64_t restored = std::min(saved, prompt_len - 1);
  if (restored < saved) cache.rollback(std::vector<int64_t>{restored});
  return restored;
}

}  // namespace

SpeculationStats Generator::speculate(State& s, detail::Call& call, detail::Rows& rows,
                                      const std::vector<std::vector<int64_t>>& prompts,
                                      const std::vector<int64_t>& lens) {
  detail::Speculator spec;
  spec.k = s.options.speculate;
  spec.ngram = s.options.lookup_ngram;
  Engine& engine = *s.engine;
  spec.cache = &engine.cache();
  if (s.options.draft_model) {
    // The draft model's cache starts fresh and holds each whole prompt.
    Cache& draft_cache = *engine.draft_cache();
    draft_cache.reset_rows(at::arange(s.max_batch, at::TensorOptions().dtype(at::kLong)));
    const Call draft{*s.options.draft_model, s.options,       nullptr,
                     engine.draft_backend(), call.new_tokens, call.on_token};
    prefill(draft, prompts, lens, draft_cache.config().effective_max_chunk());
    spec.draft_model = s.options.draft_model;
    spec.draft_cache = &draft_cache;
    spec.draft_backend = engine.draft_backend();
  }
  return detail::speculate_n_tokens(call, rows, prompts, lens, spec);
}

GenerateResult Generator::run(const std::vector<std::vector<int64_t>>& prompts,
                              int64_t max_new_tokens, const TokenCallback& on_token,
                              const PromptCache* cached) {
  State& s = *state_;
  TORCH_CHECK(max_new_tokens >= 0, "max_new_tokens: expected >= 0 (0 = the session's ",
              s.options.max_new_tokens, ") but got ", max_new_tokens);
  const int64_t new_tokens = max_new_tokens > 0 ? max_new_tokens : s.options.max_new_tokens;
  const std::vector<int64_t> lens =
      check_prompts(prompts, s.model.config().vocab_size, s.max_batch, s.max_len, new_tokens);
  GenerateResult result;
  Rows rows(prompts.size());
  {
    c10::InferenceMode inference;
    // A fresh start for every row (Note [a reset row is a fresh row]).
    std::unique_ptr<DynamicCache> dynamic;
    Cache* cache = s.engine ? &s.engine->cache() : nullptr;
    AttentionBackend* backend = s.engine ? &s.engine->backend() : nullptr;
    if (cache) {
      cache->reset_rows(at::arange(s.max_batch, at::TensorOptions().dtype(at::kLong)));
      if (cached) {
        const auto restore_start = Clock::now();
        result.restored_tokens = restore_prefix(*cache, *cached, lens[0]);
        result.restore_seconds = seconds_since(restore_start, s.model.device());
      }
    } else {
      dynamic = std::make_unique<DynamicCache>(s.model.config(), s.options.kernel);
      backend = dynamic.get();
    }
    for (const int64_t len : lens) result.prefilled_tokens += len;
    result.prefilled_tokens -= result.restored_tokens;
    Call call{s.model, s.options, s.engine.get(), backend, new_tokens, on_token, s.head.get()};
    for (size_t r = 0; r < prompts.size(); ++r) {
      s.head->set_row(static_cast<int64_t>(r), row_sampling(s.options, static_cast<int64_t>(r)),
                      prompts[r], {});
    }
    const at::Device device = s.model.device();
    auto start = Clock::now();
    call.accept(rows, prefill(call, prompts, lens, s.chunk, result.restored_tokens));
    result.prefill_seconds = seconds_since(start, device);
    start = Clock::now();
    if (s.options.speculate > 0) {
      result.speculation = speculate(s, call, rows, prompts, lens);
      result.decode_steps = result.speculation.verify_steps;
    } else {
      result.decode_steps = decode_n_tokens(call, rows, lens);
    }
    result.decode_seconds = seconds_since(start, device);
    result.cache_bytes = cache ? cache->memory_bytes() : dynamic->memory_bytes();
    result.staging_bytes = cache ? cache->staging_bytes() : 0;
    result.host_cache_bytes = cache ? cache->host_memory_bytes() : 0;
  }
  // Outside inference mode: the caller gets ordinary tensors.
  result.tokens = std::move(rows.tokens);
  if (s.options.record_logits) {
    for (auto& row : rows.logits) result.logits.push_back(at::stack(row));
  }
  result.prefill_runner = prefill_stats();
  result.decode_runner = decode_stats();
  return result;
}

int64_t Generator::save_prompt(const std::vector<int64_t>& prompt, const std::string& path,
                               const std::string& model_id) {
  State& s = *state_;
  TORCH_CHECK(s.engine, "save_prompt: expected a static or hybrid cache but got dynamic");
  Cache& cache = s.engine->cache();
  const std::vector<int64_t> lens =
      check_prompts({prompt}, s.model.config().vocab_size, s.max_batch, s.max_len, 0);
  c10::InferenceMode inference;
  cache.reset_rows(at::arange(s.max_batch, at::TensorOptions().dtype(at::kLong)));
  const TokenCallback no_callback;
  const Call call{s.model, s.options, s.engine.get(), &s.engine->backend(), 1, no_callback};
  prefill(call, {prompt}, lens, s.chunk);
  write_prompt_cache(path, cache, 0, prompt, model_id);
  return lens[0];
}

GenerateResult Generator::generate_with_prompt_cache(const std::vector<int64_t>& prompt,
                                                     const std::string& path,
                                                     int64_t max_new_tokens,
                                                     const TokenCallback& on_token,
                                                     const std::string& model_id) {
  State& s = *state_;
  TORCH_CHECK(s.engine, "prompt cache: expected a static or hybrid cache but got dynamic");
  const PromptCache cached = read_prompt_cache(path, s.engine->cache().config(), model_id);
  const size_t n = cached.ids.size();
  TORCH_CHECK(n >= 1 && n <= prompt.size(), path, ": expected at most the prompt's ", prompt.size(),
              " ids (a prefix of it) but got ", n);
  for (size_t t = 0; t < n; ++t) {
    TORCH_CHECK(cached.ids[t] == prompt[t], path, ": expected ids that are a prefix of the prompt",
                " but id ", t, " is ", cached.ids[t], " in the file and ", prompt[t],
                " in the prompt");
  }
  return run({prompt}, max_new_tokens, on_token, &cached);
}

}  // namespace statickv::reference
