// Models compiled ahead of time with AOTInductor (examples/aoti/export.py,
// ctest's aoti_package_* fixtures) run on statickv's caches from C++: the
// packaged decoder, driven by statickv::aoti::greedy_generate over one cache,
// must generate transformers' tokens and logits (tests/reference/hf) and the reference
// decoder's, for ragged batches smaller than max_batch; the cache's buffers
// never move; and a package built for another cache is refused before it runs.
// STATICKV_HF_DIR: make_reference.py's directory; STATICKV_AOTI_DIR: the packages'.

#include "support/hf.hpp"

#include <statickv/aoti/fingerprint.hpp>
#include <statickv/aoti/package_decoder.hpp>
#include <statickv/engine/generator.hpp>
#include <statickv/model/checkpoint.hpp>

#include <torch/csrc/inductor/aoti_package/model_package_loader.h>

namespace {

using namespace statickv;
using statickv::aoti::PackageDecoder;
using statickv::reference::LlamaModel;

// The cache every package of ctest's fixture is built for (tests/CMakeLists.txt).
constexpr int64_t kMaxBatch = 4;
constexpr int64_t kMaxLen = 40;
constexpr int64_t kMaxChunk = 16;
constexpr double kLogitTolerance = 1e-4;  // float32 on the CPU, as the [hf] cross-check

std::string package(const std::string& name) {
  const auto dir = test::env_dir("STATICKV_AOTI_DIR",
                                 "point it at the packages examples/aoti/export.py wrote "
                                 "(ctest's aoti_package_* fixtures do)");
  return (dir / (name + ".pt2")).string();
}

struct Loaded {
  test::HfExpected expected;
  std::unique_ptr<LlamaModel> model;
};

Loaded load(const std::string& name) {
  const std::string dir = test::hf_model_dir(name);
  reference::Checkpoint ckpt = reference::load_checkpoint(dir, at::kFloat, at::kCPU);
  return {test::read_hf_expected(dir),
          std::make_unique<LlamaModel>(ckpt.config, std::move(ckpt.weights))};
}

/// The cache the fixture's packages are built for.
CacheConfig cache_config(const LlamaModel& model) {
  CacheConfig config = model.cache_config(kMaxBatch, kMaxLen);
  if (config.has_type(LayerType::kSliding)) config.max_chunk = kMaxChunk;
  return config;
}

aoti::GreedyResult run(PackageDecoder& decoder, const std::vector<std::vector<int64_t>>& prompts,
                       int64_t new_tokens) {
  return aoti::greedy_generate(decoder, prompts, new_tokens,
                               ShapeBuckets::of({8, 16, 32, kMaxLen}));
}

/// transformers' tokens and logits for every prompt, all three as one ragged
/// batch (3 of 4 rows) and each alone (batch 1), on one cache; then the
/// reference decoder's on a prompt longer than one prefill chunk.
void require_hugging_face_results(const std::string& name) {
  c10::InferenceMode inference;
  const Loaded m = load(name);
  HybridCache cache(cache_config(*m.model));
  const std::vector<const void*> before = test::addresses(cache);
  PackageDecoder decoder(package(name), cache);
  CHECK(decoder.path() == package(name));
  CHECK(&decoder.cache() == &cache);
  CHECK(decoder.vocab_size() == m.model->config().vocab_size);

  const aoti::GreedyResult batch = run(decoder, m.expected.prompts, test::kHfMaxNewTokens);
  for (int64_t i = 0; i < test::kHfNumPrompts; ++i) {
    INFO(name << " prompt " << i << " in a ragged batch of " << test::kHfNumPrompts);
    CHECK(batch.tokens[i] == m.expected.generated[i]);
    INFO("max |logit - Hugging Face| " << test::max_diff(batch.logits[i], m.expected.logits[i]));
    CHECK(test::close(batch.logits[i], m.expected.logits[i], kLogitTolerance));

    const aoti::GreedyResult alone = run(decoder, {m.expected.prompts[i]}, test::kHfMaxNewTokens);
    CHECK(alone.tokens[0] == m.expected.generated[i]);
  }

  // Two prefill chunks (16 + 14 tokens) beside a short row, against the
  // reference decoder on a plain cache.
  std::vector<int64_t> long_prompt;
  for (int64_t t = 0; t < 30; ++t) long_prompt.push_back(3 + (t * 37) % 90);
  const std::vector<std::vector<int64_t>> prompts = {long_prompt, m.expected.prompts[1]};
  reference::GenerateOptions options;
  options.max_new_tokens = 8;
  options.stop_at_eos = false;
  options.record_logits = true;
  const reference::GenerateResult want = reference::generate(*m.model, prompts, options);
  const aoti::GreedyResult got = run(decoder, prompts, 8);
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO(name << " chunked prompt " << i);
    CHECK(got.tokens[i] == want.tokens[i]);
    CHECK(test::close(got.logits[i], want.logits[i], kLogitTolerance));
  }
  CHECK(test::addresses(cache) == before);
}

}  // namespace

