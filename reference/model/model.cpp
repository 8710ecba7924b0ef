// The reference Llama-family decoder and its attention backends.

#include <statickv/checks.hpp>
#include <statickv/reference/model.hpp>

#include <cmath>

namespace statickv::reference {

namespace {

// Hugging Face's rotate_half: (x1, x2) -> (-x2, x1) on the two halves.
at::Tensor rotate_half(const at::Tensor& x) {
  const int64_t half = x.size(-1) / 2;
  return at::cat({x.narrow(-1, half, half).neg(), x.narrow(-1, 0, half)}, -1);
}

at::Tensor project(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {}) {
  return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

// Inverse frequencies [head_dim / 2] (float32), "default" or "llama3".
at::Tensor inverse_frequencies(const RopeConfig& rope, int64_t head_dim) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor inv = at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong))
                       .to(at::kFloat)
                       .div(static_cast<double>(head_dim));
  inv = at::pow(at::scalar_tensor(rope.theta, f32), inv).reciprocal();
  if (rope.type == "llama3") {
    // Llama 3.1's frequency-dependent scaling: long wavelengths are divided
    // by `factor`, short ones kept, the band between interpolated.
    const double old_len = static_cast<double>(rope.original_max_position_embeddings);
    const double low_wavelen = old_len / rope.low_freq_factor;
    const double high_wavelen = old_len / rope.high_freq_factor;
    const at::Tensor wavelen = inv.reciprocal().mul(2 * M_PI);
    at::Tensor scaled = at::where(wavelen.gt(low_wavelen), inv.div(rope.factor), inv);
    const at::Tensor smooth = wavelen.reciprocal()
                                  .mul(old_len)
                                  .sub(rope.low_freq_factor)
                                  .div(rope.high_freq_factor - rope.low_freq_factor);
    const at::Tensor smoothed =
        smooth.neg().add(1).mul(scaled).div(rope.factor).add(smooth.mul(scaled));
    const at::Tensor medium = wavelen.ge(high_wavelen).logical_and(wavelen.le(low_wavelen));
    inv = at::where(medium, smoothed, scaled);
  }
  return inv;
}

}  // namespace

