// The Hugging Face cross-check: tiny random-weight Llama, Mistral and Qwen2
// checkpoints saved by transformers (tests/hf/make_reference.py, ctest's
// hf_make_reference fixture), with the tokens and raw logits transformers'
// greedy generate() produced for each prompt on its own. The reference
// decoder runs all prompts together as one ragged batch through each cache
// and must produce the same tokens and, within float32 rounding, the same
// logits. STATICKV_HF_DIR names the directory make_reference.py wrote.

#include "support.hpp"

#include <statickv/reference/generate.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace {

using statickv::LayerType;
using statickv::reference::CacheKind;
using statickv::reference::Checkpoint;
using statickv::reference::GenerateOptions;
using statickv::reference::GenerateResult;
using statickv::reference::LlamaModel;

constexpr int64_t kMaxNewTokens = 8;  // as in make_reference.py
constexpr int64_t kNumPrompts = 3;
// Both sides compute in float32 on the CPU; they differ only in the order of
// operations (fused SDPA, batched ragged rows, ring slots).
constexpr double kLogitTolerance = 1e-4;

/// What transformers generated for each prompt of one model.
struct Expected {
  std::vector<std::vector<int64_t>> prompts;    // each [len]
  std::vector<std::vector<int64_t>> generated;  // each [kMaxNewTokens]
  std::vector<at::Tensor> logits;               // each [kMaxNewTokens, vocab] float32
};

std::vector<int64_t> to_ids(const at::Tensor& t) {
  const at::Tensor ids = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
}

/// The directory of one model written by make_reference.py.
std::string model_dir(const std::string& name) {
  const char* root = std::getenv("STATICKV_HF_DIR");
  if (root == nullptr || *root == '\0') {
    FAIL(
        "STATICKV_HF_DIR is not set: run tests/hf/make_reference.py OUT_DIR and point "
        "STATICKV_HF_DIR at OUT_DIR (ctest's hf_crosscheck does both)");
  }
  const std::filesystem::path dir = std::filesystem::path(root) / name;
  if (!std::filesystem::is_regular_file(dir / "expected.safetensors") ||
      !std::filesystem::is_regular_file(dir / "config.json")) {
    FAIL(dir.string() << " lacks config.json or expected.safetensors: run "
                         "tests/hf/make_reference.py "
                      << root);
  }
  return dir.string();
}

Expected read_expected(const std::string& dir) {
  const statickv::reference::Weights tensors =
      statickv::reference::read_safetensors(dir + "/expected.safetensors");
  Expected expected;
  for (int64_t i = 0; i < kNumPrompts; ++i) {
    const std::string n = std::to_string(i);
    INFO(dir << "/expected.safetensors");
    REQUIRE(tensors.count("prompt_" + n) == 1);
    REQUIRE(tensors.count("generated_" + n) == 1);
    REQUIRE(tensors.count("logits_" + n) == 1);
    expected.prompts.push_back(to_ids(tensors.at("prompt_" + n)));
    expected.generated.push_back(to_ids(tensors.at("generated_" + n)));
    expected.logits.push_back(tensors.at("logits_" + n).to(at::kFloat).contiguous());
    REQUIRE(expected.generated.back().size() == static_cast<size_t>(kMaxNewTokens));
  }
  return expected;
}

/// Generates every prompt of `expected` as one ragged batch through each of
/// `caches` and requires transformers' tokens and logits.
void require_hugging_face_results(const Checkpoint& ckpt, const Expected& expected,
                                  const std::vector<CacheKind>& caches) {
  const LlamaModel model(ckpt.config, ckpt.weights);
  for (CacheKind cache : caches) {
    GenerateOptions options;
    options.max_new_tokens = kMaxNewTokens;
    options.cache = cache;
    options.stop_at_eos = false;
    options.record_logits = true;
    const GenerateResult result = statickv::reference::generate(model, expected.prompts, options);

    INFO("cache " << statickv::reference::to_string(cache));
    REQUIRE(result.tokens.size() == static_cast<size_t>(kNumPrompts));
    REQUIRE(result.logits.size() == static_cast<size_t>(kNumPrompts));
    for (int64_t i = 0; i < kNumPrompts; ++i) {
      INFO("prompt " << i << " (" << expected.prompts[i].size() << " tokens)");
      CHECK(result.tokens[i] == expected.generated[i]);
      const at::Tensor& logits = result.logits[i];
      REQUIRE(logits.sizes() == expected.logits[i].sizes());
      INFO("max |logit - Hugging Face logit| = " << statickv::test::max_diff(logits,
                                                                             expected.logits[i]));
      CHECK(statickv::test::close(logits, expected.logits[i], kLogitTolerance));
    }
  }
}

}  // namespace

