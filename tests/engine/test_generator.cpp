// The reference decoder driving the caches: incremental decode through
// StaticCache, HybridCache and DynamicCache equals one full forward without a
// cache; greedy tokens agree across caches; generation options behave; a
// session's runner statistics are its totals.

#include "support.hpp"
#include "support/generation.hpp"
#include "support/model.hpp"

#include <statickv/engine/generator.hpp>
#include <statickv/model/checkpoint.hpp>

#include <unistd.h>

#include <filesystem>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

LlamaModel make_model(const std::string& shape, at::ScalarType dtype = at::kFloat) {
  return random_model(shape, /*seed=*/3, dtype);
}

// Logits [b, T, vocab] of every position, fed to `backend` as a prefill of
// `prompt` tokens in chunks of `chunk`, then one token per pass. Rows have
// lengths `lens` (ids past a row's length are padding).
at::Tensor incremental_logits(const LlamaModel& model, AttentionBackend& backend,
                              const at::Tensor& ids, const std::vector<int64_t>& lens,
                              int64_t prompt, int64_t chunk) {
  const int64_t b = ids.size(0);
  const int64_t total = ids.size(1);
  const at::Tensor len = at::tensor(lens, i64()).view({b, 1});
  std::vector<at::Tensor> outs;
  int64_t start = 0;
  while (start < total) {
    const int64_t q = start < prompt ? std::min(chunk, prompt - start) : 1;
    const at::Tensor pos = at::arange(start, start + q, i64()).view({1, q}).expand({b, q});
    const at::Tensor live_pos = at::where(pos.lt(len), pos, -1);
    outs.push_back(model.forward(ids.narrow(1, start, q), live_pos, backend, start + q));
    start += q;
  }
  return at::cat(outs, 1);
}

// One forward over whole sequences, no cache: a fresh DynamicCache, one pass.
at::Tensor full_forward(const LlamaModel& model, const at::Tensor& ids,
                        const std::vector<int64_t>& lens) {
  const int64_t b = ids.size(0);
  const int64_t total = ids.size(1);
  const at::Tensor pos = at::arange(total, i64()).view({1, total}).expand({b, total});
  DynamicCache once(model.config());
  return model.forward(ids, at::where(pos.lt(at::tensor(lens, i64()).view({b, 1})), pos, -1), once);
}

// Largest logit difference over the live positions of each row.
double live_diff(const at::Tensor& a, const at::Tensor& b, const std::vector<int64_t>& lens) {
  double worst = 0;
  for (size_t r = 0; r < lens.size(); ++r) {
    worst = std::max(worst, max_diff(a[r].narrow(0, 0, lens[r]), b[r].narrow(0, 0, lens[r])));
  }
  return worst;
}

}  // namespace

TEST_CASE("incremental decode through every cache equals one full forward without a cache",
          "[model][equivalence]") {
  struct Case {
    std::string shape;
    std::vector<CacheKind> caches;
  };
  const std::vector<Case> cases = {
      {"tiny", {CacheKind::kStatic, CacheKind::kHybrid, CacheKind::kDynamic}},
      {"tiny-mistral", {CacheKind::kHybrid, CacheKind::kDynamic}},
      {"tiny-qwen2", {CacheKind::kHybrid, CacheKind::kDynamic}},
  };
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (const Case& c : cases) {
      const LlamaModel model = make_model(c.shape, dtype);
      for (const std::vector<int64_t>& lens :
           {std::vector<int64_t>{21}, std::vector<int64_t>{21, 13, 17}}) {
        const int64_t b = static_cast<int64_t>(lens.size());
        const int64_t total = 21;
        at::manual_seed(5);
        const at::Tensor ids = at::randint(model.config().vocab_size, {b, total}, i64());
        const at::Tensor expected = full_forward(model, ids, lens);
        for (CacheKind kind : c.caches) {
          CacheConfig cc = model.cache_config(b, /*max_len=*/32);
          std::unique_ptr<Cache> cache;
          std::unique_ptr<AttentionBackend> backend;
          if (kind == CacheKind::kStatic) cache = std::make_unique<StaticCache>(cc);
          if (kind == CacheKind::kHybrid) cache = std::make_unique<HybridCache>(cc);
          if (cache) {
            backend = std::make_unique<CacheBackend>(*cache);
          } else {
            backend = std::make_unique<DynamicCache>(model.config());
          }
          // Prompt of 11 in chunks of up to 8 (the sliding window), then decode.
          const at::Tensor got = incremental_logits(model, *backend, ids, lens, /*prompt=*/11,
                                                    /*chunk=*/8);
          const double diff = live_diff(got, expected, lens);
          INFO(c.shape << " " << to_string(kind) << " " << dtype << " rows " << b << " max diff "
                       << diff);
          CHECK(diff <= (dtype == at::kFloat ? 1e-4 : 0.15));
        }
      }
    }
  }
}

