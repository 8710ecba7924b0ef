// Model configs, parameter lists, named shapes and seeded random weights
// (ModelConfig::validate, expected_parameters, named_config, random_weights).

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
// Model configs, parameter lists, named shapes and random weights

TEST_CASE("ModelConfig::validate names the field of each impossible config", "[checkpoint]") {
  CHECK_NOTHROW(named_config("tiny").validate());
  struct Bad {
    const char* field;
    void (*mutate)(ModelConfig&);
  };
  const std::vector<Bad> cases = {
      {"vocab_size", [](ModelConfig& c) { c.vocab_size = 0; }},
      {"hidden_size", [](ModelConfig& c) { c.hidden_size = -1; }},
      {"intermediate_size", [](ModelConfig& c) { c.intermediate_size = 0; }},
      {"num_hidden_layers", [](ModelConfig& c) { c.num_hidden_layers = 0; }},
      {"num_attention_heads", [](ModelConfig& c) { c.num_attention_heads = 0; }},
      {"num_key_value_heads", [](ModelConfig& c) { c.num_key_value_heads = 0; }},
      {"num_key_value_heads", [](ModelConfig& c) { c.num_key_value_heads = 3; }},
      {"head_dim", [](ModelConfig& c) { c.head_dim = 0; }},
      {"rms_norm_eps", [](ModelConfig& c) { c.rms_norm_eps = 0; }},
      {"rope.type", [](ModelConfig& c) { c.rope.type = "yarn"; }},
      {"layer_types", [](ModelConfig& c) { c.layer_types = {LayerType::kFull}; }},
      {"sliding_window", [](ModelConfig& c) { c.layer_types = all_sliding(2); }},
  };
  for (const Bad& bad : cases) {
    ModelConfig c = named_config("tiny");
    bad.mutate(c);
    INFO(bad.field);
    require_error([&] { c.validate(); }, {std::string("ModelConfig.") + bad.field, "expected"});
  }
}

