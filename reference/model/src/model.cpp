// The reference decoder: loading a checkpoint's weights into layers, the
// forward pass and what tensor parallelism adds to it
// (ModelConfig, docs/checkpoints.md "Model families"). The layers
// themselves and the LM head are model_layers.cpp, the rotary embedding
// model_rope.cpp.

#include <statickv/detail/checks.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/model/cpu_linear.hpp>
#include <statickv/model/model.hpp>

#include <ATen/record_function.h>

#include <cmath>

namespace statickv::reference {

namespace {

// Concatenates `parts` along dim 0 and points each map entry at its row
// view of the result, so the separate tensors are freed (no second copy).
at::Tensor concat_rows(Weights& weights, const std::vector<std::string>& names) {
  std::vector<at::Tensor> parts;
  for (const std::string& name : names) parts.push_back(weights.at(name));
  const at::Tensor whole = at::cat(parts, 0);
  int64_t start = 0;
  for (size_t i = 0; i < names.size(); ++i) {
    const int64_t rows = parts[i].size(0);
    weights[names[i]] = whole.narrow(0, start, rows);
    start += rows;
  }
  return whole;
}

}  // namespace

LlamaModel::LlamaModel(ModelConfig config, Weights weights, TpShard tp)
    : config_(std::move(config)), weights_(std::move(weights)), device_(at::kCPU), tp_(tp) {
  config_.validate();
  const TensorParallel where{tp_.comm ? tp_.comm->rank() : 0, tp_.comm ? tp_.comm->world() : 1,
                             tp_.vocab_parallel};
  plan_ = plan_tensor_parallel(config_, where);
  check_weights();
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) layers_.push_back(load_layer(i));
  final_norm_ = weights_.at(kFinalNorm);
  fused_final_norm_ = fused_norm_weight(final_norm_);
  lm_head_ = config_.tie_word_embeddings ? embed_.narrow(0, plan_.vocab_first, plan_.vocab)
                                         : weights_.at(kLmHead);
  load_rope();
  // Note [CPU projections]: the route is measured once per process, here
  // at load rather than inside a first decode step someone is timing, on
  // the projections as a decode step reads them (linear_route takes the
  // first 64 MiB).
  if (device_.is_cpu() && dtype_ == at::kFloat) {
    std::vector<at::Tensor> sample;
    for (const Layer& layer : layers_) {
      for (const at::Tensor& w : {layer.qkv, layer.o_proj, layer.gate_up, layer.down_proj}) {
        if (w.defined()) sample.push_back(w);
      }
    }
    linear_route(sample);
  }
}

// Every parameter this rank holds, at its shape, in the embedding's dtype
// and on its device (which become the model's).
void LlamaModel::check_weights() {
  for (const auto& [name, shape] : expected_parameters(config_, plan_)) {
    auto it = weights_.find(name);
    TORCH_CHECK(it != weights_.end(), "weights: expected parameter ", name, " but it is missing");
    TORCH_CHECK(it->second.sizes() == at::IntArrayRef(shape), "weights[", name,
                "]: expected shape ", at::IntArrayRef(shape), " but got ", it->second.sizes());
  }
  embed_ = weights_.at(kEmbedTokens);
  dtype_ = embed_.scalar_type();
  device_ = embed_.device();
  for (const auto& [name, tensor] : weights_) {
    TORCH_CHECK(tensor.scalar_type() == dtype_ && tensor.device() == device_, "weights[", name,
                "]: expected ", dtype_, " on ", device_, " like the embedding but got ",
                tensor.scalar_type(), " on ", tensor.device());
  }
}

// Layer i's weights. Note [fused decode path]: one q/k/v and one gate/up
// weight per layer; the plain path's weights are row views of them.
LlamaModel::Layer LlamaModel::load_layer(int64_t i) {
  using P = LayerParam;
  auto name = [i](LayerParam p) { return parameter_name(i, p); };
  auto get = [&](LayerParam p) { return weights_.at(name(p)); };
  auto get_if = [&](bool present, LayerParam p) { return present ? get(p) : at::Tensor(); };
  Layer layer;
  layer.qkv = concat_rows(weights_, {name(P::kQProj), name(P::kKProj), name(P::kVProj)});
  if (config_.attention_bias) {
    layer.qkv_bias = concat_rows(weights_, {name(P::kQBias), name(P::kKBias), name(P::kVBias)});
  }
  layer.gate_up = concat_rows(weights_, {name(P::kGateProj), name(P::kUpProj)});
  layer.input_norm = get(P::kInputNorm);
  layer.post_norm = get(P::kPostNorm);
  layer.q_proj = get(P::kQProj);
  layer.k_proj = get(P::kKProj);
  layer.v_proj = get(P::kVProj);
  layer.o_proj = get(P::kOProj);
  layer.q_bias = get_if(config_.attention_bias, P::kQBias);
  layer.k_bias = get_if(config_.attention_bias, P::kKBias);
  layer.v_bias = get_if(config_.attention_bias, P::kVBias);
  layer.o_bias = get_if(config_.o_proj_bias, P::kOBias);
  layer.gate_proj = get(P::kGateProj);
  layer.up_proj = get(P::kUpProj);
  layer.down_proj = get(P::kDownProj);
  layer.q_norm = get_if(config_.qk_norm, P::kQNorm);
  layer.k_norm = get_if(config_.qk_norm, P::kKNorm);
  layer.pre_ffn_norm = get_if(config_.sandwich_norms, P::kPreFfnNorm);
  layer.post_ffn_norm = get_if(config_.sandwich_norms, P::kPostFfnNorm);
  FusedNorms& f = layer.fused;
  f.input_norm = fused_norm_weight(layer.input_norm);
  f.post_norm = fused_norm_weight(layer.post_norm);
  f.pre_ffn_norm = fused_norm_weight(layer.pre_ffn_norm);
  f.post_ffn_norm = fused_norm_weight(layer.post_ffn_norm);
  f.q_norm = fused_norm_weight(layer.q_norm, query_factor());
  f.k_norm = fused_norm_weight(layer.k_norm);
  return layer;
}

