// config.json (load_config, load_generation_eos): each model type's fields
// read as transformers' config class reads them, defaults included.

#include "checkpoint_files.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/prompt_cache.hpp>

#include <cmath>
#include <filesystem>
#include <string>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;
using namespace statickv::test::checkpoint;

// ---------------------------------------------------------------------------
// config.json

TEST_CASE("llama3 rope is read from rope_parameters and from rope_scaling alike", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig v5 = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "llama",
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192})"));
  const ModelConfig v4 = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "llama",
    "rope_scaling": {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"));
  for (const ModelConfig& c : {v5, v4}) {
    CHECK(c.rope.type == "llama3");
    CHECK(c.rope.factor == 32.0);
    CHECK(c.rope.low_freq_factor == 1.0);
    CHECK(c.rope.high_freq_factor == 4.0);
    CHECK(c.rope.original_max_position_embeddings == 8192);
  }
  CHECK(v5.rope.theta == 500000.0);
  CHECK(v4.rope.theta == 10000.0);  // the top-level rope_theta
}

TEST_CASE("mistral with a sliding_window makes every layer sliding", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c =
      config_from_text(tmp, tiny_config_with(R"("model_type": "mistral", "sliding_window": 8)"));
  CHECK(c.model_type == "mistral");
  CHECK(c.layer_types == all_sliding(4));
  CHECK(c.sliding_window == 8);
  CHECK_FALSE(c.attention_bias);
}

TEST_CASE("mistral with sliding_window null has only full layers", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c =
      config_from_text(tmp, tiny_config_with(R"("model_type": "mistral", "sliding_window": null)"));
  CHECK_FALSE(c.has_sliding());
  CHECK(c.sliding_window == 0);
}

TEST_CASE("qwen2 with use_sliding_window false ignores its sliding_window and has q/k/v biases",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "qwen2", "use_sliding_window": false, "sliding_window": 4096,
    "max_window_layers": 2, "attention_bias": false)"));
  CHECK_FALSE(c.has_sliding());
  CHECK(c.sliding_window == 0);
  CHECK(c.attention_bias);
}

TEST_CASE("qwen2 with use_sliding_window true slides the layers from max_window_layers on",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "qwen2", "use_sliding_window": true, "sliding_window": 8,
    "max_window_layers": 3)"));
  using T = LayerType;
  CHECK(c.layer_types == std::vector<T>{T::kFull, T::kFull, T::kFull, T::kSliding});
  CHECK(c.sliding_window == 8);
}

TEST_CASE("layer_types lists each layer's attention", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "qwen2", "use_sliding_window": true, "sliding_window": 8,
    "max_window_layers": 0,
    "layer_types": ["full_attention", "full_attention", "sliding_attention",
                    "sliding_attention"])"));
  check_same_config(c, named_config("tiny-qwen2"));
}

TEST_CASE("gemma2 on its class defaults: alternating layers, soft-caps 50 and 30, Gemma's math",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"("model_type": "gemma2")"));
  using T = LayerType;
  CHECK(c.layer_types == std::vector<T>{T::kSliding, T::kFull, T::kSliding, T::kFull});
  CHECK(c.sliding_window == 4096);
  CHECK(c.attn_logit_softcapping == 50.0);
  CHECK(c.final_logit_softcapping == 30.0);
  CHECK(c.query_pre_attn_scalar == 256.0);
  CHECK(c.head_dim == 256);  // Gemma2Config's default, not hidden_size / heads
  CHECK(c.tie_word_embeddings);
  CHECK(c.norm_style == NormStyle::kGemma);
  CHECK(c.sandwich_norms);
  CHECK(c.scale_embeddings);
  CHECK(c.hidden_act == Activation::kGeluTanh);
  CHECK_FALSE(c.qk_norm);
  CHECK_FALSE(c.sliding_rope.has_value());
  CHECK(c.eos_token_ids == std::vector<int64_t>{1});
}