TEST_CASE(
    "Llama through StaticCache, HybridCache and DynamicCache generates Hugging Face's tokens and "
    "logits",
    "[hf]") {
  const std::string dir = model_dir("llama");
  const Checkpoint ckpt = statickv::reference::load_checkpoint(dir, at::kFloat, at::kCPU);
  REQUIRE_FALSE(ckpt.config.has_sliding());
  require_hugging_face_results(ckpt, read_expected(dir),
                               {CacheKind::kStatic, CacheKind::kHybrid, CacheKind::kDynamic});
}

TEST_CASE(
    "Llama with attention_bias (q, k, v and o biases) generates Hugging Face's tokens and logits, "
    "ignoring the layer_types and sliding_window Llama's layers ignore",
    "[hf]") {
  const std::string dir = model_dir("llama-bias");
  const Checkpoint ckpt = statickv::reference::load_checkpoint(dir, at::kFloat, at::kCPU);
  CHECK(ckpt.config.attention_bias);
  CHECK(ckpt.config.o_proj_bias);
  REQUIRE_FALSE(ckpt.config.has_sliding());
  require_hugging_face_results(ckpt, read_expected(dir),
                               {CacheKind::kStatic, CacheKind::kHybrid, CacheKind::kDynamic});
}

TEST_CASE(
    "Mistral's sliding window on every layer through HybridCache and DynamicCache generates "
    "Hugging Face's tokens and logits",
    "[hf]") {
  const std::string dir = model_dir("mistral");
  const Checkpoint ckpt = statickv::reference::load_checkpoint(dir, at::kFloat, at::kCPU);
  // config.json has "sliding_window": 5, which transformers applies to every
  // layer, and layer_types all full, which Mistral ignores.
  CHECK(ckpt.config.sliding_window == 5);
  CHECK(ckpt.config.layer_types ==
        std::vector<LayerType>{LayerType::kSliding, LayerType::kSliding});
  require_hugging_face_results(ckpt, read_expected(dir), {CacheKind::kHybrid, CacheKind::kDynamic});
}

TEST_CASE(
    "Qwen2's full then sliding layers with q/k/v biases through HybridCache and DynamicCache "
    "generate Hugging Face's tokens and logits",
    "[hf]") {
  const std::string dir = model_dir("qwen2");
  const Checkpoint ckpt = statickv::reference::load_checkpoint(dir, at::kFloat, at::kCPU);
  // use_sliding_window with max_window_layers = 2: layers 0-1 full, 2-3 sliding.
  CHECK(ckpt.config.sliding_window == 5);
  CHECK(ckpt.config.attention_bias);
  CHECK(ckpt.config.layer_types == std::vector<LayerType>{LayerType::kFull, LayerType::kFull,
                                                          LayerType::kSliding,
                                                          LayerType::kSliding});
  require_hugging_face_results(ckpt, read_expected(dir), {CacheKind::kHybrid, CacheKind::kDynamic});
}

TEST_CASE(
    "Qwen2 ignores sliding_window without use_sliding_window and generates Hugging Face's tokens "
    "and logits",
    "[hf]") {
  const std::string dir = model_dir("qwen2-nowindow");
  const Checkpoint ckpt = statickv::reference::load_checkpoint(dir, at::kFloat, at::kCPU);
  CHECK(ckpt.config.attention_bias);
  CHECK_FALSE(ckpt.config.o_proj_bias);
  REQUIRE_FALSE(ckpt.config.has_sliding());
  require_hugging_face_results(ckpt, read_expected(dir),
                               {CacheKind::kStatic, CacheKind::kHybrid, CacheKind::kDynamic});
}

TEST_CASE(
    "Qwen2 with use_sliding_window and neither layer_types nor max_window_layers takes "
    "max_window_layers 28 and generates Hugging Face's tokens and logits",
    "[hf]") {
  const std::string dir = model_dir("qwen2-defaults");
  const Checkpoint ckpt = statickv::reference::load_checkpoint(dir, at::kFloat, at::kCPU);
  // 4 layers, all below layer 28: none slides.
  REQUIRE_FALSE(ckpt.config.has_sliding());
  require_hugging_face_results(ckpt, read_expected(dir),
                               {CacheKind::kStatic, CacheKind::kHybrid, CacheKind::kDynamic});
}
