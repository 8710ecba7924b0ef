// config.json: a Hugging Face config read as transformers 5.24's config
// class of its model type reads it (docs/checkpoints.md).

#include "json_fields.hpp"

#include <statickv/model/checkpoint.hpp>

#include <string>
#include <utility>
#include <vector>

namespace statickv::reference {

namespace {

using namespace detail;

/// Rope fields from an object holding rope_type (or type), rope_theta and the
/// llama3 factors: transformers 5's rope_parameters or the older rope_scaling.
void read_rope(const std::string& path, const Json& object, const std::string& name,
               RopeConfig& rope) {
  TORCH_CHECK(object.is_object(), path, ": expected field \"", name,
              "\" to be an object or null but got ", object.dump());
  // Gemma 3 nests one object per layer type (read_gemma3_rope); no other
  // model type read here does.
  TORCH_CHECK(!object.contains("full_attention") && !object.contains("sliding_attention"), path,
              ": expected field \"", name, "\" to hold one rope for every layer but got ",
              object.dump());
  if (has(object, "rope_type")) {
    rope.type = as_string(path, object["rope_type"], name + ".rope_type");
  } else if (has(object, "type")) {
    rope.type = as_string(path, object["type"], name + ".type");
  }
  TORCH_CHECK(rope.type == "default" || rope.type == "linear" || rope.type == "llama3", path,
              ": expected field \"", name,
              ".rope_type\" to be \"default\", \"linear\" or \"llama3\" but got \"", rope.type,
              "\"");
  if (has(object, "rope_theta")) {
    rope.theta = as_double(path, object["rope_theta"], name + ".rope_theta");
  }
  if (rope.type != "default") {
    rope.factor = required_double(path, object, "factor", name + ".factor");
  }
  if (rope.type == "llama3") {
    rope.low_freq_factor =
        required_double(path, object, "low_freq_factor", name + ".low_freq_factor");
    rope.high_freq_factor =
        required_double(path, object, "high_freq_factor", name + ".high_freq_factor");
    rope.original_max_position_embeddings =
        required_int(path, object, "original_max_position_embeddings",
                     name + ".original_max_position_embeddings");
  }
}

/// eos_token_id: an int or a list; absent takes the class default, null is none.
std::vector<int64_t> read_eos(const std::string& path, const Json& json,
                              const std::vector<int64_t>& absent) {
  auto it = json.find("eos_token_id");
  if (it == json.end()) return absent;
  std::vector<int64_t> ids;
  if (it->is_array()) {
    for (size_t i = 0; i < it->size(); ++i) {
      ids.push_back(as_int(path, (*it)[i], "eos_token_id[" + std::to_string(i) + "]"));
    }
  } else if (!it->is_null()) {
    ids.push_back(as_int(path, *it, "eos_token_id"));
  }
  return ids;
}

std::vector<LayerType> read_layer_types(const std::string& path, const Json& json) {
  const Json& types = json["layer_types"];
  TORCH_CHECK(types.is_array(), path, ": expected field \"layer_types\" to be a list but got ",
              types.dump());
  std::vector<LayerType> out;
  for (size_t i = 0; i < types.size(); ++i) {
    const std::string where = "layer_types[" + std::to_string(i) + "]";
    const std::string type = as_string(path, types[i], where);
    if (type == "full_attention") {
      out.push_back(LayerType::kFull);
    } else if (type == "sliding_attention") {
      out.push_back(LayerType::kSliding);
    } else {
      TORCH_CHECK(false, path, ": expected field \"", where,
                  "\" to be \"full_attention\" or \"sliding_attention\" but got \"", type, "\"");
    }
  }
  return out;
}

// Note [layer types per model type]: which layers slide is decided as
// transformers 5.24 decides it for each model type, not by one rule for all:
//
//   llama    layer_types and sliding_window are ignored: every layer is full.
//   mistral  layer_types is ignored (transformers warns); sliding_window,
//            when not null (absent means the class default 4096), applies
//            to every layer.
//   qwen2,   the window exists only with use_sliding_window: true (else it
//   qwen3    is null whatever sliding_window says); layer_types is applied
//            as written, and when absent it is "sliding from layer
//            max_window_layers on" (default 28) if there is a window, else
//            all full.
//   gemma2,  sliding_window (absent 4096) always exists; layer_types is
//   gemma3   applied as written, and when absent it is a repeating pattern:
//            gemma2 alternates sliding, full; gemma3_text has a full layer
//            every sliding_window_pattern (default 6) layers, the others
//            sliding.
//
// A sliding entry without a window is refused: transformers raises at the
// first forward pass. docs/checkpoints.md has the same table;
// tests/reference/hf cross-checks each case.

/// An integer field: `absent` when the key is missing, `null_value` when it
/// is null.
int64_t int_or(const std::string& path, const Json& json, const char* key, int64_t absent,
               int64_t null_value) {
  auto it = json.find(key);
  if (it == json.end()) return absent;
  if (it->is_null()) return null_value;
  return as_int(path, *it, key);
}

/// A float field: `absent` when the key is missing, 0 when it is null.
double double_or(const std::string& path, const Json& json, const char* key, double absent) {
  auto it = json.find(key);
  if (it == json.end()) return absent;
  if (it->is_null()) return 0;
  return as_double(path, *it, key);
}

/// Gemma's default pattern: layer i is full when (i + 1) % period == 0.
std::vector<LayerType> periodic_layers(int64_t layers, int64_t period) {
  std::vector<LayerType> out;
  for (int64_t i = 0; i < layers; ++i) {
    out.push_back((i + 1) % period == 0 ? LayerType::kFull : LayerType::kSliding);
  }
  return out;
}

/// The window and the layer types when config.json leaves layer_types out.
std::pair<int64_t, std::vector<LayerType>> default_layers(const std::string& path, const Json& json,
                                                          const ModelConfig& config) {
  const std::string& type = config.model_type;
  const int64_t layers = config.num_hidden_layers;
  if (type == "gemma2" || type == "gemma3_text") {
    const int64_t window = int_or(path, json, "sliding_window", /*absent=*/4096, /*null_value=*/0);
    const int64_t period =
        type == "gemma2" ? 2 : int_or(path, json, "sliding_window_pattern", 6, 6);
    TORCH_CHECK(period >= 1, path, ": expected field \"sliding_window_pattern\" >= 1 but got ",
                period);
    return {window, periodic_layers(layers, period)};
  }
  // qwen2, qwen3
  const bool use_window = has(json, "use_sliding_window") &&
                          as_bool(path, json["use_sliding_window"], "use_sliding_window");
  const int64_t window =
      use_window ? int_or(path, json, "sliding_window", /*absent=*/4096, /*null_value=*/0) : 0;
  std::vector<LayerType> types;
  if (window != 0) {
    const int64_t first = has(json, "max_window_layers")
                              ? as_int(path, json["max_window_layers"], "max_window_layers")
                              : 28;  // Qwen2Config's and Qwen3Config's default
    for (int64_t i = 0; i < layers; ++i) {
      types.push_back(i >= first ? LayerType::kSliding : LayerType::kFull);
    }
  }
  return {window, types};
}

void read_layers(const std::string& path, const Json& json, ModelConfig& config) {
  const int64_t layers = config.num_hidden_layers;
  config.layer_types.clear();
  config.sliding_window = 0;
  if (config.model_type == "mistral") {
    config.sliding_window = int_or(path, json, "sliding_window", /*absent=*/4096, /*null_value=*/0);
    if (config.sliding_window != 0) config.layer_types = all_sliding(layers);
    return;
  }
  if (config.model_type == "llama") return;  // all full
  auto [window, types] = default_layers(path, json, config);
  if (has(json, "layer_types")) {
    types = read_layer_types(path, json);
    TORCH_CHECK(static_cast<int64_t>(types.size()) == layers, path,
                ": expected field \"layer_types\" to have num_hidden_layers (", layers,
                ") entries but got ", types.size());
  }
  config.layer_types = std::move(types);
  TORCH_CHECK(window != 0 || !config.has_sliding(), path,
              ": expected \"layer_types\" without sliding_attention entries, or a "
              "\"sliding_window\" (with \"use_sliding_window\": true for qwen2 and qwen3), but "
              "got sliding layers with no window");
  if (config.has_sliding()) config.sliding_window = window;
}

/// What transformers 5.24's config class of each model type assumes for a
/// field that config.json leaves out (LlamaConfig, MistralConfig,
/// Qwen2Config, Qwen3Config, Gemma2Config, Gemma3TextConfig). kv_heads 0:
/// as many as num_attention_heads; head_dim 0: hidden_size / heads.
struct ClassDefaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t num_key_value_heads, head_dim;
  int64_t max_position_embeddings;
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id;  // -1: none
  bool tie_word_embeddings;
};

ClassDefaults class_defaults(const std::string& type) {
  if (type == "mistral") return {32000, 4096, 14336, 32, 32, 8, 0, 4096 * 32, {2}, 1, false};
  if (type == "qwen2") return {151936, 4096, 22016, 32, 32, 32, 0, 32768, {}, -1, false};
  if (type == "qwen3") return {151936, 4096, 22016, 32, 32, 32, 128, 32768, {}, -1, false};
  if (type == "gemma2") return {256000, 2304, 9216, 26, 8, 4, 256, 8192, {1}, 2, true};
  if (type == "gemma3_text") return {262208, 2304, 9216, 26, 8, 4, 256, 131072, {1}, 2, true};
  return {32000, 4096, 11008, 32, 32, 0, 0, 2048, {2}, 1, false};  // llama
}

/// A size field: the class default when absent; null is not a size.
int64_t size_or(const std::string& path, const Json& json, const char* key, int64_t absent) {
  auto it = json.find(key);
  if (it == json.end()) return absent;
  return as_int(path, *it, key);
}

void read_sizes(const std::string& path, const Json& json, const ClassDefaults& d,
                ModelConfig& config) {
  config.vocab_size = size_or(path, json, "vocab_size", d.vocab_size);
  config.hidden_size = size_or(path, json, "hidden_size", d.hidden_size);
  config.intermediate_size = size_or(path, json, "intermediate_size", d.intermediate_size);
  config.num_hidden_layers = size_or(path, json, "num_hidden_layers", d.num_hidden_layers);
  config.num_attention_heads = size_or(path, json, "num_attention_heads", d.num_attention_heads);
  const int64_t heads = config.num_attention_heads;
  // null means "no grouping" in every class; absent takes the class default.
  config.num_key_value_heads =
      int_or(path, json, "num_key_value_heads",
             d.num_key_value_heads > 0 ? d.num_key_value_heads : heads, heads);
  if (has(json, "head_dim")) {
    config.head_dim = as_int(path, json["head_dim"], "head_dim");
  } else if (d.head_dim > 0) {
    config.head_dim = d.head_dim;
  } else {
    TORCH_CHECK(heads > 0 && config.hidden_size % heads == 0, path, ": expected hidden_size (",
                config.hidden_size,
                ") divisible by num_attention_heads when head_dim is absent but got ", heads,
                " heads");
    config.head_dim = config.hidden_size / heads;
  }
  config.max_position_embeddings =
      size_or(path, json, "max_position_embeddings", d.max_position_embeddings);
  if (has(json, "rms_norm_eps")) {
    config.rms_norm_eps = as_double(path, json["rms_norm_eps"], "rms_norm_eps");
  }
  config.tie_word_embeddings = d.tie_word_embeddings;
  if (has(json, "tie_word_embeddings")) {
    config.tie_word_embeddings = as_bool(path, json["tie_word_embeddings"], "tie_word_embeddings");
  }
}

bool is_gemma(const std::string& type) { return type == "gemma2" || type == "gemma3_text"; }

/// Biases and the MLP as each model type builds them: Llama, Qwen3 and
/// Gemma put attention_bias on q, k, v and o; Qwen2 always has q/k/v biases
/// and never an o bias; Mistral has none (its class ignores attention_bias).
void read_projections(const std::string& path, const Json& json, ModelConfig& config) {
  const std::string& type = config.model_type;
  // Gemma's classes read hidden_activation (a hidden_act key is ignored);
  // the others hidden_act. The MLP is gated, with no biases.
  const char* act_key = is_gemma(type) ? "hidden_activation" : "hidden_act";
  const std::string act = has(json, act_key) ? as_string(path, json[act_key], act_key)
                          : is_gemma(type)   ? "gelu_pytorch_tanh"
                                             : "silu";
  const char* want = is_gemma(type) ? "gelu_pytorch_tanh" : "silu";
  TORCH_CHECK(act == want, path, ": expected ", act_key, " \"", want, "\" but got \"", act, "\"");
  config.hidden_act = is_gemma(type) ? Activation::kGeluTanh : Activation::kSilu;
  if (type == "llama" && has(json, "mlp_bias")) {
    TORCH_CHECK(!as_bool(path, json["mlp_bias"], "mlp_bias"), path,
                ": expected mlp_bias false (MLP biases are not supported) but got true");
  }
  config.attention_bias = type == "qwen2";
  config.o_proj_bias = false;
  const bool reads_bias = type == "llama" || type == "qwen3" || is_gemma(type);
  if (reads_bias && has(json, "attention_bias")) {
    config.attention_bias = as_bool(path, json["attention_bias"], "attention_bias");
    config.o_proj_bias = config.attention_bias;
  }
  config.qk_norm = type == "qwen3" || type == "gemma3_text";
}

/// Gemma's own math: (1 + weight) norms in float32, four norms a layer,
/// scaled embeddings, query_pre_attn_scalar and the soft-caps (Gemma 3's
/// attention ignores attn_logit_softcapping, as transformers 5.24's does).
void read_gemma(const std::string& path, const Json& json, ModelConfig& config) {
  config.norm_style = NormStyle::kGemma;
  config.sandwich_norms = true;
  config.scale_embeddings = true;
  config.query_pre_attn_scalar = double_or(path, json, "query_pre_attn_scalar", 256);
  TORCH_CHECK(config.query_pre_attn_scalar > 0, path,
              ": expected field \"query_pre_attn_scalar\" > 0 but got ",
              config.query_pre_attn_scalar);
  const bool gemma2 = config.model_type == "gemma2";
  config.final_logit_softcapping =
      double_or(path, json, "final_logit_softcapping", gemma2 ? 30 : 0);
  config.attn_logit_softcapping = gemma2 ? double_or(path, json, "attn_logit_softcapping", 50) : 0;
  TORCH_CHECK(
      !has(json, "use_bidirectional_attention") ||
          !as_bool(path, json["use_bidirectional_attention"], "use_bidirectional_attention"),
      path,
      ": expected field \"use_bidirectional_attention\" false (a decoder attends "
      "causally) but got true");
}

/// transformers 5 keeps the rope in rope_parameters; older configs have a
/// top-level rope_theta and an optional rope_scaling.
void read_rope_fields(const std::string& path, const Json& json, RopeConfig& rope) {
  if (has(json, "rope_theta")) rope.theta = as_double(path, json["rope_theta"], "rope_theta");
  if (has(json, "rope_parameters")) {
    read_rope(path, json["rope_parameters"], "rope_parameters", rope);
  } else if (has(json, "rope_scaling")) {
    read_rope(path, json["rope_scaling"], "rope_scaling", rope);
  }
}

/// Gemma 3's rope: one per layer type, nested in rope_parameters
/// (full_attention, sliding_attention) or, in older configs, rope_theta and
/// rope_scaling for full layers and rope_local_base_freq for sliding ones.
void read_gemma3_rope(const std::string& path, const Json& json, ModelConfig& config) {
  RopeConfig full, local;
  full.theta = has(json, "rope_theta") ? as_double(path, json["rope_theta"], "rope_theta") : 1e6;
  local.theta = has(json, "rope_local_base_freq")
                    ? as_double(path, json["rope_local_base_freq"], "rope_local_base_freq")
                    : 1e4;
  if (has(json, "rope_parameters")) {
    const Json& nested = json["rope_parameters"];
    TORCH_CHECK(nested.is_object() &&
                    (nested.contains("full_attention") || nested.contains("sliding_attention")),
                path,
                ": expected field \"rope_parameters\" to hold \"full_attention\" and "
                "\"sliding_attention\" objects (gemma3_text) but got ",
                nested.dump());
    if (has(nested, "full_attention")) {
      read_rope(path, nested["full_attention"], "rope_parameters.full_attention", full);
    }
    if (has(nested, "sliding_attention")) {
      read_rope(path, nested["sliding_attention"], "rope_parameters.sliding_attention", local);
    }
  }
  if (has(json, "rope_scaling")) read_rope(path, json["rope_scaling"], "rope_scaling", full);
  config.rope = full;
  config.sliding_rope = local;
}

}  // namespace