TEST_CASE("last-token logits equal each row's newest token in the full logits", "[model][logits]") {
  for (const std::string shape : {"tiny", "tiny-qwen2", "tiny-gemma3"}) {
    const LlamaModel model = make_model(shape);
    const std::vector<int64_t> lens = {21, 13, 17, 2};
    const int64_t b = static_cast<int64_t>(lens.size());
    at::manual_seed(9);
    const at::Tensor ids = at::randint(model.config().vocab_size, {b, 21}, i64());
    const at::Tensor len = at::tensor(lens, i64()).view({b, 1});
    // Twin caches fed the same passes: one asked for every token's logits,
    // one for the last token's only.
    HybridCache every(model.cache_config(b, /*max_len=*/32));
    HybridCache last(model.cache_config(b, /*max_len=*/32));
    CacheBackend every_backend(every), last_backend(last);
    for (int64_t start = 0; start < 21; start += 8) {
      const int64_t q = std::min<int64_t>(8, 21 - start);
      const at::Tensor pos = at::arange(start, start + q, i64()).view({1, q}).expand({b, q});
      const at::Tensor live_pos = at::where(pos.lt(len), pos, -1);
      const at::Tensor chunk = ids.narrow(1, start, q);
      const at::Tensor all = model.forward(chunk, live_pos, every_backend, start + q);
      const at::Tensor got = model.forward(chunk, live_pos, last_backend, start + q, Logits::kLast);
      REQUIRE(got.sizes() == at::IntArrayRef({b, model.config().vocab_size}));
      for (int64_t r = 0; r < b; ++r) {
        const int64_t newest = std::min(lens[r], start + q) - 1 - start;
        if (newest < 0) continue;  // a row of padding in this pass
        INFO(shape << " pass at " << start << " row " << r);
        CHECK(close(got[r], all[r][newest], 1e-5));
      }
    }
  }
}

TEST_CASE("greedy generation gives identical tokens through static, hybrid and dynamic caches",
          "[model][generate]") {
  for (const std::string shape :
       {"tiny", "tiny-mistral", "tiny-qwen2", "tiny-gemma2", "tiny-gemma3"}) {
    const LlamaModel model = make_model(shape);
    const std::vector<std::vector<int64_t>> prompts = {
        {5, 9, 14, 2, 77, 31, 8, 64, 3, 19, 42, 7}, {11, 4}, {90, 13, 27, 6, 55}};
    GenerateOptions options;
    options.max_new_tokens = 20;
    options.cache = CacheKind::kDynamic;
    const GenerateResult dynamic = generate(model, prompts, options);
    options.cache = CacheKind::kHybrid;
    const GenerateResult hybrid = generate(model, prompts, options);
    INFO(shape);
    CHECK(hybrid.tokens == dynamic.tokens);
    CHECK(hybrid.tokens[0].size() == 20);
    if (!model.config().has_sliding()) {
      options.cache = CacheKind::kStatic;
      CHECK(generate(model, prompts, options).tokens == dynamic.tokens);
    }
    // Chunked prefill (3 tokens per pass) changes nothing.
    options.cache = CacheKind::kHybrid;
    options.prefill_chunk = 3;
    CHECK(generate(model, prompts, options).tokens == dynamic.tokens);
  }
}