void LlamaModel::check_path(DecodePath path) const {
  if (path != DecodePath::kFused) return;
  TORCH_CHECK(!tp_.comm, "path: expected plain or auto with tp=", tp_.comm->world(),
              " (the fused layer folds o_proj and down_proj into in-place GEMMs, which do not "
              "all-reduce) but got fused");
}

DecodePath LlamaModel::resolve_path(DecodePath path, const CacheConfig& cache) const {
  if (path != DecodePath::kAuto) return path;
  const bool applies = !tp_.comm && cache.plain_storage() && !cache.host_offload;
  return applies ? DecodePath::kFused : DecodePath::kPlain;
}

CacheConfig LlamaModel::cache_config(int64_t max_batch, int64_t max_len) const {
  CacheConfig c;
  c.num_layers = config_.num_hidden_layers;
  c.num_kv_heads = plan_.kv.count;
  c.head_dim = config_.head_dim;
  c.max_batch = max_batch;
  c.max_len = max_len;
  c.dtype = dtype_;
  c.device = device_;
  c.layer_types = config_.layer_types;
  c.sliding_window = config_.has_sliding() ? config_.sliding_window : 0;
  return c;
}

// Gemma scales the embeddings by sqrt(hidden_size) rounded to the model
// dtype, as transformers' scaled embedding does.
at::Tensor LlamaModel::embed(const at::Tensor& ids) const {
  const at::Tensor x = at::embedding(embed_, ids);  // [b, q, hidden]
  if (!config_.scale_embeddings) return x;
  const double scale = std::sqrt(static_cast<double>(config_.hidden_size));
  return x.mul(at::scalar_tensor(scale, x.options()));
}

at::Tensor LlamaModel::forward(const at::Tensor& ids, const at::Tensor& positions,
                               AttentionBackend& backend, int64_t attend_len, Logits logits) const {
  check_tokens("ids", ids);
  check_tokens("positions", positions);
  TORCH_CHECK(positions.sizes() == ids.sizes(), "positions: expected shape ", ids.sizes(),
              " (as ids) but got ", positions.sizes());
  detail::check_device("ids", ids, device_, " (the model's)");
  detail::check_device("positions", positions, device_, " (the model's)");
  const bool fused = backend.path() == DecodePath::kFused;
  check_path(backend.path());

  backend.set_logit_softcap(config_.attn_logit_softcapping);
  backend.begin(positions, attend_len);
  const Rotary rot = rotary(positions, attend_len);
  at::Tensor x = embed(ids);  // [b, q, hidden]
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    RECORD_USER_SCOPE(kLayerRegion);
    if (fused) {
      fused_layer(l, x, rot, backend);
    } else {
      x = plain_layer(l, x, rot, backend);
    }
  }
  if (logits == Logits::kNone) return at::Tensor();
  const int64_t b = ids.size(0);
  if (logits == Logits::kLast) {
    // argmax picks the first of equal maxima: with distinct positions, the
    // row's newest token.
    const at::Tensor last = positions.argmax(1).view({b, 1, 1}).expand({b, 1, x.size(2)});
    x = x.gather(1, last).squeeze(1);  // [b, hidden]
  }
  const at::Tensor normed = fused ? fused_rms_norm(x, fused_final_norm_) : rms_norm(x, final_norm_);
  return lm_head(normed, fused);
}

at::Tensor LlamaModel::reduce(at::Tensor partial) const {
  if (!tp_.comm) return partial;
  partial = partial.contiguous();
  tp_.comm->all_reduce_sum(partial);
  return partial;
}

// One int64 per pass: its number, shape and a checksum of its tokens. A
// rank that skipped, repeated, reshaped or fed other tokens to a pass
// differs from the others here, before any collective of the pass could
// pair mismatched tensors. The checksum is summed on the host from the
// packed ids: nothing reads the device (the collective's own result aside).
void LlamaModel::check_same_step(const at::Tensor& ids, int64_t attend_len, Logits logits) const {
  if (!tp_.comm || !tp_.check_divergence) return;
  TORCH_CHECK(ids.device().is_cpu(), "ids: expected the pass's host inputs (cpu) but got ",
              ids.device(), " (the step check never reads the device)");
  TORCH_CHECK(ids.dim() == 2 && ids.scalar_type() == at::kLong,
              "ids: expected int64 [b, q] but got ", ids.scalar_type(), " ", ids.sizes());
  const at::Tensor flat = ids.contiguous();
  const int64_t* data = flat.data_ptr<int64_t>();
  uint64_t checksum = 0;  // unsigned: wraps, never overflows
  for (int64_t i = 0; i < flat.numel(); ++i) {
    checksum += static_cast<uint64_t>(i + 1) * static_cast<uint64_t>(data[i]);
  }
  uint64_t fingerprint = static_cast<uint64_t>(steps_++);
  for (int64_t part : {ids.size(0), ids.size(1), attend_len, static_cast<int64_t>(logits)}) {
    fingerprint = fingerprint * 1000003u + static_cast<uint64_t>(part);
  }
  fingerprint = fingerprint * 1000003u + checksum;
  tp_.comm->check_same(
      "a pass's host inputs (pass number, batch, query length, attend_len, token checksum)",
      static_cast<int64_t>(fingerprint));
}

}  // namespace statickv::reference
