// The parameter-name table: the one place Hugging Face's decoder-layer
// parameter names are spelled (the loader checks them, the model reads them).

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/families.hpp>

#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

namespace statickv::reference {

std::string parameter_name(int64_t layer, LayerParam param) {
  const char* suffix = "";
  switch (param) {
    case LayerParam::kInputNorm:
      suffix = "input_layernorm.weight";
      break;
    case LayerParam::kQProj:
      suffix = "self_attn.q_proj.weight";
      break;
    case LayerParam::kKProj:
      suffix = "self_attn.k_proj.weight";
      break;
    case LayerParam::kVProj:
      suffix = "self_attn.v_proj.weight";
      break;
    case LayerParam::kQBias:
      suffix = "self_attn.q_proj.bias";
      break;
    case LayerParam::kKBias:
      suffix = "self_attn.k_proj.bias";
      break;
    case LayerParam::kVBias:
      suffix = "self_attn.v_proj.bias";
      break;
    case LayerParam::kOProj:
      suffix = "self_attn.o_proj.weight";
      break;
    case LayerParam::kOBias:
      suffix = "self_attn.o_proj.bias";
      break;
    case LayerParam::kPostNorm:
      suffix = "post_attention_layernorm.weight";
      break;
    case LayerParam::kGateProj:
      suffix = "mlp.gate_proj.weight";
      break;
    case LayerParam::kUpProj:
      suffix = "mlp.up_proj.weight";
      break;
    case LayerParam::kDownProj:
      suffix = "mlp.down_proj.weight";
      break;
    case LayerParam::kQNorm:
      suffix = "self_attn.q_norm.weight";
      break;
    case LayerParam::kKNorm:
      suffix = "self_attn.k_norm.weight";
      break;
    case LayerParam::kPreFfnNorm:
      suffix = "pre_feedforward_layernorm.weight";
      break;
    case LayerParam::kPostFfnNorm:
      suffix = "post_feedforward_layernorm.weight";
      break;
  }
  return "model.layers." + std::to_string(layer) + "." + suffix;
}

std::vector<std::pair<LayerParam, std::vector<int64_t>>> layer_parameters(
    const ModelConfig& config) {
  const int64_t hidden = config.hidden_size;
  const int64_t inter = config.intermediate_size;
  const int64_t q_dim = config.num_attention_heads * config.head_dim;
  const int64_t kv_dim = config.num_key_value_heads * config.head_dim;
  using P = LayerParam;
  std::vector<std::pair<P, std::vector<int64_t>>> out = {{P::kInputNorm, {hidden}},
                                                         {P::kQProj, {q_dim, hidden}},
                                                         {P::kKProj, {kv_dim, hidden}},
                                                         {P::kVProj, {kv_dim, hidden}}};
  if (config.attention_bias) {
    out.push_back({P::kQBias, {q_dim}});
    out.push_back({P::kKBias, {kv_dim}});
    out.push_back({P::kVBias, {kv_dim}});
  }
  out.push_back({P::kOProj, {hidden, q_dim}});
  if (config.o_proj_bias) out.push_back({P::kOBias, {hidden}});
  out.push_back({P::kPostNorm, {hidden}});
  out.push_back({P::kGateProj, {inter, hidden}});
  out.push_back({P::kUpProj, {inter, hidden}});
  out.push_back({P::kDownProj, {hidden, inter}});
  if (config.qk_norm) {
    out.push_back({P::kQNorm, {config.head_dim}});
    out.push_back({P::kKNorm, {config.head_dim}});
  }
  if (config.sandwich_norms) {
    out.push_back({P::kPreFfnNorm, {hidden}});
    out.push_back({P::kPostFfnNorm, {hidden}});
  }
  return out;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> expected_parameters(
    const ModelConfig& config) {
  config.validate();
  std::vector<std::pair<std::string, std::vector<int64_t>>> out;
  out.push_back({kEmbedTokens, {config.vocab_size, config.hidden_size}});
  const auto per_layer = layer_parameters(config);
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    for (const auto& [param, shape] : per_layer)
      out.push_back({parameter_name(layer, param), shape});
  }
  out.push_back({kFinalNorm, {config.hidden_size}});
  if (!config.tie_word_embeddings) {
    out.push_back({kLmHead, {config.vocab_size, config.hidden_size}});
  }
  return out;
}

namespace {

/// A group of one layer's parameters stored as one tensor, rows in order.
struct FusedGroup {
  const char* suffix;
  std::vector<LayerParam> parts;
};

const std::vector<FusedGroup>& fused_groups() {
  static const std::vector<FusedGroup> groups = {
      {"self_attn.qkv_proj.weight", {LayerParam::kQProj, LayerParam::kKProj, LayerParam::kVProj}},
      {"mlp.gate_up_proj.weight", {LayerParam::kGateProj, LayerParam::kUpProj}},
  };
  return groups;
}

/// `tensors` with each layer's group members replaced, where the first
/// stood, by one tensor of the group's rows.
std::vector<DiskTensor> fuse(const ModelConfig& config, const std::vector<DiskTensor>& tensors) {
  std::map<std::string, std::vector<int64_t>> shapes;
  for (const DiskTensor& t : tensors) shapes[t.name] = t.shape;
  std::map<std::string, DiskTensor> fused_at;  // a group's first member -> the group's tensor
  std::set<std::string> absorbed;              // the other members
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    for (const FusedGroup& group : fused_groups()) {
      const std::string first = parameter_name(layer, group.parts.front());
      DiskTensor fused{"model.layers." + std::to_string(layer) + "." + group.suffix,
                       {0, shapes.at(first)[1]},
                       {}};
      for (LayerParam param : group.parts) {
        const std::string name = parameter_name(layer, param);
        fused.shape[0] += shapes.at(name)[0];
        fused.parts.push_back({name, shapes.at(name)[0]});
        if (name != first) absorbed.insert(name);
      }
      fused_at[first] = fused;
    }
  }
  std::vector<DiskTensor> out;
  for (const DiskTensor& t : tensors) {
    if (auto it = fused_at.find(t.name); it != fused_at.end()) {
      out.push_back(it->second);
    } else if (absorbed.count(t.name) == 0) {
      out.push_back(t);
    }
  }
  return out;
}

}  // namespace

std::vector<DiskTensor> disk_tensors(const ModelConfig& config) {
  std::vector<DiskTensor> out;
  for (auto& [name, shape] : expected_parameters(config)) out.push_back({name, shape, {}});
  if (family(config.model_type).disk == DiskLayout::kSeparate) return out;
  return fuse(config, out);
}

}  // namespace statickv::reference