ModelConfig load_config(const std::string& config_json_path) {
  const std::string& path = config_json_path;
  const Json json = parse_json_file(path);
  ModelConfig config;
  config.model_type =
      as_string(path, require(path, json, "model_type", "model_type"), "model_type");
  const std::string& type = config.model_type;
  TORCH_CHECK(
      type == "llama" || type == "mistral" || type == "qwen2" || type == "qwen3" || is_gemma(type),
      path,
      ": expected model_type \"llama\", \"mistral\", \"qwen2\", \"qwen3\", "
      "\"gemma2\" or \"gemma3_text\" but got \"",
      type, "\"");
  const ClassDefaults defaults = class_defaults(type);
  read_sizes(path, json, defaults, config);
  read_projections(path, json, config);
  if (is_gemma(type)) read_gemma(path, json, config);
  if (type == "gemma3_text") {
    read_gemma3_rope(path, json, config);
  } else {
    read_rope_fields(path, json, config.rope);
  }
  read_layers(path, json, config);
  config.eos_token_ids = read_eos(path, json, defaults.eos_token_ids);
  config.bos_token_id = int_or(path, json, "bos_token_id", defaults.bos_token_id, -1);
  try {
    config.validate();
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, path, ": ", e.what_without_backtrace());
  }
  return config;
}

std::vector<int64_t> load_generation_eos(const std::string& generation_config_path,
                                         const std::vector<int64_t>& fallback) {
  const Json json = parse_json_file(generation_config_path);
  return read_eos(generation_config_path, json, fallback);
}

}  // namespace statickv::reference