TEST_CASE("the fused and the reference attention kernels give the same logits",
          "[model][kernels]") {
  const LlamaModel model = make_model("tiny-qwen2");
  const std::vector<std::vector<int64_t>> prompts = {{1, 2, 3, 4, 5, 6, 7, 8, 9}, {10, 11}};
  GenerateOptions options;
  options.max_new_tokens = 6;
  options.record_logits = true;
  const GenerateResult fused = generate(model, prompts, options);
  options.kernel = AttentionKernel::kReference;
  const GenerateResult plain = generate(model, prompts, options);
  CHECK(fused.tokens == plain.tokens);
  for (size_t r = 0; r < prompts.size(); ++r) CHECK(close(fused.logits[r], plain.logits[r], 1e-4));
}

TEST_CASE("sampling is reproducible for a seed and EOS ends a row early", "[model][generate]") {
  ModelConfig config = named_config("tiny");
  const Weights weights = random_weights(config, 3, at::kFloat, at::kCPU);
  const std::vector<std::vector<int64_t>> prompts = {{3, 1, 4, 1, 5}, {9, 2, 6}};
  {
    const LlamaModel model(config, weights);
    GenerateOptions options;
    options.max_new_tokens = 12;
    options.temperature = 1.5;
    options.top_k = 20;
    options.seed = 42;
    const GenerateResult a = generate(model, prompts, options);
    const GenerateResult b = generate(model, prompts, options);
    CHECK(a.tokens == b.tokens);
    options.seed = 43;
    CHECK(generate(model, prompts, options).tokens != a.tokens);
    // Nucleus sampling: a top_p that only the most likely token reaches is
    // greedy; a looser one draws other tokens for the same seed.
    options.top_k = 0;
    options.top_p = 1e-6;
    GenerateOptions greedy_options = options;
    greedy_options.temperature = 0;
    greedy_options.top_p = 1;
    CHECK(generate(model, prompts, options).tokens ==
          generate(model, prompts, greedy_options).tokens);
    options.top_p = 0.9;
    const GenerateResult nucleus = generate(model, prompts, options);
    CHECK(nucleus.tokens == generate(model, prompts, options).tokens);
    CHECK(nucleus.tokens != generate(model, prompts, greedy_options).tokens);
  }
  // Make row 0's third greedy token an EOS id: row 0 stops there, row 1 goes on.
  GenerateOptions greedy;
  greedy.max_new_tokens = 10;
  const std::vector<std::vector<int64_t>> free_run =
      generate(LlamaModel(config, weights), prompts, greedy).tokens;
  config.eos_token_ids = {free_run[0][2]};
  const GenerateResult stopped = generate(LlamaModel(config, weights), prompts, greedy);
  CHECK(stopped.tokens[0] == std::vector<int64_t>(free_run[0].begin(), free_run[0].begin() + 3));
  const auto first_eos = std::find(free_run[1].begin(), free_run[1].end(), free_run[0][2]);
  CHECK(stopped.tokens[1] ==
        std::vector<int64_t>(free_run[1].begin(),
                             first_eos == free_run[1].end() ? free_run[1].end() : first_eos + 1));
}

