// Named shapes (tests, benchmarks, the demo) and seeded random weights.

#include "json_fields.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/families.hpp>

#include <ATen/CPUGeneratorImpl.h>
#include <c10/util/Exception.h>

#include <string>
#include <vector>

namespace statickv::reference {

namespace {

using detail::join;

/// A config of `model_type`'s family traits (families.hpp), sizes unset.
ModelConfig of_family(const std::string& model_type) {
  ModelConfig c;
  apply_family(family(model_type), c);
  return c;
}

ModelConfig tiny() {
  ModelConfig c = of_family("llama");
  c.vocab_size = 128;
  c.hidden_size = 64;
  c.intermediate_size = 128;
  c.num_hidden_layers = 2;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = 16;
  c.max_position_embeddings = 256;
  c.rope.type = "default";
  c.rope.theta = 10000.0;
  return c;
}

ModelConfig llama3(int64_t hidden, int64_t intermediate, int64_t layers, int64_t head_dim,
                   double factor, bool tied) {
  ModelConfig c = of_family("llama");
  c.vocab_size = 128256;
  c.hidden_size = hidden;
  c.intermediate_size = intermediate;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 32;
  c.num_key_value_heads = 8;
  c.head_dim = head_dim;
  c.max_position_embeddings = 131072;
  c.rms_norm_eps = 1e-5;
  c.rope.type = "llama3";
  c.rope.theta = 500000.0;
  c.rope.factor = factor;
  c.rope.low_freq_factor = 1.0;
  c.rope.high_freq_factor = 4.0;
  c.rope.original_max_position_embeddings = 8192;
  c.tie_word_embeddings = tied;
  c.eos_token_ids = {128001, 128008, 128009};
  c.bos_token_id = 128000;
  return c;
}

// SmolLM2-135M-Instruct's config.json (tools/smollm2/convert.py): the GPU
// machine cannot receive the real weights, so its benchmarks use this shape
// with random ones.
ModelConfig smollm2_135m() {
  ModelConfig c = of_family("llama");
  c.vocab_size = 49152;
  c.hidden_size = 576;
  c.intermediate_size = 1536;
  c.num_hidden_layers = 30;
  c.num_attention_heads = 9;
  c.num_key_value_heads = 3;
  c.head_dim = 64;
  c.max_position_embeddings = 8192;
  c.rms_norm_eps = 1e-5;
  c.rope.type = "default";
  c.rope.theta = 100000.0;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {2};
  c.bos_token_id = 1;
  return c;
}

// The tiny Gemma 3: five sliding layers to a full one, window 8, a rope per
// layer type, q/k norms.
ModelConfig tiny_gemma3() {
  ModelConfig c = tiny();
  apply_family(family("gemma3_text"), c);
  c.num_hidden_layers = 6;
  c.layer_types = {LayerType::kSliding, LayerType::kSliding, LayerType::kSliding,
                   LayerType::kSliding, LayerType::kSliding, LayerType::kFull};
  c.sliding_window = 8;
  c.query_pre_attn_scalar = 24;
  c.rope.theta = 100000.0;
  c.sliding_rope = RopeConfig{};
  return c;
}

// Gemma 3 270M's config.json (tools/gemma3/convert.py): for benchmarks where
// the real weights cannot go (the GPU machine), with random ones.
ModelConfig gemma3_270m() {
  ModelConfig c = of_family("gemma3_text");
  c.vocab_size = 262144;
  c.hidden_size = 640;
  c.intermediate_size = 2048;
  c.num_hidden_layers = 18;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 1;
  c.head_dim = 256;
  c.max_position_embeddings = 32768;
  c.query_pre_attn_scalar = 256;
  c.rope.theta = 1000000.0;
  c.sliding_rope = RopeConfig{};  // default, theta 10000
  for (int64_t i = 0; i < c.num_hidden_layers; ++i) {
    c.layer_types.push_back((i + 1) % 6 == 0 ? LayerType::kFull : LayerType::kSliding);
  }
  c.sliding_window = 512;
  c.tie_word_embeddings = true;
  c.eos_token_ids = {1};
  c.bos_token_id = 2;
  return c;
}

}  // namespace

ModelConfig named_config(const std::string& name) {
  ModelConfig config;
  if (name == "tiny") {
    config = tiny();
  } else if (name == "tiny-mistral") {
    config = tiny();
    apply_family(family("mistral"), config);
    config.layer_types = all_sliding(config.num_hidden_layers);
    config.sliding_window = 8;
  } else if (name == "tiny-qwen2") {
    config = tiny();
    apply_family(family("qwen2"), config);  // q/k/v biases
    config.num_hidden_layers = 4;
    config.layer_types = {LayerType::kFull, LayerType::kFull, LayerType::kSliding,
                          LayerType::kSliding};
    config.sliding_window = 8;
  } else if (name == "tiny-qwen3") {
    config = tiny();
    apply_family(family("qwen3"), config);  // q/k norms
  } else if (name == "tiny-gemma3") {
    config = tiny_gemma3();
  } else if (name == "tiny-gemma2") {
    config = tiny();
    apply_family(family("gemma2"), config);
    config.num_hidden_layers = 4;
    config.layer_types = {LayerType::kSliding, LayerType::kFull, LayerType::kSliding,
                          LayerType::kFull};
    config.sliding_window = 8;
    config.query_pre_attn_scalar = 16;
    config.attn_logit_softcapping = 2.0;
    config.final_logit_softcapping = 6.0;
  } else if (name == "tiny-phi3") {
    config = tiny();
    apply_family(family("phi3"), config);  // q/k/v and gate/up fused on disk
    config.rms_norm_eps = 1e-5;
    config.layer_types = all_sliding(config.num_hidden_layers);
    config.sliding_window = 8;
  } else if (name == "gemma3-270m") {
    config = gemma3_270m();
  } else if (name == "smollm2-135m") {
    config = smollm2_135m();
  } else if (name == "llama-3.2-1b") {
    config = llama3(/*hidden=*/2048, /*intermediate=*/8192, /*layers=*/16, /*head_dim=*/64,
                    /*factor=*/32.0, /*tied=*/true);
  } else if (name == "llama-3.1-8b") {
    config = llama3(/*hidden=*/4096, /*intermediate=*/14336, /*layers=*/32, /*head_dim=*/128,
                    /*factor=*/8.0, /*tied=*/false);
  } else {
    TORCH_CHECK(false, "named_config: expected one of ", join(named_config_names()), " but got \"",
                name, "\"");
  }
  config.validate();
  return config;
}

std::vector<std::string> named_config_names() {
  return {"tiny",      "tiny-mistral", "tiny-qwen2",  "tiny-qwen3",   "tiny-gemma2", "tiny-gemma3",
          "tiny-phi3", "smollm2-135m", "gemma3-270m", "llama-3.2-1b", "llama-3.1-8b"};
}

Weights random_weights(const ModelConfig& config, uint64_t seed, at::ScalarType dtype,
                       at::Device device) {
  TORCH_CHECK(at::isFloatingType(dtype), "dtype: expected a floating dtype but got ", dtype);
  const auto params = expected_parameters(config);
  // Drawn on the CPU in float32 in a fixed order, so a seed gives the same
  // weights on every device and in every dtype (up to rounding).
  at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(seed);
  const auto f32 = at::TensorOptions().dtype(at::kFloat).device(at::kCPU);
  Weights weights;
  for (const auto& [name, shape] : params) {
    const bool is_norm =
        shape.size() == 1 && name.size() >= 7 && name.compare(name.size() - 7, 7, ".weight") == 0;
    // A norm scales by its weight (Llama) or by 1 + weight (Gemma): identity either way.
    const double norm_value = config.norm_style == NormStyle::kGemma ? 0.0 : 1.0;
    at::Tensor tensor = is_norm ? at::full(shape, norm_value, f32)
                                : at::empty(shape, f32).normal_(0.0, 0.02, generator);
    weights[name] = tensor.to(device, dtype);
  }
  return weights;
}

}  // namespace statickv::reference
