// The tensor-parallel plan of one rank and the parameter slices it holds
// (docs/tensor_parallel.md).

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/tensor_parallel.hpp>

namespace statickv::reference {

namespace {

void check_divides(const char* field, int64_t value, int64_t world) {
  TORCH_CHECK(value % world == 0, field, ": expected a multiple of the tensor-parallel world size ",
              world, " but got ", value);
}

}  // namespace

TpPlan plan_tensor_parallel(const ModelConfig& config, const TensorParallel& tp) {
  config.validate();
  detail::check_rank_of_world(tp.rank, tp.world);
  check_divides("ModelConfig.num_attention_heads", config.num_attention_heads, tp.world);
  const int64_t kv = config.num_key_value_heads;
  TORCH_CHECK(kv % tp.world == 0 || tp.world % kv == 0,
              "ModelConfig.num_key_value_heads: expected a multiple of the tensor-parallel world "
              "size ",
              tp.world, " (heads split) or a divisor of it (heads replicated) but got ", kv);
  check_divides("ModelConfig.intermediate_size", config.intermediate_size, tp.world);
  if (tp.vocab_parallel) {
    check_divides("ModelConfig.vocab_size (vocab-parallel LM head)", config.vocab_size, tp.world);
  }
  TpPlan plan;
  plan.tp = tp;
  plan.kv = shard_kv_heads(config.num_key_value_heads, tp.rank, tp.world);
  plan.q_heads = config.num_attention_heads / tp.world;
  plan.q_first = tp.rank * plan.q_heads;
  // This rank's query heads all read its kv heads (follows from the rules
  // above; docs/tensor_parallel.md).
  const int64_t group = config.num_attention_heads / config.num_key_value_heads;
  TORCH_INTERNAL_ASSERT(plan.q_first / group == plan.kv.first &&
                        (plan.q_first + plan.q_heads - 1) / group ==
                            plan.kv.first + plan.kv.count - 1);
  plan.inter = config.intermediate_size / tp.world;
  plan.inter_first = tp.rank * plan.inter;
  plan.vocab = tp.vocab_parallel ? config.vocab_size / tp.world : config.vocab_size;
  plan.vocab_first = tp.vocab_parallel ? tp.rank * plan.vocab : 0;
  return plan;
}

std::map<std::string, Slice> shard_slices(const ModelConfig& config, const TpPlan& plan) {
  const int64_t d = config.head_dim;
  const Slice q_rows{0, plan.q_first * d, plan.q_heads * d};
  const Slice kv_rows{0, plan.kv.first * d, plan.kv.count * d};
  const Slice inter_rows{0, plan.inter_first, plan.inter};
  std::map<std::string, Slice> out;
  if (plan.tp.world == 1) return out;
  for (int64_t layer = 0; layer < config.num_hidden_layers; ++layer) {
    using P = LayerParam;
    auto name = [layer](P param) { return parameter_name(layer, param); };
    out[name(P::kQProj)] = q_rows;
    out[name(P::kKProj)] = out[name(P::kVProj)] = kv_rows;
    if (config.attention_bias) {
      out[name(P::kQBias)] = q_rows;
      out[name(P::kKBias)] = out[name(P::kVBias)] = kv_rows;
    }
    out[name(P::kOProj)] = Slice{1, q_rows.start, q_rows.length};  // o_bias: replicated
    out[name(P::kGateProj)] = out[name(P::kUpProj)] = inter_rows;
    out[name(P::kDownProj)] = Slice{1, inter_rows.start, inter_rows.length};
  }
  // A tied head is the (replicated) embedding: the model slices it itself.
  if (plan.tp.vocab_parallel && !config.tie_word_embeddings) {
    out[kLmHead] = Slice{0, plan.vocab_first, plan.vocab};
  }
  return out;
}

std::map<std::string, at::Tensor> shard_weights(const ModelConfig& config, const TpPlan& plan,
                                                std::map<std::string, at::Tensor> full) {
  for (const auto& [name, slice] : shard_slices(config, plan)) {
    auto it = full.find(name);
    TORCH_CHECK(it != full.end(), "weights: expected parameter ", name, " but it is missing");
    it->second = it->second.narrow(slice.dim, slice.start, slice.length);
  }
  return full;
}

std::vector<std::pair<std::string, std::vector<int64_t>>> expected_parameters(
    const ModelConfig& config, const TpPlan& plan) {
  auto out = expected_parameters(config);
  const auto slices = shard_slices(config, plan);
  for (auto& [name, shape] : out) {
    auto it = slices.find(name);
    if (it != slices.end()) shape[static_cast<size_t>(it->second.dim)] = it->second.length;
  }
  return out;
}

}  // namespace statickv::reference