TEST_CASE("generate and the model reject bad arguments by name", "[model][errors]") {
  const LlamaModel model = make_model("tiny");
  GenerateOptions options;
  require_error([&] { generate(model, {}, options); }, {"prompts", "none"});
  require_error([&] { generate(model, {{1, 2}, {}}, options); }, {"prompts[1]", "none"});
  require_error(
      [&] {
        generate(model, {{1, 500}}, options);
      },
      {"prompts[0][1]", "vocab_size=128", "500"});
  options.max_new_tokens = 0;
  require_error([&] { generate(model, {{1}}, options); }, {"max_new_tokens", "got 0"});
  options.max_new_tokens = 4;
  options.top_p = 0.5;  // without sampling
  require_error([&] { generate(model, {{1}}, options); }, {"top_p", "1 without sampling", "0.5"});
  options.temperature = 1.0, options.top_p = 1.5;
  require_error([&] { generate(model, {{1}}, options); }, {"top_p", "(0, 1]", "1.5"});
  options.temperature = 0.0, options.top_p = 1.0;
  require_error([&] { generate(model, {{1}}, options, /*max_batch=*/0, /*max_len=*/3); },
                {"max_len", "got 3"});
  options.max_new_tokens = std::numeric_limits<int64_t>::max();
  require_error(
      [&] {
        generate(model, {{1, 2}}, options);
      },
      {"max_new_tokens", "longest prompt (2)", "fits in int64"});
  {
    // Per-call limits and bucket options are checked before any work.
    options.max_new_tokens = 4;
    Generator session(model, options, /*max_batch=*/1, /*max_len=*/16);
    require_error(
        [&] {
          session.generate({{1, 2}}, std::numeric_limits<int64_t>::max());
        },
        {"max_len", "2 + 9223372036854775807", "got 16"});
    require_error([&] { session.generate({{1, 2}}, -1); }, {"max_new_tokens", ">= 0", "got -1"});
    GenerateOptions bad = options;
    bad.prefill_chunk = 5;
    bad.prompt_buckets = ShapeBuckets::powers_of_two(8);
    require_error([&] { Generator g(model, bad, 1, 16); },
                  {"prompt_buckets", "full chunk of 5", "<= 5", "got 8"});
    bad.prompt_buckets = ShapeBuckets::of({2, 4});
    require_error([&] { Generator g(model, bad, 1, 16); },
                  {"prompt_buckets", "largest bucket >= 5", "got 4"});
    bad.prompt_buckets.reset();
    bad.attend_buckets = ShapeBuckets::powers_of_two(8);
    require_error([&] { Generator g(model, bad, 1, 16); },
                  {"attend_buckets", "largest bucket of 16", "got 8"});
  }
  const LlamaModel sliding = make_model("tiny-mistral");
  options.cache = CacheKind::kStatic;
  require_error([&] { generate(sliding, {{1}}, options); }, {"cache", "static"});
  ModelConfig config = named_config("tiny");
  Weights weights = random_weights(config, 1, at::kFloat, at::kCPU);
  weights.erase("model.layers.1.mlp.up_proj.weight");
  require_error([&] { LlamaModel broken(config, weights); },
                {"model.layers.1.mlp.up_proj.weight", "missing"});
}

TEST_CASE("a session serves later calls with their own token limits and batch sizes",
          "[model][generate]") {
  const LlamaModel model = make_model("tiny-qwen2");
  const std::vector<std::vector<int64_t>> prompts = {{5, 9, 14, 2, 77, 31, 8}, {11, 4, 60}};
  GenerateOptions options;
  options.max_new_tokens = 8;
  options.stop_at_eos = false;
  Generator session(model, options, /*max_batch=*/4, /*max_len=*/32);
  const GenerateResult full = session.generate(prompts);
  REQUIRE(full.tokens[0].size() == 8);
  const GenerateResult shorter = session.generate(prompts, /*max_new_tokens=*/3);
  for (size_t r = 0; r < prompts.size(); ++r) {
    CHECK(shorter.tokens[r] ==
          std::vector<int64_t>(full.tokens[r].begin(), full.tokens[r].begin() + 3));
  }
  CHECK(shorter.decode_steps == 2);
  const GenerateResult alone = session.generate({prompts[1]});
  CHECK(alone.tokens[0] == full.tokens[1]);
  // Stats are the session's totals: three calls' prefill passes so far.
  int64_t prefill_runs = 0;
  for (const KeyStats& k : session.prefill_stats().keys) prefill_runs += k.runs;
  CHECK(prefill_runs == 3);
  CHECK(session.uses_graphs() == false);  // a CPU session runs its buckets eagerly
}

TEST_CASE("bucketed generation (the GraphRunner path) equals plain eager generation",
          "[model][runner]") {
  for (const std::string shape : {"tiny", "tiny-qwen2", "tiny-gemma2"}) {
    INFO(shape);
    // 3 live rows padded to a bucket of 4 in a 6-row cache.
    const GenerateResult bucketed = require_bucketed_equals_plain(
        make_model(shape), /*new_tokens=*/9, /*max_batch=*/6, /*tol=*/1e-4);
    // Decode: 8 steps, one key: batch 4, q 1, attend max_len = 13 + 9 (the
    // only attend bucket when max_len < 64); prefill: one chunk.
    CHECK(bucketed.decode_runner.eager_runs == 8);
    CHECK(bucketed.decode_runner.keys.size() == 1);
    CHECK(bucketed.decode_runner.keys[0].key == GraphKey{4, 1, 22});
    CHECK(bucketed.decode_runner.keys[0].padded_fraction() == Approx(0.25));
    CHECK(bucketed.prefill_runner.keys.size() >= 1);
  }
}

