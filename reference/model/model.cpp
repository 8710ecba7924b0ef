// The reference decoder: the Llama layer and what each family changes in it
// (ModelConfig, docs/checkpoints.md "Model families").

#include <statickv/detail/checks.hpp>
#include <statickv/kernel_switches.hpp>
#include <statickv/reference/act_mul.hpp>
#include <statickv/reference/checkpoint.hpp>
#include <statickv/reference/model.hpp>
#include <statickv/reference/rms_norm.hpp>
#include <statickv/rotary.hpp>

#include <ATen/record_function.h>

#include <cmath>
#include <tuple>

namespace statickv::reference {

namespace {

at::Tensor project(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {}) {
  return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

// x += a @ weight^T (+ bias), in place: the residual add folded into the
// GEMM (beta = 1), so no separate add kernel and no new activation.
void add_projection(at::Tensor& x, const at::Tensor& a, const at::Tensor& weight,
                    const at::Tensor& bias) {
  at::Tensor x2 = x.view({-1, x.size(-1)});
  x2.addmm_(a.reshape({-1, a.size(-1)}), weight.t());
  if (bias.defined()) x2.add_(bias);
}

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

// Inverse frequencies [head_dim / 2] (float32), "default", "linear" or "llama3".
at::Tensor inverse_frequencies(const RopeConfig& rope, int64_t head_dim) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor inv = at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong))
                       .to(at::kFloat)
                       .div(static_cast<double>(head_dim));
  inv = at::pow(at::scalar_tensor(rope.theta, f32), inv).reciprocal();
  if (rope.type == "linear") return inv.div(rope.factor);  // positions divided by factor
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

// [head_dim / 2] -> [head_dim]: rotate_half pairs element i with i + D/2,
// both turned by the same angle.
at::Tensor both_halves(const at::Tensor& inv) { return at::cat({inv, inv}); }

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
    // Note [fused decode path]: one q/k/v and one gate/up weight per layer;
    // the plain path's weights are row views of them.
    auto name = [i](LayerParam p) { return parameter_name(i, p); };
    layer.qkv = concat_rows(weights_, {name(P::kQProj), name(P::kKProj), name(P::kVProj)});
    if (config_.attention_bias) {
      layer.qkv_bias = concat_rows(weights_, {name(P::kQBias), name(P::kKBias), name(P::kVBias)});
    }
    layer.gate_up = concat_rows(weights_, {name(P::kGateProj), name(P::kUpProj)});
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
    if (config_.qk_norm) {
      layer.q_norm = get(i, P::kQNorm);
      layer.k_norm = get(i, P::kKNorm);
    }
    if (config_.sandwich_norms) {
      layer.pre_ffn_norm = get(i, P::kPreFfnNorm);
      layer.post_ffn_norm = get(i, P::kPostFfnNorm);
    }
    FusedNorms& f = layer.fused;
    f.input_norm = fused_norm_weight(layer.input_norm);
    f.post_norm = fused_norm_weight(layer.post_norm);
    f.pre_ffn_norm = fused_norm_weight(layer.pre_ffn_norm);
    f.post_ffn_norm = fused_norm_weight(layer.post_ffn_norm);
    f.q_norm = fused_norm_weight(layer.q_norm, query_factor());
    f.k_norm = fused_norm_weight(layer.k_norm);
    layers_.push_back(std::move(layer));
  }
  final_norm_ = weights_.at(kFinalNorm);
  fused_final_norm_ = fused_norm_weight(final_norm_);
  lm_head_ = config_.tie_word_embeddings ? embed_.narrow(0, plan_.vocab_first, plan_.vocab)
                                         : weights_.at(kLmHead);
  inv_freq_ = both_halves(inverse_frequencies(config_.rope, config_.head_dim)).to(device_);
  rope_table_ = rope_table(inv_freq_);
  if (config_.sliding_rope) {
    sliding_inv_freq_ =
        both_halves(inverse_frequencies(*config_.sliding_rope, config_.head_dim)).to(device_);
    sliding_rope_table_ = rope_table(sliding_inv_freq_);
  }
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

