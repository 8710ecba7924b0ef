#pragma once
// ModelConfig: the Llama-family architecture the reference decoder runs
// (Llama, Mistral, Qwen2), with the fields of a Hugging Face config.json.
//
// The reference decoder is its own target (statickv::reference); the cache
// library never depends on it.

#include <statickv/config.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace statickv::reference {

/// A model's parameters: name (as in a Hugging Face checkpoint) -> tensor.
using Weights = std::map<std::string, at::Tensor>;

/// Rotary embedding frequencies: Hugging Face's "default" or "llama3".
struct RopeConfig {
  std::string type = "default";  ///< "default" or "llama3"
  double theta = 10000.0;
  // llama3 only:
  double factor = 1.0;
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

struct ModelConfig {
  std::string model_type = "llama";  ///< "llama", "mistral" or "qwen2"
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  ///< 0 in a config.json means hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;
  bool tie_word_embeddings = false;
  bool attention_bias = false;  ///< biases on q/k/v projections (Qwen2: true)
  /// A bias on o_proj (Llama with attention_bias: true; never Qwen2 or Mistral).
  bool o_proj_bias = false;
  /// Per-layer attention type; empty = all full. Sliding layers attend to
  /// keys with q_pos - k_pos < sliding_window.
  std::vector<LayerType> layer_types;
  int64_t sliding_window = 0;
  std::vector<int64_t> eos_token_ids;  ///< empty: no EOS
  int64_t bos_token_id = -1;

  LayerType layer_type(int64_t layer) const {
    return layer_types.empty() ? LayerType::kFull : layer_types[static_cast<size_t>(layer)];
  }
  bool has_sliding() const {
    for (LayerType t : layer_types) {
      if (t == LayerType::kSliding) return true;
    }
    return false;
  }
  /// Throws c10::Error naming the first impossible field.
  void validate() const;
};

}  // namespace statickv::reference
