// config.json: a Hugging Face config read as transformers 5.24's config
// class of its model type reads it (docs/checkpoints.md).

#include "json_fields.hpp"

#include <statickv/reference/checkpoint.hpp>

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
  // Models whose rope differs per layer type nest one object per type; none of
  // the model types read here does.
  TORCH_CHECK(!object.contains("full_attention") && !object.contains("sliding_attention"), path,
              ": expected field \"", name, "\" to hold one rope for every layer but got ",
              object.dump());
  if (has(object, "rope_type")) {
    rope.type = as_string(path, object["rope_type"], name + ".rope_type");
  } else if (has(object, "type")) {
    rope.type = as_string(path, object["type"], name + ".type");
  }
  TORCH_CHECK(rope.type == "default" || rope.type == "llama3", path, ": expected field \"", name,
              ".rope_type\" to be \"default\" or \"llama3\" but got \"", rope.type, "\"");
  if (has(object, "rope_theta")) {
    rope.theta = as_double(path, object["rope_theta"], name + ".rope_theta");
  }
  if (rope.type == "llama3") {
    rope.factor = required_double(path, object, "factor", name + ".factor");
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
//   qwen2    the window exists only with use_sliding_window: true (else it
//            is null whatever sliding_window says); layer_types is applied
//            as written, and when absent it is "sliding from layer
//            max_window_layers on" (default 28) if there is a window, else
//            all full. A sliding entry without a window is refused:
//            transformers raises at the first forward pass.
//
// docs/checkpoints.md has the same table; tests/reference/hf cross-checks each case.

/// An integer field: `absent` when the key is missing, `null_value` when it
/// is null.
int64_t int_or(const std::string& path, const Json& json, const char* key, int64_t absent,
               int64_t null_value) {
  auto it = json.find(key);
  if (it == json.end()) return absent;
  if (it->is_null()) return null_value;
  return as_int(path, *it, key);
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
  if (config.model_type != "qwen2") return;  // llama: all full
  const bool use_window = has(json, "use_sliding_window") &&
                          as_bool(path, json["use_sliding_window"], "use_sliding_window");
  const int64_t window =
      use_window ? int_or(path, json, "sliding_window", /*absent=*/4096, /*null_value=*/0) : 0;
  if (has(json, "layer_types")) {
    config.layer_types = read_layer_types(path, json);
    TORCH_CHECK(static_cast<int64_t>(config.layer_types.size()) == layers, path,
                ": expected field \"layer_types\" to have num_hidden_layers (", layers,
                ") entries but got ", config.layer_types.size());
    TORCH_CHECK(window != 0 || !config.has_sliding(), path,
                ": expected \"layer_types\" without sliding_attention entries, or "
                "\"use_sliding_window\": true with a \"sliding_window\", but got sliding layers "
                "with no window (use_sliding_window ",
                use_window ? "true, sliding_window null" : "false", ")");
  } else if (window != 0) {
    const int64_t first = has(json, "max_window_layers")
                              ? as_int(path, json["max_window_layers"], "max_window_layers")
                              : 28;  // Qwen2Config's default
    for (int64_t i = 0; i < layers; ++i) {
      config.layer_types.push_back(i >= first ? LayerType::kSliding : LayerType::kFull);
    }
  }
  if (config.has_sliding()) config.sliding_window = window;
}

/// What transformers 5.24's config class of each model type assumes for a
/// field that config.json leaves out (LlamaConfig, MistralConfig,
/// Qwen2Config). kv_heads 0: as many as num_attention_heads.
struct ClassDefaults {
  int64_t vocab_size, hidden_size, intermediate_size, num_hidden_layers, num_attention_heads;
  int64_t num_key_value_heads;
  int64_t max_position_embeddings;
  std::vector<int64_t> eos_token_ids;
  int64_t bos_token_id;  // -1: none
};

ClassDefaults class_defaults(const std::string& type) {
  if (type == "mistral") return {32000, 4096, 14336, 32, 32, 8, 4096 * 32, {2}, 1};
  if (type == "qwen2") return {151936, 4096, 22016, 32, 32, 32, 32768, {}, -1};
  return {32000, 4096, 11008, 32, 32, 0, 2048, {2}, 1};  // llama
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
  if (has(json, "tie_word_embeddings")) {
    config.tie_word_embeddings = as_bool(path, json["tie_word_embeddings"], "tie_word_embeddings");
  }
}

/// Biases and the MLP as each model type builds them: Llama puts
/// attention_bias on q, k, v and o; Qwen2 always has q/k/v biases and never
/// an o bias; Mistral has none (its class ignores attention_bias).
void read_projections(const std::string& path, const Json& json, ModelConfig& config) {
  // The reference decoder's MLP is SiLU-gated with no biases.
  if (has(json, "hidden_act")) {
    const std::string act = as_string(path, json["hidden_act"], "hidden_act");
    TORCH_CHECK(act == "silu", path, ": expected hidden_act \"silu\" but got \"", act, "\"");
  }
  const std::string& type = config.model_type;
  if (type == "llama" && has(json, "mlp_bias")) {
    TORCH_CHECK(!as_bool(path, json["mlp_bias"], "mlp_bias"), path,
                ": expected mlp_bias false (MLP biases are not supported) but got true");
  }
  config.attention_bias = type == "qwen2";
  config.o_proj_bias = false;
  if (type == "llama" && has(json, "attention_bias")) {
    config.attention_bias = as_bool(path, json["attention_bias"], "attention_bias");
    config.o_proj_bias = config.attention_bias;
  }
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

}  // namespace

ModelConfig load_config(const std::string& config_json_path) {
  const std::string& path = config_json_path;
  const Json json = parse_json_file(path);
  ModelConfig config;
  config.model_type =
      as_string(path, require(path, json, "model_type", "model_type"), "model_type");
  const std::string& type = config.model_type;
  TORCH_CHECK(type == "llama" || type == "mistral" || type == "qwen2", path,
              ": expected model_type \"llama\", \"mistral\" or \"qwen2\" but got \"", type, "\"");
  const ClassDefaults defaults = class_defaults(type);
  read_sizes(path, json, defaults, config);
  read_projections(path, json, config);
  read_rope_fields(path, json, config.rope);
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