// RMSNorm as Hugging Face computes it: in float32, the weight applied after
// the cast back to the activation dtype (Llama) or (1 + weight) before it,
// in float32 (Gemma).
at::Tensor LlamaModel::rms_norm(const at::Tensor& x, const at::Tensor& weight) const {
  const at::Tensor h = x.to(at::kFloat);
  const at::Tensor variance = h.pow(2).mean(-1, /*keepdim=*/true);
  const at::Tensor normed = h.mul(at::rsqrt(variance.add(config_.rms_norm_eps)));
  if (config_.norm_style == NormStyle::kGemma) {
    return normed.mul(weight.to(at::kFloat).add(1.0)).to(x.scalar_type());
  }
  return weight.mul(normed.to(x.scalar_type()));
}

// RMSNorm in one kernel (reference::rms_norm) with a FusedNorms weight; it
// applies the weight before the cast back, so in fp16/bf16 it differs from
// rms_norm() by rounding.
at::Tensor LlamaModel::fused_rms_norm(const at::Tensor& x, const at::Tensor& weight) const {
  return reference::rms_norm(x, weight, config_.rms_norm_eps);
}

// What the fused norm multiplies by: Gemma's 1 + weight (computed in
// float32, as its norm does) and any `scale`, rounded once to the dtype.
at::Tensor LlamaModel::fused_norm_weight(const at::Tensor& weight, double scale) const {
  const bool gemma = config_.norm_style == NormStyle::kGemma;
  if (!weight.defined() || (!gemma && scale == 1.0)) return weight;
  at::Tensor w = weight.to(at::kFloat);
  if (gemma) w = w.add(1.0);
  return w.mul(scale).to(weight.scalar_type());
}

// cos/sin [b, 1, q, head_dim] in the model dtype, computed in float32 in
// three launches (Note [counted step]): the int64 positions times the
// frequencies (stored for both halves) promote to float32, and cos and sin
// round into the dtype as they write.
std::pair<at::Tensor, at::Tensor> LlamaModel::rope(const at::Tensor& positions,
                                                   const at::Tensor& inv_freq) const {
  const at::Tensor angles = positions.unsqueeze(1).unsqueeze(-1).mul(inv_freq);  // [b, 1, q, D]
  at::Tensor cos = at::empty(angles.sizes(), angles.options().dtype(dtype_));
  at::Tensor sin = at::empty_like(cos);
  at::cos_out(cos, angles);
  at::sin_out(sin, angles);
  return {cos, sin};
}

// Padded tokens get position 0 for the rotary embedding; their outputs are
// never used and the cache never stores them.
// Note [rope table]: a pass whose positions all fall in the table (one
// past the highest, attend_len, is at most its rows) gathers cos and sin
// from it in one launch per rope; any other computes them (three).
LlamaModel::Rotary LlamaModel::rotary(const at::Tensor& positions, int64_t attend_len) const {
  const at::Tensor clamped = positions.clamp_min(0);
  const bool table = attend_len > 0 && attend_len <= rope_table_.size(0);
  Rotary r;
  std::tie(r.cos, r.sin) = table ? from_table(rope_table_, clamped) : rope(clamped, inv_freq_);
  if (sliding_inv_freq_.defined()) {
    std::tie(r.sliding_cos, r.sliding_sin) =
        table ? from_table(sliding_rope_table_, clamped) : rope(clamped, sliding_inv_freq_);
  } else {
    r.sliding_cos = r.cos;
    r.sliding_sin = r.sin;
  }
  return r;
}

// [rows, 2 * head_dim]: cos then sin of positions 0..rows-1, by rope()
// itself, so the table holds what rope() computes for those positions.
at::Tensor LlamaModel::rope_table(const at::Tensor& inv_freq) const {
  const int64_t rows = std::min(config_.max_position_embeddings, kRopeTableRows);
  const int64_t d = config_.head_dim;
  const at::Tensor positions =
      at::arange(rows, at::TensorOptions().dtype(at::kLong).device(device_)).view({1, rows});
  const auto [cos, sin] = rope(positions, inv_freq);  // [1, 1, rows, d]
  return at::cat({cos.view({rows, d}), sin.view({rows, d})}, 1);
}

// cos and sin [b, 1, q, head_dim] (views of one [b, q, 2 * head_dim]
// gather) of positions `clamped` [b, q], each >= 0 and in the table.
std::pair<at::Tensor, at::Tensor> LlamaModel::from_table(const at::Tensor& table,
                                                         const at::Tensor& clamped) const {
  const int64_t b = clamped.size(0), q = clamped.size(1), d = config_.head_dim;
  const at::Tensor rows = at::embedding(table, clamped).view({b, 1, q, 2 * d});
  return {rows.narrow(-1, 0, d), rows.narrow(-1, d, d)};
}

