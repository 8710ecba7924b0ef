#pragma once
// The model families table: one row per config.json model_type, holding
// everything that differs between the families the reference decoder runs
// (docs/checkpoints.md, "Model families"): the config class's defaults, the
// rule that decides which layers slide, the traits of the layer (biases,
// activation, norms, rope) and the switches a family refuses. load_config
// and the named shapes read a family from here; no other code tests a
// model_type string (tests/model/check_family_strings.py holds it so).
// Adding a family: docs/guides/add-a-model.md.

#include <statickv/model/model_config.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace statickv::reference {

/// What transformers 5.24's config class assumes for a field config.json
/// leaves out. num_key_value_heads 0: as many as num_attention_heads;
/// head_dim 0: hidden_size / num_attention_heads. Every class's default
/// eos_token_id is one id or none.
struct FamilyDefaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t num_key_value_heads, head_dim;
  int64_t max_position_embeddings;
  double rms_norm_eps;
  int64_t eos_token_id;  ///< -1: none
  int64_t bos_token_id;  ///< -1: none
  bool tie_word_embeddings;
};

/// Which layers slide when config.json has no layer_types (Note [layer
/// types per model type], config_json.cpp).
enum class LayerRule {
  kAllFull,     ///< layer_types and sliding_window ignored: every layer full (llama)
  kAllSliding,  ///< layer_types ignored; a non-null sliding_window slides every layer (mistral)
  /// The window only with use_sliding_window: true; layers from
  /// max_window_layers on slide; layer_types applied as written (qwen2, qwen3).
  kFromLayer,
  /// The window always; every period-th layer full, the others sliding;
  /// layer_types applied as written (gemma2, gemma3_text).
  kPeriodic,
};

/// Which attention biases a family builds.
enum class BiasRule {
  kNone,           ///< none; attention_bias ignored (mistral)
  kQkvAlways,      ///< q, k and v biases, never o; attention_bias ignored (qwen2)
  kAttentionBias,  ///< attention_bias (default false) on q, k, v and o (llama, qwen3, gemma)
};

/// A boolean config.json field the family's class reads and the decoder
/// cannot honour when true: refused by name, with the reason.
struct Refusal {
  const char* field;
  const char* reason;
};

/// Which layers slide, and the numbers the rule reads when absent.
struct FamilyLayers {
  LayerRule rule;
  int64_t default_window;     ///< sliding_window when absent (0: the rule has no window)
  int64_t window_from_layer;  ///< kFromLayer: max_window_layers when absent
  int64_t period;             ///< kPeriodic: the full-layer period when period_field is absent
  const char* period_field;   ///< kPeriodic: the field that sets the period; nullptr: fixed
};

/// The layer's shape: activation, biases, q/k norms, rope per layer type.
struct FamilyTraits {
  const char* activation_field;  ///< "hidden_act", or "hidden_activation" (Gemma)
  Activation activation;         ///< the one activation the MLP computes
  BiasRule bias;
  bool qk_norm;              ///< RMSNorm over head_dim on queries and keys
  bool rope_per_layer_type;  ///< one rope per layer type (Gemma 3's rope_parameters)
};

/// How a checkpoint stores the projections: the disk-name map
/// (disk_tensors, checkpoint.hpp).
enum class DiskLayout {
  kSeparate,  ///< q_proj, k_proj, v_proj, gate_proj and up_proj: the model's own names
  /// self_attn.qkv_proj (q, k then v rows) and mlp.gate_up_proj (gate then
  /// up rows), read as row views of the model's parameters (phi3).
  kFusedQkvGateUp,
};

/// Gemma's math: (1 + weight) norms in float32, four norms a layer, scaled
/// embeddings, query_pre_attn_scalar (default 256) and the soft-caps.
struct GemmaMath {
  bool on;
  double final_softcap;     ///< final_logit_softcapping when absent (0 = none)
  bool reads_attn_softcap;  ///< attn_logit_softcapping read (Gemma 3's attention ignores it)
  double attn_softcap;      ///< its value when absent
};

/// One row of the table.
struct Family {
  const char* model_type;    ///< config.json's model_type
  const char* config_class;  ///< transformers 5.24's class, read the same way
  FamilyDefaults defaults;
  FamilyLayers layers;
  FamilyTraits traits;
  GemmaMath gemma;
  DiskLayout disk;
  std::vector<Refusal> refuses;
};

/// Every family, in the order the docs list them.
const std::vector<Family>& families();

/// The row of `model_type`; throws c10::Error naming the argument, every
/// known type and the value when there is none.
const Family& family(const std::string& model_type);

/// The config.json name of `activation`: "silu" or "gelu_pytorch_tanh".
const char* activation_name(Activation activation);

/// Sets `config`'s model_type and the family's layer traits: activation,
/// norm style and sandwich norms, scaled embeddings, q/k norms and the
/// bias defaults (the numbers config.json may set are left as they are).
void apply_family(const Family& family, ModelConfig& config);

}  // namespace statickv::reference
