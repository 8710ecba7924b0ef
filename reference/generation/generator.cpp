// generate(): ragged-batch prefill then decode through one of the caches.

#include <statickv/cache.hpp>
#include <statickv/reference/generate.hpp>

#include <statickv/reference/prompt_cache.hpp>
#include "call.hpp"
#include "speculative_decode.hpp"

#include <ATen/CPUGeneratorImpl.h>
#include <c10/core/InferenceMode.h>
#include <torch/cuda.h>

#include <algorithm>
#include <chrono>
#include <limits>

namespace statickv::reference {

CacheKind parse_cache_kind(const std::string& name) {
  if (name == "static") return CacheKind::kStatic;
  if (name == "hybrid") return CacheKind::kHybrid;
  if (name == "dynamic") return CacheKind::kDynamic;
  TORCH_CHECK(false, "cache: expected static, hybrid or dynamic but got ", name);
}

const char* to_string(CacheKind kind) {
  switch (kind) {
    case CacheKind::kStatic:
      return "static";
    case CacheKind::kHybrid:
      return "hybrid";
    case CacheKind::kDynamic:
      return "dynamic";
  }
  return "unknown";
}

using detail::Call;
using detail::host_tensor;
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
  std::unique_ptr<Cache> cache;
  std::unique_ptr<CacheBackend> cache_backend;
  std::unique_ptr<GraphRunner> prefill_runner, decode_runner;
  std::unique_ptr<GraphRunner> verify_runner;  // speculation: q = speculate + 1
  std::unique_ptr<Cache> draft_cache;          // draft-model drafting
  std::unique_ptr<CacheBackend> draft_backend;
};

namespace {

/// Speculation's options against the model and the cache kind (before any
/// cache exists); max_chunk is checked once the cache is built.
void check_speculation(const GenerateOptions& o, const LlamaModel& model, int64_t max_len) {
  TORCH_CHECK(o.speculate >= 0, "speculate: expected >= 0 (0 = off) but got ", o.speculate);
  TORCH_CHECK(o.lookup_ngram >= 1, "lookup_ngram: expected >= 1 but got ", o.lookup_ngram);
  check_draft_model(model, o.draft_model, o.speculate);
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
  TORCH_CHECK(o.cache != CacheKind::kStatic || !model.config().has_sliding(),
              "cache: expected hybrid or dynamic for a model with sliding-window layers but got "
              "static");
  check_speculation(o, model, max_len);
  TORCH_CHECK(o.cache != CacheKind::kDynamic || o.path == DecodePath::kPlain,
              "path: expected plain with cache dynamic (the fused path writes through a static "
              "or hybrid cache's rotary_update) but got fused");
}

/// The verification step of k drafts carries k + 1 query tokens per row:
/// they must fit the cache's max_chunk (Note [ring rollback]).
void check_verify_chunk(int64_t k, const Cache& cache, const char* which) {
  const int64_t max_chunk = cache.config().effective_max_chunk();
  TORCH_CHECK(k + 1 <= max_chunk, "speculate: expected speculate + 1 = ", k + 1,
              " query tokens per verification step to fit the ", which,
              " cache's max_chunk=", max_chunk, " (raise prefill_chunk) but got speculate=", k);
}

}  // namespace