TEST_CASE("gemma3_text without layer_types has a full layer every sliding_window_pattern layers",
          "[checkpoint]") {
  TempDir tmp;
  using T = LayerType;
  const ModelConfig c = config_from_text(
      tmp, tiny_config_with(R"("model_type": "gemma3_text", "sliding_window_pattern": 2,
                               "sliding_window": 16, "final_logit_softcapping": null,
                               "attn_logit_softcapping": 50.0)"));
  CHECK(c.layer_types == std::vector<T>{T::kSliding, T::kFull, T::kSliding, T::kFull});
  CHECK(c.sliding_window == 16);
  CHECK(c.final_logit_softcapping == 0);
  // transformers 5.24's Gemma 3 attention never passes its soft-cap on.
  CHECK(c.attn_logit_softcapping == 0);
  CHECK(c.qk_norm);
}

TEST_CASE(
    "gemma3_text's older rope fields: rope_theta and rope_scaling for full layers, "
    "rope_local_base_freq for sliding ones",
    "[checkpoint]") {
  TempDir tmp;
  // tiny_config_with sets "rope_theta": 10000.0.
  const ModelConfig c = config_from_text(
      tmp, tiny_config_with(R"("model_type": "gemma3_text", "rope_local_base_freq": 500.0,
                               "rope_scaling": {"rope_type": "linear", "factor": 8.0})"));
  CHECK(c.rope.type == "linear");
  CHECK(c.rope.factor == 8.0);
  CHECK(c.rope.theta == 10000.0);
  REQUIRE(c.sliding_rope.has_value());
  CHECK(c.sliding_rope->type == "default");
  CHECK(c.sliding_rope->theta == 500.0);
  CHECK(&c.layer_rope(0) == &*c.sliding_rope);  // layer 0 slides (pattern 6)
  CHECK(&c.layer_rope(5) == &c.rope);
}

TEST_CASE("qwen3 on its class defaults: head_dim 128, q/k norms, no window", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"("model_type": "qwen3")"));
  CHECK(c.head_dim == 128);
  CHECK(c.qk_norm);
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.has_sliding());
  CHECK(c.norm_style == NormStyle::kLlama);
}

TEST_CASE("phi3 on its class defaults: rms_norm_eps 1e-5, eos 32000, no window unless one is named",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, R"({"model_type": "phi3"})");
  CHECK(c.vocab_size == 32064);
  CHECK(c.hidden_size == 3072);
  CHECK(c.intermediate_size == 8192);
  CHECK(c.num_key_value_heads == 32);
  CHECK(c.head_dim == 96);
  CHECK(c.max_position_embeddings == 4096);
  CHECK(c.rms_norm_eps == 1e-5);
  CHECK(c.eos_token_ids == std::vector<int64_t>{32000});
  CHECK(c.bos_token_id == 1);
  CHECK_FALSE(c.has_sliding());
  CHECK_FALSE(c.attention_bias);
  // Phi-3-mini's own window slides every layer; layer_types is not Phi3Config's.
  const ModelConfig windowed =
      config_from_text(tmp, tiny_config_with(R"("model_type": "phi3", "sliding_window": 2047,
                               "layer_types": ["full_attention", "full_attention",
                                               "full_attention", "full_attention"])"));
  CHECK(windowed.layer_types == all_sliding(4));
  CHECK(windowed.sliding_window == 2047);
  CHECK(windowed.rms_norm_eps == 1e-6);  // tiny_config_with names it
}

TEST_CASE("eos_token_id may be an int, a list or null", "[checkpoint]") {
  TempDir tmp;
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "eos_token_id": 2)"))
            .eos_token_ids == std::vector<int64_t>{2});
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama",
                                                  "eos_token_id": [128001, 128009])"))
            .eos_token_ids == std::vector<int64_t>{128001, 128009});
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "eos_token_id": null)"))
            .eos_token_ids.empty());
}

TEST_CASE("generation_config.json's eos ids replace config.json's, as generate() stops",
          "[checkpoint]") {
  TempDir tmp;
  write_tiny_checkpoint(tmp, tiny_weights());
  const std::vector<int64_t> from_config =
      load_checkpoint(tmp.dir(), at::kFloat, at::kCPU).config.eos_token_ids;
  write_text(tmp.file("generation_config.json"), R"({"eos_token_id": [7, 9]})");
  CHECK(load_checkpoint(tmp.dir(), at::kFloat, at::kCPU).config.eos_token_ids ==
        std::vector<int64_t>{7, 9});
  write_text(tmp.file("generation_config.json"), R"({"eos_token_id": 5})");
  CHECK(load_checkpoint(tmp.dir(), at::kFloat, at::kCPU).config.eos_token_ids ==
        std::vector<int64_t>{5});
  // No eos_token_id there: config.json's ids stand.
  write_text(tmp.file("generation_config.json"), R"({"bos_token_id": 1})");
  CHECK(load_checkpoint(tmp.dir(), at::kFloat, at::kCPU).config.eos_token_ids == from_config);
  write_text(tmp.file("generation_config.json"), R"({"eos_token_id": "two"})");
  CHECK_THROWS_WITH(load_checkpoint(tmp.dir(), at::kFloat, at::kCPU),
                    Catch::Contains("generation_config.json") && Catch::Contains("eos_token_id"));
}