LlamaModel::LlamaModel(ModelConfig config, Weights weights, TpShard tp)
    : config_(std::move(config)), weights_(std::move(weights)), device_(at::kCPU), tp_(tp) {
  config_.validate();
  const TensorParallel where{tp_.comm ? tp_.comm->rank() : 0, tp_.comm ? tp_.comm->world() : 1,
                             tp_.vocab_parallel};
  plan_ = plan_tensor_parallel(config_, where);
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
  auto get = [&](int64_t layer, LayerParam param) {
    return weights_.at(parameter_name(layer, param));
  };
  for (int64_t i = 0; i < config_.num_hidden_layers; ++i) {
    using P = LayerParam;
    Layer layer;
    layer.input_norm = get(i, P::kInputNorm);
    layer.post_norm = get(i, P::kPostNorm);
    layer.q_proj = get(i, P::kQProj);
    layer.k_proj = get(i, P::kKProj);
    layer.v_proj = get(i, P::kVProj);
    layer.o_proj = get(i, P::kOProj);
    if (config_.attention_bias) {
      layer.q_bias = get(i, P::kQBias);
      layer.k_bias = get(i, P::kKBias);
      layer.v_bias = get(i, P::kVBias);
    }
    if (config_.o_proj_bias) layer.o_bias = get(i, P::kOBias);
    layer.gate_proj = get(i, P::kGateProj);
    layer.up_proj = get(i, P::kUpProj);
    layer.down_proj = get(i, P::kDownProj);
    layers_.push_back(std::move(layer));
  }
  final_norm_ = weights_.at(kFinalNorm);
  lm_head_ = config_.tie_word_embeddings ? embed_.narrow(0, plan_.vocab_first, plan_.vocab)
                                         : weights_.at(kLmHead);
  inv_freq_ = inverse_frequencies(config_.rope, config_.head_dim).to(device_);
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

// RMSNorm as Hugging Face computes it: in float32, weight applied after the
// cast back to the activation dtype.
at::Tensor LlamaModel::rms_norm(const at::Tensor& x, const at::Tensor& weight) const {
  const at::Tensor h = x.to(at::kFloat);
  const at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  return weight.mul(h.mul(at::rsqrt(variance.add(config_.rms_norm_eps))).to(x.scalar_type()));
}

// cos/sin [b, 1, q, head_dim] in the model dtype, computed in float32.
std::pair<at::Tensor, at::Tensor> LlamaModel::rope(const at::Tensor& positions) const {
  const at::Tensor freqs = positions.to(at::kFloat).unsqueeze(-1).mul(inv_freq_);  // [b, q, D/2]
  const at::Tensor emb = at::cat({freqs, freqs}, -1).unsqueeze(1);
  return {emb.cos().to(dtype_), emb.sin().to(dtype_)};
}

at::Tensor LlamaModel::forward(const at::Tensor& ids, const at::Tensor& positions,
                               AttentionBackend& backend, int64_t attend_len, Logits logits) const {
  check_tokens("ids", ids);
  check_tokens("positions", positions);
  TORCH_CHECK(positions.sizes() == ids.sizes(), "positions: expected shape ", ids.sizes(),
              " (as ids) but got ", positions.sizes());
  detail::check_device("ids", ids, device_, " (the model's)");
  detail::check_device("positions", positions, device_, " (the model's)");
  if (tp_.comm && tp_.check_divergence) check_same_step(ids, attend_len, logits);
  const int64_t b = ids.size(0);

  backend.begin(positions, attend_len);
  // Padded tokens get position 0 for the rotary embedding; their outputs are
  // never used and the cache never stores them.
  const auto [cos, sin] = rope(positions.clamp_min(0));
  at::Tensor x = at::embedding(embed_, ids);  // [b, q, hidden]
  for (int64_t l = 0; l < config_.num_hidden_layers; ++l) {
    const Layer& layer = layers_[static_cast<size_t>(l)];
    x = x.add(attention(layer, l, rms_norm(x, layer.input_norm), cos, sin, backend));
    x = x.add(mlp(layer, rms_norm(x, layer.post_norm)));
  }
  if (logits == Logits::kLast) {
    // argmax picks the first of equal maxima: with distinct positions, the
    // row's newest token.
    const at::Tensor last = positions.argmax(1).view({b, 1, 1}).expand({b, 1, x.size(2)});
    x = x.gather(1, last).squeeze(1);  // [b, hidden]
  }
  return lm_head(rms_norm(x, final_norm_));
}

// Self-attention of this rank's heads (all of them in a single process);
// o_proj is row-parallel, so its bias is added once, after the sum.
at::Tensor LlamaModel::attention(const Layer& layer, int64_t l, const at::Tensor& h,
                                 const at::Tensor& cos, const at::Tensor& sin,
                                 AttentionBackend& backend) const {
  const int64_t b = h.size(0), q = h.size(1), d = config_.head_dim;
  const int64_t heads = plan_.q_heads, kv_heads = plan_.kv.count;
  at::Tensor query = project(h, layer.q_proj, layer.q_bias).view({b, q, heads, d}).transpose(1, 2);
  at::Tensor key = project(h, layer.k_proj, layer.k_bias).view({b, q, kv_heads, d}).transpose(1, 2);
  const at::Tensor value =
      project(h, layer.v_proj, layer.v_bias).view({b, q, kv_heads, d}).transpose(1, 2);
  query = query.mul(cos).add(rotate_half(query).mul(sin));
  key = key.mul(cos).add(rotate_half(key).mul(sin));
  const at::Tensor attn = backend.attend(l, query, key, value);  // [b, heads, q, d]
  const at::Tensor flat = attn.transpose(1, 2).reshape({b, q, heads * d});
  if (!tp_.comm) return project(flat, layer.o_proj, layer.o_bias);
  at::Tensor out = reduce(project(flat, layer.o_proj));
  return layer.o_bias.defined() ? out.add(layer.o_bias) : out;
}

// SwiGLU over this rank's columns; down_proj is row-parallel.
at::Tensor LlamaModel::mlp(const Layer& layer, const at::Tensor& g) const {
  return reduce(project(at::silu(project(g, layer.gate_proj)).mul(project(g, layer.up_proj)),
                        layer.down_proj));
}

// float32 logits over the whole vocabulary on every rank.
at::Tensor LlamaModel::lm_head(const at::Tensor& x) const {
  const at::Tensor local = project(x, lm_head_).to(at::kFloat);
  if (!tp_.comm || !tp_.vocab_parallel) return local;
  return tp_.comm->all_gather_last(local.contiguous());
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
// pair mismatched tensors. (Reading the checksum syncs with the device:
// this is a debug check.)
void LlamaModel::check_same_step(const at::Tensor& ids, int64_t attend_len, Logits logits) const {
  const at::Tensor flat = ids.reshape({-1});
  const int64_t checksum =
      flat.mul(at::arange(1, flat.numel() + 1, flat.options())).sum().item<int64_t>();
  uint64_t fingerprint = static_cast<uint64_t>(steps_++);  // unsigned: wraps, never overflows
  for (int64_t part :
       {ids.size(0), ids.size(1), attend_len, static_cast<int64_t>(logits), checksum}) {
    fingerprint = fingerprint * 1000003u + static_cast<uint64_t>(part);
  }
  tp_.comm->check_same(
      "LlamaModel::forward (pass number, batch, query length, attend_len, token checksum)",
      static_cast<int64_t>(fingerprint));
}

}  // namespace statickv::reference