TEST_CASE("on_token streams every generated token in order and marks each row's last",
          "[model][generate]") {
  ModelConfig config = named_config("tiny");
  const Weights weights = random_weights(config, 3, at::kFloat, at::kCPU);
  const std::vector<std::vector<int64_t>> prompts = {{3, 1, 4, 1, 5}, {9, 2, 6}, {7}};
  GenerateOptions options;
  options.max_new_tokens = 9;
  // Row 0 stops early at an eos id: its third greedy token.
  const std::vector<std::vector<int64_t>> free_run =
      generate(LlamaModel(config, weights), prompts, options).tokens;
  config.eos_token_ids = {free_run[0][2]};
  const LlamaModel model(config, weights);
  for (const CacheKind kind : {CacheKind::kStatic, CacheKind::kDynamic}) {
    INFO(to_string(kind));
    options.cache = kind;
    Generator session(model, options, /*max_batch=*/4, /*max_len=*/32);
    std::vector<std::vector<int64_t>> streamed(prompts.size());
    std::vector<int> lasts(prompts.size(), 0);
    const GenerateResult result =
        session.generate(prompts, 0, [&](int64_t row, int64_t token, bool last) {
          REQUIRE(row >= 0);
          REQUIRE(row < static_cast<int64_t>(prompts.size()));
          CHECK(lasts[row] == 0);  // nothing after a row's last token
          streamed[row].push_back(token);
          lasts[row] += last ? 1 : 0;
        });
    CHECK(streamed == result.tokens);
    CHECK(lasts == std::vector<int>(prompts.size(), 1));
    CHECK(result.tokens[0].size() == 3);
    CHECK(result.tokens[0].back() == free_run[0][2]);
  }
}

TEST_CASE("a prompt restored from a prompt-cache file generates what prefilling it generates",
          "[model][prompt_cache]") {
  // Restore then decode equals prefill then decode: the file is written by
  // one Generator and read by another, as two processes would.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("statickv-test-prompt-" + std::to_string(::getpid()) + ".safetensors"))
                               .string();
  std::vector<int64_t> prefix;
  for (int64_t t = 0; t < 20; ++t) prefix.push_back((t * 7 + 3) % 120);
  std::vector<int64_t> prompt = prefix;
  for (int64_t t : {5, 9, 11, 2, 40, 41, 42, 7, 7, 1}) prompt.push_back(t);
  for (const std::string shape : {"tiny", "tiny-mistral"}) {
    for (const bool bucketed : {true, false}) {
      INFO(shape << (bucketed ? ", bucketed" : ", eager"));
      const LlamaModel model = make_model(shape);
      GenerateOptions options;
      options.max_new_tokens = 12;
      options.stop_at_eos = false;
      options.bucketed = bucketed;
      Generator saver(model, options, /*max_batch=*/2, /*max_len=*/64);
      CHECK(saver.save_prompt(prefix, path, shape) == 20);
      Generator session(model, options, /*max_batch=*/2, /*max_len=*/64);
      const GenerateResult plain = session.generate({prompt});
      const GenerateResult cached = session.generate_with_prompt_cache(prompt, path, 0, {}, shape);
      CHECK(cached.restored_tokens == 20);
      CHECK(cached.prefilled_tokens == 10);
      CHECK(cached.tokens == plain.tokens);
      // The whole prompt saved: all but its last token restored.
      const GenerateResult whole = session.generate_with_prompt_cache(prefix, path, 0, {}, shape);
      CHECK(whole.restored_tokens == 19);
      CHECK(whole.tokens == session.generate({prefix}).tokens);
      require_error(
          [&] {
            session.generate_with_prompt_cache({1, 2, 3}, path, 0, {}, shape);
          },
          {"at most the prompt's 3 ids", "got 20"});
      std::vector<int64_t> other = prompt;
      other[4] += 1;
      require_error([&] { session.generate_with_prompt_cache(other, path, 0, {}, shape); },
                    {"prefix of the prompt", "id 4"});
      require_error([&] { session.generate_with_prompt_cache(prompt, path, 0, {}, "other"); },
                    {"fingerprint model_id"});
    }
  }
  std::filesystem::remove(path);
}