Generator::Generator(const LlamaModel& model, GenerateOptions options, int64_t max_batch,
                     int64_t max_len)
    : state_(
          new State{model, std::move(options), max_batch, max_len, 0, {}, {}, {}, {}, {}, {}, {}}) {
  c10::InferenceMode inference;
  State& s = *state_;
  check_options(s.options, model, max_batch, max_len);
  s.chunk = s.options.prefill_chunk > 0 ? std::min(s.options.prefill_chunk, max_len) : max_len;
  if (s.options.cache == CacheKind::kDynamic) return;

  CacheConfig cache_config = model.cache_config(max_batch, max_len);
  cache_config.max_chunk = s.options.prefill_chunk > 0 ? s.chunk : 0;
  cache_config.kv_storage = s.options.kv_storage;
  cache_config.host_offload = s.options.host_offload;
  if (s.options.cache == CacheKind::kStatic) {
    s.cache = std::make_unique<StaticCache>(cache_config);
  } else {
    s.cache = std::make_unique<HybridCache>(cache_config);
  }
  s.chunk = std::min(s.chunk, s.cache->config().effective_max_chunk());
  s.cache_backend = std::make_unique<CacheBackend>(*s.cache, s.options.kernel, s.options.path);
  if (s.options.speculate > 0) check_verify_chunk(s.options.speculate, *s.cache, "target");
  if (s.options.draft_model) {
    // Any layer types; the target's max_chunk, so a verification step's
    // rollback is exact in its rings too.
    CacheConfig dc = s.options.draft_model->cache_config(max_batch, max_len);
    dc.max_chunk = s.cache->config().effective_max_chunk();
    s.draft_cache = std::make_unique<HybridCache>(dc);
    s.draft_backend = std::make_unique<CacheBackend>(*s.draft_cache, s.options.kernel);
  }
  if (!s.options.bucketed) return;

  // Bucketed runners: one forward per padded key, replayed as a CUDA graph on
  // a GPU; they live as long as the session, so later calls replay what
  // earlier ones captured. Padded rows and tokens carry position -1.
  const ShapeBuckets prompt_buckets =
      s.options.prompt_buckets.value_or(ShapeBuckets::powers_of_two(s.chunk));
  const ShapeBuckets attend_buckets = s.options.attend_buckets.value_or(
      ShapeBuckets::powers_of_two(max_len, std::min<int64_t>(64, max_len)));
  TORCH_CHECK(prompt_buckets.max() >= s.chunk,
              "prompt_buckets: expected a largest bucket >= ", s.chunk,
              " (the prefill chunk) but got ", prompt_buckets.max());
  // A full chunk pads to round_up(chunk): the cache must take that many.
  const int64_t padded_chunk = prompt_buckets.round_up(s.chunk, "prompt_buckets");
  TORCH_CHECK(padded_chunk <= s.cache->config().effective_max_chunk(),
              "prompt_buckets: expected the bucket serving a full chunk of ", s.chunk,
              " tokens to be <= ", s.cache->config().effective_max_chunk(),
              " (the cache's max_chunk) but got ", padded_chunk);
  TORCH_CHECK(attend_buckets.max() == max_len, "attend_buckets: expected a largest bucket of ",
              max_len, " (max_len) but got ", attend_buckets.max());
  const std::vector<InputSpec> inputs = {{"ids", at::kLong, {}, 0},
                                         {"positions", at::kLong, {}, -1}};
  State* state = state_.get();
  auto step_of = [state](Logits logits) -> GraphRunner::StepFn {
    return [state, logits](const std::vector<at::Tensor>& in, const GraphKey& key) {
      return std::vector<at::Tensor>{
          state->model.forward(in[0], in[1], *state->cache_backend, key.attend_len, logits)};
    };
  };
  GraphRunner::Options ro;
  ro.device = model.device();
  ro.use_graphs = s.options.cuda_graphs;
  ro.batch_buckets = ShapeBuckets::powers_of_two(max_batch);
  ro.attend_buckets = attend_buckets;
  ro.query_buckets = ShapeBuckets::of({1});
  s.decode_runner = std::make_unique<GraphRunner>(inputs, step_of(Logits::kAll), ro);
  if (s.options.speculate > 0) {
    ro.query_buckets = ShapeBuckets::of({s.options.speculate + 1});
    s.verify_runner = std::make_unique<GraphRunner>(inputs, step_of(Logits::kAll), ro);
  }
  // Prefill keeps each row's last logits only: [B, vocab] per key.
  ro.query_buckets = prompt_buckets;
  ro.row_outputs = {0};
  s.prefill_runner = std::make_unique<GraphRunner>(inputs, step_of(Logits::kLast), ro);
}

Generator::~Generator() = default;

bool Generator::uses_graphs() const {
  return state_->prefill_runner && state_->prefill_runner->uses_graphs();
}

RunnerStats Generator::prefill_stats() const {
  return state_->prefill_runner ? state_->prefill_runner->stats() : RunnerStats{};
}