TEST_CASE("head_dim null or absent is hidden_size / num_attention_heads, else read",
          "[checkpoint]") {
  TempDir tmp;
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "head_dim": null)"))
            .head_dim == 16);
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama")")).head_dim == 16);
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "head_dim": 32)"))
            .head_dim == 32);
}

TEST_CASE("llama's attention_bias puts biases on q, k, v and o, false when absent",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig plain = config_from_text(tmp, tiny_config_with(R"("model_type": "llama")"));
  CHECK_FALSE(plain.attention_bias);
  CHECK_FALSE(plain.o_proj_bias);
  const ModelConfig biased =
      config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "attention_bias": true)"));
  CHECK(biased.attention_bias);
  CHECK(biased.o_proj_bias);
  const auto params = expected_parameters(biased);
  const std::map<std::string, std::vector<int64_t>> shapes(params.begin(), params.end());
  CHECK(shapes.at("model.layers.3.self_attn.o_proj.bias") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.layers.3.self_attn.q_proj.bias") == std::vector<int64_t>{64});
}

TEST_CASE("mistral ignores attention_bias: its projections have no biases", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c =
      config_from_text(tmp, tiny_config_with(R"("model_type": "mistral", "attention_bias": true)"));
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.o_proj_bias);
}

// Note [layer types per model type] (reference/model/src/checkpoint/config_json.cpp): each
// model type reads layer_types and sliding_window as transformers 5.24 does.
TEST_CASE("llama ignores layer_types and sliding_window: every layer is full", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"("model_type": "llama",
    "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"])"));
  CHECK_FALSE(c.has_sliding());
  CHECK(c.sliding_window == 0);
}

TEST_CASE("mistral ignores layer_types and slides every layer, by 4096 when the window is absent",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig listed = config_from_text(tmp, tiny_config_with(R"("model_type": "mistral",
    "sliding_window": 8, "layer_types": ["full_attention", "full_attention",
                                         "full_attention", "full_attention"])"));
  CHECK(listed.layer_types == all_sliding(4));
  CHECK(listed.sliding_window == 8);
  const ModelConfig absent = config_from_text(tmp, tiny_config_with(R"("model_type": "mistral")"));
  CHECK(absent.layer_types == all_sliding(4));
  CHECK(absent.sliding_window == 4096);
}

TEST_CASE("qwen2 with use_sliding_window and no max_window_layers slides from layer 28 on",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, R"({"model_type": "qwen2",
    "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 30,
    "num_attention_heads": 4, "num_key_value_heads": 2, "use_sliding_window": true,
    "sliding_window": 8})");
  std::vector<LayerType> expected(28, LayerType::kFull);
  expected.push_back(LayerType::kSliding);
  expected.push_back(LayerType::kSliding);
  CHECK(c.layer_types == expected);
  CHECK(c.sliding_window == 8);
}

TEST_CASE("qwen2 applies layer_types as written when it has a window", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"("model_type": "qwen2",
    "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 3,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                    "full_attention"])"));
  using T = LayerType;
  CHECK(c.layer_types == std::vector<T>{T::kSliding, T::kFull, T::kSliding, T::kFull});
}

TEST_CASE("a field config.json leaves out takes its model type's config class default",
          "[checkpoint]") {
  TempDir tmp;
  struct Case {
    const char* type;
    int64_t vocab, intermediate, kv_heads, max_positions;
    std::vector<int64_t> eos;
    int64_t bos;
  };
  for (const Case& k : {Case{"llama", 32000, 11008, 32, 2048, {2}, 1},
                        Case{"mistral", 32000, 14336, 8, 131072, {2}, 1},
                        Case{"qwen2", 151936, 22016, 32, 32768, {}, -1}}) {
    INFO(k.type);
    const ModelConfig c =
        config_from_text(tmp, std::string(R"({"model_type": ")") + k.type + R"("})");
    CHECK(c.vocab_size == k.vocab);
    CHECK(c.hidden_size == 4096);
    CHECK(c.intermediate_size == k.intermediate);
    CHECK(c.num_hidden_layers == 32);
    CHECK(c.num_attention_heads == 32);
    CHECK(c.num_key_value_heads == k.kv_heads);
    CHECK(c.head_dim == 128);
    CHECK(c.max_position_embeddings == k.max_positions);
    CHECK(c.rms_norm_eps == 1e-6);
    CHECK(c.rope.theta == 10000.0);
    CHECK_FALSE(c.tie_word_embeddings);
    CHECK(c.eos_token_ids == k.eos);
    CHECK(c.bos_token_id == k.bos);
  }
  // null num_key_value_heads means no grouping in every class.
  CHECK(config_from_text(tmp, R"({"model_type": "mistral", "num_key_value_heads": null})")
            .num_key_value_heads == 32);
}