TEST_CASE("the fused decoder path generates the plain path's tokens and logits for every family",
          "[model][fused]") {
  // Note [fused decode path]: the same math in fewer kernels, float32 here,
  // so the two differ only in rounding order (rms_norm, folded residuals,
  // Gemma's 1 + weight and the query scale folded into the norm weights).
  for (const std::string shape : {"tiny", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2",
                                  "tiny-gemma3", "tiny-phi3"}) {
    const LlamaModel model = make_model(shape);
    for (bool bucketed : {false, true}) {
      INFO(shape << (bucketed ? ", bucketed" : ", eager"));
      GenerateOptions options;
      options.max_new_tokens = 10;
      options.bucketed = bucketed;
      options.prefill_chunk = bucketed ? 0 : 4;  // chunked prefill through the ring too
      require_fused_equals_plain(model, options, 1e-4);
    }
  }
}

TEST_CASE("the fused path is refused with the dynamic cache, naming both options",
          "[model][fused][errors]") {
  const LlamaModel model = make_model("tiny");
  GenerateOptions options;
  options.cache = CacheKind::kDynamic;
  options.path = DecodePath::kFused;
  CHECK_THROWS_WITH(generate(model, {{1, 2, 3}}, options),
                    Catch::Contains("path: expected plain or auto with cache dynamic"));
}

TEST_CASE("generation with host offload equals generation with the cache on the device",
          "[model][offload]") {
  // Note [host offload]: the same steps over staged copies of the same
  // buffers, laid out alike, so tokens and logits are bit for bit the same.
  for (const std::string shape : {"tiny", "tiny-mistral", "tiny-qwen2"}) {
    const LlamaModel model = make_model(shape);
    for (bool bucketed : {false, true}) {
      for (int64_t speculate : {0, 3}) {
        INFO(shape << (bucketed ? ", bucketed" : ", eager") << ", speculate " << speculate);
        GenerateOptions options;
        options.max_new_tokens = 10;
        options.bucketed = bucketed;
        options.prefill_chunk = bucketed ? 0 : 4;
        options.speculate = speculate;
        options.record_logits = true;
        options.path = DecodePath::kPlain;  // offload's path (auto would take fused here)
        const GenerateResult device = generate(model, ragged_prompts(), options);
        options.host_offload = true;
        const GenerateResult offloaded = generate(model, ragged_prompts(), options);
        CHECK(offloaded.tokens == device.tokens);
        for (size_t r = 0; r < ragged_prompts().size(); ++r) {
          CHECK(bit_identical(offloaded.logits[r], device.logits[r]));
        }
      }
    }
  }
}

TEST_CASE("host offload is refused with the fused path and quantized storage, naming both",
          "[model][offload][errors]") {
  const LlamaModel model = make_model("tiny");
  GenerateOptions options;
  options.host_offload = true;
  options.path = DecodePath::kFused;
  CHECK_THROWS_WITH(generate(model, {{1, 2, 3}}, options),
                    Catch::Contains("host_offload") && Catch::Contains("fused rotary write"));
  options.path = DecodePath::kPlain;
  options.kv_storage = KvStorage::kInt8;
  CHECK_THROWS_WITH(generate(model, {{1, 2, 3}}, options),
                    Catch::Contains("host_offload") && Catch::Contains("kv_storage=int8"));
}

TEST_CASE("auto takes the fused path wherever it applies and the plain path elsewhere",
          "[model][fused]") {
  // Note [fused decode path]: every family, a cache of compute storage in
  // device memory; quantized storage and host offload keep the plain path.
  for (const std::string shape : {"tiny", "tiny-qwen3", "tiny-gemma3"}) {
    const LlamaModel model = make_model(shape);
    CacheConfig config = model.cache_config(2, 16);
    INFO(shape);
    CHECK(model.resolve_path(DecodePath::kAuto, config) == DecodePath::kFused);
    CHECK(model.resolve_path(DecodePath::kPlain, config) == DecodePath::kPlain);
    config.kv_storage = KvStorage::kInt8;
    CHECK(model.resolve_path(DecodePath::kAuto, config) == DecodePath::kPlain);
    config.kv_storage = KvStorage::kCompute;
    config.host_offload = true;
    CHECK(model.resolve_path(DecodePath::kAuto, config) == DecodePath::kPlain);
  }
  const LlamaModel model = make_model("tiny-gemma3");
  GenerateOptions options;
  options.cache = CacheKind::kHybrid;
  options.max_new_tokens = 2;
  Generator fused(model, options, 1, 16);
  CHECK(fused.path() == DecodePath::kFused);
  options.kv_storage = KvStorage::kInt8;
  Generator quantized(model, options, 1, 16);
  CHECK(quantized.path() == DecodePath::kPlain);
}

