#pragma once
// ModelConfig: the decoder architectures the reference decoder runs (Llama,
// Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-3), with the fields of a Hugging
// Face config.json that change the math (docs/checkpoints.md, "Model
// families").
//
// The reference decoder is its own target (statickv::reference); the cache
// library never depends on it.

#include <statickv/config.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

namespace statickv::reference {

/// A model's parameters: name (as in a Hugging Face checkpoint) -> tensor.
using Weights = std::map<std::string, at::Tensor>;

/// Rotary embedding frequencies: Hugging Face's "default", "linear" or "llama3".
struct RopeConfig {
  std::string type = "default";  ///< "default", "linear" or "llama3"
  double theta = 10000.0;
  // linear and llama3:
  double factor = 1.0;
  // llama3 only:
  double low_freq_factor = 1.0;
  double high_freq_factor = 4.0;
  int64_t original_max_position_embeddings = 8192;
};

/// The gated MLP's activation.
enum class Activation {
  kSilu,      ///< "silu" (Llama, Mistral, Qwen)
  kGeluTanh,  ///< "gelu_pytorch_tanh" (Gemma)
};

/// How an RMSNorm applies its weight.
enum class NormStyle {
  kLlama,  ///< weight * norm(x).to(dtype): the weight in the activation dtype
  kGemma,  ///< (norm(x) * (1 + weight)).to(dtype), all in float32
};

struct ModelConfig {
  /// A row of the families table (families.hpp): "llama", "mistral",
  /// "qwen2", "qwen3", "gemma2", "gemma3_text" or "phi3".
  std::string model_type = "llama";
  int64_t vocab_size = 0;
  int64_t hidden_size = 0;
  int64_t intermediate_size = 0;
  int64_t num_hidden_layers = 0;
  int64_t num_attention_heads = 0;
  int64_t num_key_value_heads = 0;
  int64_t head_dim = 0;  ///< 0 in a config.json means hidden_size / num_attention_heads
  int64_t max_position_embeddings = 2048;
  double rms_norm_eps = 1e-6;
  RopeConfig rope;  ///< every layer's, or the full layers' where sliding_rope is set
  /// Sliding layers' rope where it differs (Gemma 3's
  /// rope_parameters.sliding_attention); unset: `rope` for every layer.
  std::optional<RopeConfig> sliding_rope;
  Activation hidden_act = Activation::kSilu;
  NormStyle norm_style = NormStyle::kLlama;
  bool qk_norm = false;  ///< RMSNorm over head_dim on queries and keys (Qwen3, Gemma 3)
  /// Gemma 2/3: the attention output normed before the residual add, and
  /// the MLP between pre- and post-feed-forward norms (four norms a layer).
  bool sandwich_norms = false;
  bool scale_embeddings = false;  ///< embeddings * sqrt(hidden_size), in the model dtype (Gemma)
  /// Attention scores scaled by query_pre_attn_scalar^-0.5 (Gemma); 0 means
  /// head_dim^-0.5.
  double query_pre_attn_scalar = 0;
  double attn_logit_softcapping = 0;   ///< cap * tanh(score / cap) (Gemma 2); 0 = none
  double final_logit_softcapping = 0;  ///< the same on the output logits; 0 = none
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
  /// The rope of layer `layer`.
  const RopeConfig& layer_rope(int64_t layer) const {
    return sliding_rope && layer_type(layer) == LayerType::kSliding ? *sliding_rope : rope;
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
