#include <statickv/model/model_config.hpp>

#include <c10/util/Exception.h>

namespace statickv::reference {

namespace {

void validate_rope(const RopeConfig& rope, const char* name) {
  TORCH_CHECK(rope.type == "default" || rope.type == "linear" || rope.type == "llama3", name,
              ".type: expected \"default\", \"linear\" or \"llama3\" but got \"", rope.type, "\"");
  TORCH_CHECK(rope.theta > 0, name, ".theta: expected > 0 but got ", rope.theta);
  if (rope.type == "default") return;
  TORCH_CHECK(rope.factor > 0, name, ".factor: expected > 0 but got ", rope.factor);
  if (rope.type != "llama3") return;
  TORCH_CHECK(rope.low_freq_factor > 0, name, ".low_freq_factor: expected > 0 but got ",
              rope.low_freq_factor);
  // The llama3 rule interpolates over [low, high]; equal factors divide by zero.
  TORCH_CHECK(rope.high_freq_factor > rope.low_freq_factor, name,
              ".high_freq_factor: expected > low_freq_factor (", rope.low_freq_factor, ") but got ",
              rope.high_freq_factor);
  TORCH_CHECK(rope.original_max_position_embeddings > 0, name,
              ".original_max_position_embeddings: expected > 0 but got ",
              rope.original_max_position_embeddings);
}

}  // namespace

void ModelConfig::validate() const {
  TORCH_CHECK(vocab_size > 0, "ModelConfig.vocab_size: expected > 0 but got ", vocab_size);
  TORCH_CHECK(hidden_size > 0, "ModelConfig.hidden_size: expected > 0 but got ", hidden_size);
  TORCH_CHECK(intermediate_size > 0, "ModelConfig.intermediate_size: expected > 0 but got ",
              intermediate_size);
  TORCH_CHECK(num_hidden_layers > 0, "ModelConfig.num_hidden_layers: expected > 0 but got ",
              num_hidden_layers);
  TORCH_CHECK(num_attention_heads > 0, "ModelConfig.num_attention_heads: expected > 0 but got ",
              num_attention_heads);
  TORCH_CHECK(num_key_value_heads > 0 && num_attention_heads % num_key_value_heads == 0,
              "ModelConfig.num_key_value_heads: expected > 0 and dividing num_attention_heads (",
              num_attention_heads, ") but got ", num_key_value_heads);
  // Rotary embeddings rotate pairs of channels.
  TORCH_CHECK(head_dim > 0 && head_dim % 2 == 0,
              "ModelConfig.head_dim: expected an even number > 0 but got ", head_dim);
  TORCH_CHECK(max_position_embeddings > 0,
              "ModelConfig.max_position_embeddings: expected > 0 but got ",
              max_position_embeddings);
  TORCH_CHECK(rms_norm_eps > 0, "ModelConfig.rms_norm_eps: expected > 0 but got ", rms_norm_eps);
  validate_rope(rope, "ModelConfig.rope");
  if (sliding_rope) validate_rope(*sliding_rope, "ModelConfig.sliding_rope");
  TORCH_CHECK(query_pre_attn_scalar >= 0,
              "ModelConfig.query_pre_attn_scalar: expected > 0 (or 0 = head_dim) but got ",
              query_pre_attn_scalar);
  TORCH_CHECK(attn_logit_softcapping >= 0,
              "ModelConfig.attn_logit_softcapping: expected > 0 (or 0 = none) but got ",
              attn_logit_softcapping);
  TORCH_CHECK(final_logit_softcapping >= 0,
              "ModelConfig.final_logit_softcapping: expected > 0 (or 0 = none) but got ",
              final_logit_softcapping);
  TORCH_CHECK(layer_types.empty() || static_cast<int64_t>(layer_types.size()) == num_hidden_layers,
              "ModelConfig.layer_types: expected empty or num_hidden_layers (", num_hidden_layers,
              ") entries but got ", layer_types.size());
  if (has_sliding()) {
    TORCH_CHECK(sliding_window > 0,
                "ModelConfig.sliding_window: expected > 0 when a layer is kSliding but got ",
                sliding_window);
  }
}

}  // namespace statickv::reference