RunnerStats Generator::decode_stats() const {
  if (state_->verify_runner) return state_->verify_runner->stats();
  return state_->decode_runner ? state_->decode_runner->stats() : RunnerStats{};
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

namespace {

/// Checks a call's prompts against the session and returns their lengths.
std::vector<int64_t> check_prompts(const std::vector<std::vector<int64_t>>& prompts,
                                   int64_t vocab_size, int64_t max_batch, int64_t max_len,
                                   int64_t new_tokens) {
  const int64_t b = static_cast<int64_t>(prompts.size());
  TORCH_CHECK(b >= 1, "prompts: expected at least one prompt but got none");
  TORCH_CHECK(b <= max_batch, "prompts: expected at most max_batch=", max_batch,
              " prompts but got ", b);
  std::vector<int64_t> lens;
  for (int64_t r = 0; r < b; ++r) {
    const auto& prompt = prompts[static_cast<size_t>(r)];
    TORCH_CHECK(!prompt.empty(), "prompts[", r, "]: expected at least one token but got none");
    for (size_t t = 0; t < prompt.size(); ++t) {
      TORCH_CHECK(prompt[t] >= 0 && prompt[t] < vocab_size, "prompts[", r, "][", t,
                  "]: expected a token id in [0, vocab_size=", vocab_size, ") but got ", prompt[t]);
    }
    lens.push_back(static_cast<int64_t>(prompt.size()));
  }
  const int64_t longest = *std::max_element(lens.begin(), lens.end());
  // Compared as new_tokens <= max_len - longest: the sum may not fit in int64.
  TORCH_CHECK(new_tokens <= max_len - longest, "max_len: expected at least ", longest, " + ",
              new_tokens, " (longest prompt + max_new_tokens) but got ", max_len);
  return lens;
}

/// One prefill pass's inputs [b, q] (host) over prompt tokens
/// [begin, begin + q), padded with position -1 past each prompt, and the
/// rows whose prompt ends in this pass.
struct PrefillChunk {
  at::Tensor ids, positions;
  std::vector<int64_t> ending;
};

PrefillChunk pack_prefill_chunk(const std::vector<std::vector<int64_t>>& prompts,
                                const std::vector<int64_t>& lens, int64_t begin, int64_t q) {
  const int64_t b = static_cast<int64_t>(prompts.size());
  std::vector<int64_t> ids(static_cast<size_t>(b * q), 0), pos(ids.size(), -1);
  PrefillChunk chunk;
  for (int64_t r = 0; r < b; ++r) {
    const int64_t real = std::max<int64_t>(0, std::min(q, lens[r] - begin));
    for (int64_t t = 0; t < real; ++t) {
      ids[r * q + t] = prompts[r][begin + t];
      pos[r * q + t] = begin + t;
    }
    if (lens[r] > begin && lens[r] <= begin + q) chunk.ending.push_back(r);
  }
  chunk.ids = host_tensor(std::move(ids), b, q);
  chunk.positions = host_tensor(std::move(pos), b, q);
  return chunk;
}

/// Every row at its own positions, in passes of `chunk` prompt tokens. Each
/// pass returns each row's newest token's logits; a row's last prompt token
/// is in the pass that reaches its length. Returns [b, vocab] on the device.
at::Tensor prefill(const Call& call, const std::vector<std::vector<int64_t>>& prompts,
                   const std::vector<int64_t>& lens, int64_t chunk, int64_t start = 0) {
  const int64_t longest = *std::max_element(lens.begin(), lens.end());
  at::Tensor last;
  for (int64_t begin = start; begin < longest; begin += chunk) {
    const int64_t q = std::min(chunk, longest - begin);
    const PrefillChunk in = pack_prefill_chunk(prompts, lens, begin, q);
    const at::Tensor out = call.forward(call.prefill_runner, in.ids, in.positions,
                                        /*attend=*/begin + q, Logits::kLast);
    if (!last.defined()) {
      last = out.clone();
    } else {
      const at::Tensor rows =
          at::tensor(in.ending, at::TensorOptions().dtype(at::kLong)).to(out.device());
      last.index_copy_(0, rows, out.index_select(0, rows));
    }
  }
  return last;
}

/// One token for every live row; finished rows ride along as padding.
/// Returns logits [b, vocab].
at::Tensor decode_one_token(const Call& call, const Rows& rows, const std::vector<int64_t>& lens) {
  const int64_t b = static_cast<int64_t>(lens.size());
  std::vector<int64_t> ids(static_cast<size_t>(b), 0), pos(ids.size(), -1);
  int64_t attend = 1;
  for (int64_t r = 0; r < b; ++r) {
    if (rows.done[r]) continue;
    ids[r] = rows.tokens[r].back();
    pos[r] = lens[r] + static_cast<int64_t>(rows.tokens[r].size()) - 1;
    attend = std::max(attend, pos[r] + 1);
  }
  return call
      .forward(call.decode_runner, host_tensor(std::move(ids), b, 1),
               host_tensor(std::move(pos), b, 1), attend, Logits::kAll)
      .select(1, 0);
}

/// Decodes until every row is done or has new_tokens tokens; returns the
/// number of steps taken.
int64_t decode_n_tokens(Call& call, Rows& rows, const std::vector<int64_t>& lens) {
  const int64_t planned = call.new_tokens - 1;
  int64_t steps = 0;
  for (; steps < planned && !rows.all_done(); ++steps) {
    call.accept(rows, decode_one_token(call, rows, lens));
    if (call.options.on_step) call.options.on_step(steps + 1, planned);
  }
  return steps;
}

}  // namespace

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
  spec.cache = s.cache.get();
  if (s.options.draft_model) {
    // The draft model's cache starts fresh and holds each whole prompt.
    s.draft_cache->reset_rows(at::arange(s.max_batch, at::TensorOptions().dtype(at::kLong)));
    const Call draft{
        *s.options.draft_model, s.options,      s.draft_backend.get(), nullptr, nullptr,
        call.new_tokens,        call.generator, call.on_token};
    prefill(draft, prompts, lens, s.draft_cache->config().effective_max_chunk());
    spec.draft_model = s.options.draft_model;
    spec.draft_cache = s.draft_cache.get();
    spec.draft_backend = s.draft_backend.get();
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
    AttentionBackend* backend = s.cache_backend.get();
    if (s.cache) {
      s.cache->reset_rows(at::arange(s.max_batch, at::TensorOptions().dtype(at::kLong)));
      if (cached) {
        const auto restore_start = Clock::now();
        result.restored_tokens = restore_prefix(*s.cache, *cached, lens[0]);
        result.restore_seconds = seconds_since(restore_start, s.model.device());
      }
    } else {
      dynamic = std::make_unique<DynamicCache>(s.model.config(), s.options.kernel);
      backend = dynamic.get();
    }
    for (const int64_t len : lens) result.prefilled_tokens += len;
    result.prefilled_tokens -= result.restored_tokens;
    Call call{s.model,
              s.options,
              backend,
              s.prefill_runner.get(),
              s.decode_runner.get(),
              new_tokens,
              at::make_generator<at::CPUGeneratorImpl>(s.options.seed),
              on_token};
    const at::Device device = s.model.device();
    auto start = Clock::now();
    call.accept(rows, prefill(call, prompts, lens, s.chunk, result.restored_tokens));
    result.prefill_seconds = seconds_since(start, device);
    start = Clock::now();
    if (s.options.speculate > 0) {
      call.verify_runner = s.verify_runner.get();
      result.speculation = speculate(s, call, rows, prompts, lens);
      result.decode_steps = result.speculation.verify_steps;
    } else {
      result.decode_steps = decode_n_tokens(call, rows, lens);
    }
    result.decode_seconds = seconds_since(start, device);
    result.cache_bytes = s.cache ? s.cache->memory_bytes() : dynamic->memory_bytes();
    result.staging_bytes = s.cache ? s.cache->staging_bytes() : 0;
    result.host_cache_bytes = s.cache ? s.cache->host_memory_bytes() : 0;
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
  TORCH_CHECK(s.cache, "save_prompt: expected a static or hybrid cache but got dynamic");
  const std::vector<int64_t> lens =
      check_prompts({prompt}, s.model.config().vocab_size, s.max_batch, s.max_len, 0);
  c10::InferenceMode inference;
  s.cache->reset_rows(at::arange(s.max_batch, at::TensorOptions().dtype(at::kLong)));
  const TokenCallback no_callback;
  const Call call{s.model,
                  s.options,
                  s.cache_backend.get(),
                  s.prefill_runner.get(),
                  s.decode_runner.get(),
                  1,
                  at::make_generator<at::CPUGeneratorImpl>(s.options.seed),
                  no_callback};
  prefill(call, {prompt}, lens, s.chunk);
  write_prompt_cache(path, *s.cache, 0, prompt, model_id);
  return lens[0];
}

GenerateResult Generator::generate_with_prompt_cache(const std::vector<int64_t>& prompt,
                                                     const std::string& path,
                                                     int64_t max_new_tokens,
                                                     const TokenCallback& on_token,
                                                     const std::string& model_id) {
  State& s = *state_;
  TORCH_CHECK(s.cache, "prompt cache: expected a static or hybrid cache but got dynamic");
  const PromptCache cached = read_prompt_cache(path, s.cache->config(), model_id);
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