TEST_CASE("expected_parameters lists Hugging Face Llama names and shapes", "[checkpoint]") {
  const auto params = expected_parameters(named_config("tiny"));
  const std::map<std::string, std::vector<int64_t>> shapes(params.begin(), params.end());
  CHECK(params.size() == 1 + 2 * 9 + 2);
  CHECK(params.front().first == "model.embed_tokens.weight");
  CHECK(shapes.at("model.embed_tokens.weight") == std::vector<int64_t>{128, 64});
  CHECK(shapes.at("model.layers.1.input_layernorm.weight") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.layers.1.self_attn.q_proj.weight") == std::vector<int64_t>{64, 64});
  CHECK(shapes.at("model.layers.1.self_attn.k_proj.weight") == std::vector<int64_t>{32, 64});
  CHECK(shapes.at("model.layers.1.self_attn.v_proj.weight") == std::vector<int64_t>{32, 64});
  CHECK(shapes.at("model.layers.1.self_attn.o_proj.weight") == std::vector<int64_t>{64, 64});
  CHECK(shapes.at("model.layers.1.post_attention_layernorm.weight") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.layers.1.mlp.gate_proj.weight") == std::vector<int64_t>{128, 64});
  CHECK(shapes.at("model.layers.1.mlp.up_proj.weight") == std::vector<int64_t>{128, 64});
  CHECK(shapes.at("model.layers.1.mlp.down_proj.weight") == std::vector<int64_t>{64, 128});
  CHECK(shapes.at("model.norm.weight") == std::vector<int64_t>{64});
  CHECK(shapes.at("lm_head.weight") == std::vector<int64_t>{128, 64});
  CHECK(shapes.count("model.layers.0.self_attn.q_proj.bias") == 0);
}

TEST_CASE("attention_bias adds q/k/v biases and no o bias", "[checkpoint]") {
  const auto params = expected_parameters(named_config("tiny-qwen2"));
  const std::map<std::string, std::vector<int64_t>> shapes(params.begin(), params.end());
  CHECK(shapes.at("model.layers.3.self_attn.q_proj.bias") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.layers.3.self_attn.k_proj.bias") == std::vector<int64_t>{32});
  CHECK(shapes.at("model.layers.3.self_attn.v_proj.bias") == std::vector<int64_t>{32});
  CHECK(shapes.count("model.layers.3.self_attn.o_proj.bias") == 0);
}

TEST_CASE("llama-3.2-1b has the real model's shape", "[checkpoint]") {
  const ModelConfig c = named_config("llama-3.2-1b");
  CHECK(c.num_hidden_layers == 16);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 64);
  CHECK(c.hidden_size == 2048);
  CHECK(c.vocab_size == 128256);
  CHECK(c.tie_word_embeddings);
  CHECK(c.rope.type == "llama3");
  CHECK(c.rope.factor == 32.0);
  CHECK(c.eos_token_ids == std::vector<int64_t>{128001, 128008, 128009});
  int64_t count = 0;
  for (const auto& [name, shape] : expected_parameters(c)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    count += n;
  }
  CHECK(count == 1'235'814'400);  // Llama 3.2 1B's parameter count
}

TEST_CASE("named_config knows every listed name and lists them for an unknown one",
          "[checkpoint]") {
  for (const std::string& name : named_config_names()) {
    INFO(name);
    CHECK_NOTHROW(named_config(name));
  }
  CHECK(named_config("tiny-mistral").layer_types == all_sliding(2));
  CHECK(named_config("llama-3.1-8b").num_hidden_layers == 32);
  require_error([] { named_config("gpt-5"); }, {"gpt-5", "tiny", "tiny-mistral", "tiny-qwen2",
                                                "smollm2-135m", "llama-3.2-1b", "llama-3.1-8b"});
  // SmolLM2-135M: 30 layers of 9 heads over 3 kv heads, tied embeddings.
  int64_t count = 0;
  for (const auto& [name, shape] : expected_parameters(named_config("smollm2-135m"))) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    count += n;
  }
  CHECK(count == 134'515'008);
}

TEST_CASE("random_weights is deterministic for a seed and differs across seeds", "[checkpoint]") {
  const ModelConfig config = named_config("tiny-qwen2");
  const Weights a = random_weights(config, /*seed=*/5, at::kFloat, at::kCPU);
  const Weights b = random_weights(config, /*seed=*/5, at::kFloat, at::kCPU);
  const Weights c = random_weights(config, /*seed=*/6, at::kFloat, at::kCPU);
  check_same_weights(a, b);
  CHECK_FALSE(at::equal(a.at("model.layers.0.self_attn.q_proj.weight"),
                        c.at("model.layers.0.self_attn.q_proj.weight")));
  CHECK_FALSE(at::equal(a.at("model.layers.0.self_attn.q_proj.bias"),
                        c.at("model.layers.0.self_attn.q_proj.bias")));
  CHECK(a.size() == expected_parameters(config).size());
}

TEST_CASE("random_weights has unit norms and small normal matrices", "[checkpoint]") {
  const Weights w = random_weights(named_config("tiny"), /*seed=*/0, at::kFloat, at::kCPU);
  CHECK(at::equal(w.at("model.norm.weight"), at::ones({64})));
  CHECK(at::equal(w.at("model.layers.1.input_layernorm.weight"), at::ones({64})));
  const at::Tensor m = w.at("model.embed_tokens.weight");
  CHECK(std::abs(m.mean().item<double>()) < 0.002);
  CHECK(std::abs(m.std().item<double>() - 0.02) < 0.001);
}

TEST_CASE("random_weights in another dtype are the float32 weights rounded", "[checkpoint]") {
  const ModelConfig config = named_config("tiny");
  const Weights f32w = random_weights(config, /*seed=*/9, at::kFloat, at::kCPU);
  const Weights bf16 = random_weights(config, /*seed=*/9, at::kBFloat16, at::kCPU);
  for (const auto& [name, tensor] : f32w) {
    INFO(name);
    CHECK(bf16.at(name).scalar_type() == at::kBFloat16);
    CHECK(at::equal(bf16.at(name), tensor.to(at::kBFloat16)));
  }
}
