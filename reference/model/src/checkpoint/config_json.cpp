// config.json: a Hugging Face config read as transformers 5.24's config
// class of its model type reads it (docs/checkpoints.md).

#include "json_fields.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/families.hpp>

#include <string>
#include <utility>
#include <vector>

namespace statickv::reference {

namespace {

using namespace detail;

/// Every dimension of a head rotates: a partial_rotary_factor other than 1
/// (Phi-4-mini's 0.75) is refused, naming `name`, as the decoder would
/// rotate the whole head.
void check_full_rotary(const std::string& path, const Json& object, const std::string& name) {
  if (!has(object, "partial_rotary_factor")) return;
  const double factor = as_double(path, object["partial_rotary_factor"], name);
  TORCH_CHECK(factor == 1.0, path, ": expected field \"", name,
              "\" to be 1 (the decoder rotates every dimension of a head) but got ", factor);
}

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
  check_full_rotary(path, object, name + ".partial_rotary_factor");
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
// transformers 5.24 decides it for each model type, not by one rule for all
// (each family's LayerRule, families.cpp):
//
//   llama    layer_types and sliding_window are ignored: every layer is full.
//   mistral  layer_types is ignored (transformers warns); sliding_window,
//            when not null (absent means the class default 4096), applies
//            to every layer.
//   phi3     the same, but an absent sliding_window is none.
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

/// The window and the layer types when config.json leaves layer_types out
/// (kFromLayer and kPeriodic).
std::pair<int64_t, std::vector<LayerType>> default_layers(const std::string& path, const Json& json,
                                                          const Family& family, int64_t layers) {
  const FamilyLayers& rule = family.layers;
  if (rule.rule == LayerRule::kPeriodic) {
    const int64_t window =
        int_or(path, json, "sliding_window", rule.default_window, /*null_value=*/0);
    const int64_t period = rule.period_field
                               ? int_or(path, json, rule.period_field, rule.period, rule.period)
                               : rule.period;
    TORCH_CHECK(period >= 1, path, ": expected field \"", rule.period_field, "\" >= 1 but got ",
                period);
    return {window, periodic_layers(layers, period)};
  }
  const bool use_window = has(json, "use_sliding_window") &&
                          as_bool(path, json["use_sliding_window"], "use_sliding_window");
  const int64_t window =
      use_window ? int_or(path, json, "sliding_window", rule.default_window, /*null_value=*/0) : 0;
  std::vector<LayerType> types;
  if (window != 0) {
    const int64_t first = has(json, "max_window_layers")
                              ? as_int(path, json["max_window_layers"], "max_window_layers")
                              : rule.window_from_layer;
    for (int64_t i = 0; i < layers; ++i) {
      types.push_back(i >= first ? LayerType::kSliding : LayerType::kFull);
    }
  }
  return {window, types};
}

void read_layers(const std::string& path, const Json& json, const Family& family,
                 ModelConfig& config) {
  const int64_t layers = config.num_hidden_layers;
  config.layer_types.clear();
  config.sliding_window = 0;
  if (family.layers.rule == LayerRule::kAllFull) return;
  if (family.layers.rule == LayerRule::kAllSliding) {
    config.sliding_window =
        int_or(path, json, "sliding_window", family.layers.default_window, /*null_value=*/0);
    if (config.sliding_window != 0) config.layer_types = all_sliding(layers);
    return;
  }
  auto [window, types] = default_layers(path, json, family, layers);
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

/// A size field: the class default when absent; null is not a size.
int64_t size_or(const std::string& path, const Json& json, const char* key, int64_t absent) {
  auto it = json.find(key);
  if (it == json.end()) return absent;
  return as_int(path, *it, key);
}

void read_sizes(const std::string& path, const Json& json, const FamilyDefaults& d,
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
  config.rms_norm_eps = has(json, "rms_norm_eps")
                            ? as_double(path, json["rms_norm_eps"], "rms_norm_eps")
                            : d.rms_norm_eps;
  config.tie_word_embeddings = d.tie_word_embeddings;
  if (has(json, "tie_word_embeddings")) {
    config.tie_word_embeddings = as_bool(path, json["tie_word_embeddings"], "tie_word_embeddings");
  }
}

/// The MLP's activation field, which must name the family's one
/// activation; attention_bias where the family reads it; the switches the
/// family refuses. apply_family set the rest (biases as each family builds
/// them, q/k norms, Gemma's norms).
void read_projections(const std::string& path, const Json& json, const Family& family,
                      ModelConfig& config) {
  const char* key = family.traits.activation_field;
  const char* want = activation_name(family.traits.activation);
  const std::string act = has(json, key) ? as_string(path, json[key], key) : want;
  TORCH_CHECK(act == want, path, ": expected ", key, " \"", want, "\" but got \"", act, "\"");
  if (family.traits.bias == BiasRule::kAttentionBias && has(json, "attention_bias")) {
    config.attention_bias = as_bool(path, json["attention_bias"], "attention_bias");
    config.o_proj_bias = config.attention_bias;
  }
  for (const Refusal& refusal : family.refuses) {
    TORCH_CHECK(!has(json, refusal.field) || !as_bool(path, json[refusal.field], refusal.field),
                path, ": expected field \"", refusal.field, "\" false (", refusal.reason,
                ") but got true");
  }
}

/// Gemma's numbers: query_pre_attn_scalar and the soft-caps (Gemma 3's
/// attention ignores attn_logit_softcapping, as transformers 5.24's does).
void read_gemma(const std::string& path, const Json& json, const GemmaMath& gemma,
                ModelConfig& config) {
  config.query_pre_attn_scalar = double_or(path, json, "query_pre_attn_scalar", 256);
  TORCH_CHECK(config.query_pre_attn_scalar > 0, path,
              ": expected field \"query_pre_attn_scalar\" > 0 but got ",
              config.query_pre_attn_scalar);
  config.final_logit_softcapping =
      double_or(path, json, "final_logit_softcapping", gemma.final_softcap);
  config.attn_logit_softcapping =
      gemma.reads_attn_softcap ? double_or(path, json, "attn_logit_softcapping", gemma.attn_softcap)
                               : 0;
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

/// `read()`, with the file's name put before the message of any c10::Error
/// it raises (a check that does not know the file it reads from).
template <typename Read>
decltype(auto) in_file(const std::string& path, Read&& read) {
  try {
    return read();
  } catch (const c10::Error& e) {
    TORCH_CHECK(false, path, ": ", e.what_without_backtrace());
    throw;  // not reached
  }
}

/// The row of config.json's model_type; an unknown type is refused naming
/// the file and every known type.
const Family& family_of(const std::string& path, const Json& json) {
  const std::string type =
      as_string(path, require(path, json, "model_type", "model_type"), "model_type");
  return *in_file(path, [&] { return &family(type); });
}

}  // namespace

ModelConfig load_config(const std::string& config_json_path) {
  const std::string& path = config_json_path;
  const Json json = parse_json_file(path);
  const Family& family = family_of(path, json);
  ModelConfig config;
  apply_family(family, config);
  read_sizes(path, json, family.defaults, config);
  read_projections(path, json, family, config);
  if (family.gemma.on) read_gemma(path, json, family.gemma, config);
  if (family.traits.rope_per_layer_type) {
    read_gemma3_rope(path, json, config);
  } else {
    read_rope_fields(path, json, config.rope);
  }
  check_full_rotary(path, json, "partial_rotary_factor");
  read_layers(path, json, family, config);
  const int64_t eos = family.defaults.eos_token_id;
  config.eos_token_ids =
      read_eos(path, json, eos >= 0 ? std::vector<int64_t>{eos} : std::vector<int64_t>{});
  config.bos_token_id = int_or(path, json, "bos_token_id", family.defaults.bos_token_id, -1);
  in_file(path, [&] { config.validate(); });
  return config;
}

std::vector<int64_t> load_generation_eos(const std::string& generation_config_path,
                                         const std::vector<int64_t>& fallback) {
  const Json json = parse_json_file(generation_config_path);
  return read_eos(generation_config_path, json, fallback);
}

}  // namespace statickv::reference