// Gemma scales the embeddings by sqrt(hidden_size) rounded to the model
// dtype, as transformers' scaled embedding does.
at::Tensor LlamaModel::embed(const at::Tensor& ids) const {
  const at::Tensor x = at::embedding(embed_, ids);  // [b, q, hidden]
  if (!config_.scale_embeddings) return x;
  const double scale = std::sqrt(static_cast<double>(config_.hidden_size));
  return x.mul(at::scalar_tensor(scale, x.options()));
}

// The kernels scale scores by head_dim^-0.5; a query_pre_attn_scalar (Gemma)
// is folded into the query, so every kernel and cache path serves it.
double LlamaModel::query_factor() const {
  if (config_.query_pre_attn_scalar == 0) return 1.0;
  return std::sqrt(static_cast<double>(config_.head_dim) / config_.query_pre_attn_scalar);
}

at::Tensor LlamaModel::scale_query(const at::Tensor& query) const {
  const double factor = query_factor();
  return factor == 1.0 ? query : query.mul(factor);
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
  if (tp_.comm && tp_.check_divergence) check_same_step(ids, attend_len, logits);

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

// Self-attention of this rank's heads (all of them in a single process);
// o_proj is row-parallel, so its bias is added once, after the sum.
at::Tensor LlamaModel::attention(const Layer& layer, int64_t l, const at::Tensor& h,
                                 const at::Tensor& cos, const at::Tensor& sin,
                                 AttentionBackend& backend) const {
  const int64_t b = h.size(0), q = h.size(1), d = config_.head_dim;
  const int64_t heads = plan_.q_heads, kv_heads = plan_.kv.count;
  at::Tensor query = project(h, layer.q_proj, layer.q_bias).view({b, q, heads, d}).transpose(1, 2);
  at::Tensor key = project(h, layer.k_proj, layer.k_bias).view({b, q, kv_heads, d}).transpose(1, 2);
  if (config_.qk_norm) {  // over head_dim, before the rotation
    query = rms_norm(query, layer.q_norm);
    key = rms_norm(key, layer.k_norm);
  }
  const at::Tensor value =
      project(h, layer.v_proj, layer.v_bias).view({b, q, kv_heads, d}).transpose(1, 2);
  const at::Tensor attn = backend.attend(l, scale_query(apply_rotary(query, cos, sin)),
                                         apply_rotary(key, cos, sin), value);  // [b, heads, q, d]
  const at::Tensor flat = attn.transpose(1, 2).reshape({b, q, heads * d});
  if (!tp_.comm) return project(flat, layer.o_proj, layer.o_bias);
  at::Tensor out = reduce(project(flat, layer.o_proj));
  return layer.o_bias.defined() ? out.add(layer.o_bias) : out;
}

// The gated MLP (SiLU or GELU-tanh) over this rank's columns; down_proj is
// row-parallel.
at::Tensor LlamaModel::mlp(const Layer& layer, const at::Tensor& g) const {
  const at::Tensor gate = project(g, layer.gate_proj);
  return reduce(project(apply_activation(gate, config_.hidden_act).mul(project(g, layer.up_proj)),
                        layer.down_proj));
}

// float32 logits over the whole vocabulary on every rank. The fused path
// on a GPU in fp16/bf16 takes them straight from the GEMM's float32
// accumulator (one kernel, no cast; Note [fused decode path]): a logit
// differs from the rounded-then-cast one by the rounding it skips (at most
// half a unit in the model dtype's last place) and by the GEMM's choice of
// accumulation order.
at::Tensor LlamaModel::lm_head(const at::Tensor& x, bool fused) const {
  const bool half = dtype_ == at::kHalf || dtype_ == at::kBFloat16;
  at::Tensor local;
  if (fused && half && x.is_cuda() && kernel_enabled("fp32_logits")) {
    std::vector<int64_t> shape = x.sizes().vec();
    shape.back() = lm_head_.size(0);
    local = at::mm(x.reshape({-1, x.size(-1)}), lm_head_.t(), at::kFloat).view(shape);
  } else {
    local = project(x, lm_head_).to(at::kFloat);
  }
  const double cap = config_.final_logit_softcapping;
  if (cap > 0) local = local.div(cap).tanh_().mul_(cap);  // elementwise: before the gather is exact
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

// One layer as Hugging Face writes it: one op per step of the math (this
// rank's heads and columns under tensor parallelism). Gemma's sandwich
// norms wrap the attention output and the MLP in norms of their own.
at::Tensor LlamaModel::plain_layer(int64_t l, const at::Tensor& x, const Rotary& rot,
                                   AttentionBackend& backend) const {
  const Layer& layer = layers_[static_cast<size_t>(l)];
  const bool sliding = config_.layer_type(l) == LayerType::kSliding;
  const at::Tensor& cos = sliding ? rot.sliding_cos : rot.cos;
  const at::Tensor& sin = sliding ? rot.sliding_sin : rot.sin;
  const at::Tensor attn = attention(layer, l, rms_norm(x, layer.input_norm), cos, sin, backend);
  if (!config_.sandwich_norms) {
    const at::Tensor y = x.add(attn);
    return y.add(mlp(layer, rms_norm(y, layer.post_norm)));
  }
  const at::Tensor y = x.add(rms_norm(attn, layer.post_norm));
  return y.add(rms_norm(mlp(layer, rms_norm(y, layer.pre_ffn_norm)), layer.post_ffn_norm));
}

// Note [fused decode path]: the same layer in fewer kernels. One-kernel
// RMSNorm (reference::rms_norm, Gemma's 1 + weight precomputed), one q/k/v
// GEMM split by views, rotary and the cache write in one kernel
// (backend.attend_rotary), one gate/up GEMM, the activation times up in
// place. Where no norm follows a projection (every family but Gemma's
// sandwich), the residual add is folded into the o_proj and down_proj
// GEMMs, in place on x.
void LlamaModel::fused_layer(int64_t l, at::Tensor& x, const Rotary& rot,
                             AttentionBackend& backend) const {
  const Layer& layer = layers_[static_cast<size_t>(l)];
  const bool sliding = config_.layer_type(l) == LayerType::kSliding;
  const at::Tensor attn = fused_attention(layer, l, x, sliding ? rot.sliding_cos : rot.cos,
                                          sliding ? rot.sliding_sin : rot.sin, backend);
  const FusedNorms& f = layer.fused;
  if (!config_.sandwich_norms) {
    add_projection(x, attn, layer.o_proj, layer.o_bias);
    add_projection(x, fused_mlp(layer, fused_rms_norm(x, f.post_norm)), layer.down_proj, {});
    return;
  }
  x.add_(fused_rms_norm(project(attn, layer.o_proj, layer.o_bias), f.post_norm));
  const at::Tensor down =
      project(fused_mlp(layer, fused_rms_norm(x, f.pre_ffn_norm)), layer.down_proj);
  x.add_(fused_rms_norm(down, f.post_ffn_norm));
}

// Self-attention on the fused path: [b, q, heads * head_dim] before o_proj.
// q/k norms run on the q/k/v GEMM's views (the query scale is in q_norm's
// weight; without q/k norms it is one multiply, where it is not 1).
at::Tensor LlamaModel::fused_attention(const Layer& layer, int64_t l, const at::Tensor& x,
                                       const at::Tensor& cos, const at::Tensor& sin,
                                       AttentionBackend& backend) const {
  const int64_t b = x.size(0), q = x.size(1), d = config_.head_dim;
  const int64_t heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads;
  const at::Tensor qkv =
      project(fused_rms_norm(x, layer.fused.input_norm), layer.qkv, layer.qkv_bias)
          .view({b, q, heads + 2 * kv_heads, d});
  at::Tensor query = qkv.narrow(2, 0, heads);
  at::Tensor key = qkv.narrow(2, heads, kv_heads);
  if (config_.qk_norm) {
    query = fused_rms_norm(query, layer.fused.q_norm);
    key = fused_rms_norm(key, layer.fused.k_norm);
  } else {
    query = scale_query(query);
  }
  const at::Tensor value = qkv.narrow(2, heads + kv_heads, kv_heads);
  const at::Tensor attn = backend.attend_rotary(l, query.transpose(1, 2), key.transpose(1, 2),
                                                value.transpose(1, 2), cos, sin);
  return attn.transpose(1, 2).reshape({b, q, heads * d});
}

// The gated MLP on the fused path: one gate/up GEMM, then act(gate) * up
// in one kernel (act_mul).
at::Tensor LlamaModel::fused_mlp(const Layer& layer, const at::Tensor& h) const {
  return act_mul(project(h, layer.gate_up), config_.hidden_act);
}

}  // namespace statickv::reference