TEST_CASE("an AOTInductor-compiled Llama on a statickv cache generates Hugging Face's tokens",
          "[aoti]") {
  require_hugging_face_results("llama");
}

TEST_CASE(
    "an AOTInductor-compiled Mistral (every layer a sliding ring) generates Hugging Face's tokens",
    "[aoti]") {
  require_hugging_face_results("mistral");
}

TEST_CASE(
    "an AOTInductor-compiled Qwen2 (full then sliding layers, q/k/v biases) generates Hugging "
    "Face's tokens",
    "[aoti]") {
  require_hugging_face_results("qwen2");
}

TEST_CASE("a package built for another cache is refused before it runs, naming the field",
          "[aoti]") {
  c10::InferenceMode inference;
  const Loaded m = load("llama");
  const CacheConfig good = cache_config(*m.model);
  auto refused = [&](CacheConfig config, const std::string& field) {
    HybridCache cache(config);
    const test::Snapshot before(cache);
    INFO("expected a refusal naming " << field);
    CHECK_THROWS_WITH(PackageDecoder(package("llama"), cache),
                      Catch::Contains(field) && Catch::Contains("built for"));
    CHECK(before.same_as(cache));
  };
  CacheConfig other = good;
  other.max_len = kMaxLen + 8;
  refused(other, "statickv.capacities=40,40 but the cache has statickv.capacities=48,48");
  other = good;
  other.max_batch = 2;
  refused(other, "statickv.max_batch=4 but the cache has statickv.max_batch=2");
  other = good;
  other.dtype = at::kDouble;
  refused(other, "statickv.dtype=Float but the cache has statickv.dtype=Double");
  other = good;
  other.layer_types = {LayerType::kFull, LayerType::kSliding};
  other.sliding_window = 5;
  other.max_chunk = kMaxChunk;
  refused(other,
          "statickv.layer_types=full,full but the cache has statickv.layer_types=full,sliding");

  for (const bool offload : {false, true}) {
    CacheConfig stored = good;
    stored.kv_storage = offload ? KvStorage::kCompute : KvStorage::kInt8;
    stored.host_offload = offload;
    HybridCache quantized(stored);
    CHECK_THROWS_WITH(PackageDecoder(package("llama"), quantized),
                      Catch::Contains(offload ? "host_offload=1" : "kv_storage=int8") &&
                          Catch::Contains("expected kv_storage=compute and host_offload=0"));
  }

  HybridCache cache(good);
  PackageDecoder decoder(package("llama"), cache);
  CHECK(decoder.max_query() == kMaxChunk);
  const at::Tensor ids = at::zeros({1, kMaxChunk + 1}, at::kLong);
  const at::Tensor pos = at::arange(kMaxChunk + 1, at::kLong).view({1, -1});
  CHECK_THROWS_WITH(decoder.forward(ids, pos, kMaxLen),
                    Catch::Contains("ids: expected 1 <= q <= the package's max_query=16"));
  CHECK(cache.seq_lengths().sum().item<int64_t>() == 0);
}