TEST_CASE("the rope table gives the computed rope's logits in fewer launches", "[model][rope]") {
  // Note [rope table]: a pass with attend_len within the table gathers cos
  // and sin; one without computes them. Both must give the same logits,
  // with every family's rope (Gemma 3: a second rope for sliding layers).
  c10::InferenceMode inference;
  for (const std::string shape : {"tiny", "tiny-gemma3"}) {
    const LlamaModel model = make_model(shape);
    const ModelConfig& c = model.config();
    const at::Tensor ids =
        at::tensor(std::vector<int64_t>{3, 9, 27, 81, 14, 42}, i64()).view({2, 3});
    const at::Tensor pos = at::tensor(std::vector<int64_t>{0, 1, 2, -1, 0, 1}, i64()).view({2, 3});
    auto logits = [&](int64_t attend, int64_t* launches) {
      HybridCache cache(model.cache_config(2, 16));
      CacheBackend backend(cache, AttentionKernel::kSdpa, DecodePath::kFused);
      OpCounter ops;
      const at::Tensor out = model.forward(ids, pos, backend, attend, Logits::kAll);
      *launches = ops.counts().launches - ops.counts().launches_in(kLayerRegion);
      return out;
    };
    int64_t tabled = 0, computed = 0;
    const at::Tensor a = logits(3, &tabled), b = logits(-1, &computed);
    // The real tokens' logits (a padded token's output is never used).
    const at::Tensor real = pos.ge(0);
    INFO(shape << ": max diff " << max_diff(a.index({real}), b.index({real})));
    CHECK(close(a.index({real}), b.index({real}), 1e-5));
    // Per rope: one gather instead of the product, cos and sin.
    CHECK(computed - tabled == (c.sliding_rope ? 4 : 2));
  }
}

TEST_CASE("decode_stats holds the session's decode or verification steps, none without buckets",
          "[model][runner]") {
  const LlamaModel model = make_model("tiny");
  const std::vector<std::vector<int64_t>> prompts = {{5, 9, 14}, {11, 4}};
  GenerateOptions options;
  options.max_new_tokens = 5;
  options.stop_at_eos = false;
  Generator session(model, options, /*max_batch=*/4, /*max_len=*/32);
  CHECK(session.decode_stats().keys.empty());  // nothing ran yet
  const GenerateResult first = session.generate(prompts);
  // The first token comes from the prefill: 4 decode steps of 2 rows in
  // batch bucket 2, attending max_len (the only attend bucket below 64).
  RunnerStats decode = session.decode_stats();
  CHECK(decode.eager_runs == 4);
  REQUIRE(decode.keys.size() == 1);
  CHECK(decode.keys[0].key == GraphKey{2, 1, 32});
  CHECK(decode.keys[0].runs == 4);
  CHECK(first.decode_runner.eager_runs == 4);
  session.generate(prompts, /*max_new_tokens=*/3);
  decode = session.decode_stats();  // the session's totals
  CHECK(decode.eager_runs == 4 + 2);
  CHECK(decode.keys[0].runs == 6);
  CHECK(decode.replays == 0);  // the CPU runs its buckets eagerly
  options.bucketed = false;
  Generator eager(model, options, 4, 32);
  eager.generate(prompts);
  CHECK(eager.decode_stats().keys.empty());
  CHECK(eager.decode_stats().eager_runs == 0);
  // Speculating, the decode steps are verification steps of speculate + 1 tokens.
  options.bucketed = true;
  options.speculate = 2;
  Generator speculating(model, options, 4, 32);
  speculating.generate(prompts);
  REQUIRE_FALSE(speculating.decode_stats().keys.empty());
  for (const KeyStats& k : speculating.decode_stats().keys) CHECK(k.key.query_len == 3);
}
