// The reference decoder's layer, plain (one op per step of Hugging Face's
// math) and fused (Note [fused decode path]), with the norms, attention and
// MLP each family changes, and the LM head (ModelConfig, docs/checkpoints.md "Model families").

#include <statickv/kernel_switches.hpp>
#include <statickv/model/act_mul.hpp>
#include <statickv/model/cpu_linear.hpp>
#include <statickv/model/model.hpp>
#include <statickv/model/rms_norm.hpp>
#include <statickv/rotary.hpp>

#include <cmath>

namespace statickv::reference {

namespace {

at::Tensor project(const at::Tensor& x, const at::Tensor& weight, const at::Tensor& bias = {}) {
  return at::linear(x, weight, bias.defined() ? c10::optional<at::Tensor>(bias) : c10::nullopt);
}

}  // namespace

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

// Note [fused decode path]: the same layer in fewer kernels. One-kernel
// RMSNorm (reference::rms_norm, Gemma's 1 + weight precomputed), one q/k/v
// GEMM split by views, rotary and the cache write in one kernel
// (backend.attend_rotary), one gate/up GEMM, the activation times up in
// place. Where no norm follows a projection (every family but Gemma's
// sandwich), the residual add is folded into the o_proj and down_proj
// GEMMs, in place on x. Each projection is cpu_linear: on the CPU, a
// decode step's few rows take the fastest route (Note [CPU
// projections]); elsewhere it is the GEMM.
void LlamaModel::fused_layer(int64_t l, at::Tensor& x, const Rotary& rot,
                             AttentionBackend& backend) const {
  const Layer& layer = layers_[static_cast<size_t>(l)];
  const bool sliding = config_.layer_type(l) == LayerType::kSliding;
  const at::Tensor attn = fused_attention(layer, l, x, sliding ? rot.sliding_cos : rot.cos,
                                          sliding ? rot.sliding_sin : rot.sin, backend);
  const FusedNorms& f = layer.fused;
  if (!config_.sandwich_norms) {
    cpu_linear_add(x, attn, layer.o_proj, layer.o_bias);
    cpu_linear_add(x, fused_mlp(layer, fused_rms_norm(x, f.post_norm)), layer.down_proj, {});
    return;
  }
  x.add_(fused_rms_norm(cpu_linear(attn, layer.o_proj, layer.o_bias), f.post_norm));
  const at::Tensor down =
      cpu_linear(fused_mlp(layer, fused_rms_norm(x, f.pre_ffn_norm)), layer.down_proj);
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
      cpu_linear(fused_rms_norm(x, layer.fused.input_norm), layer.qkv, layer.qkv_bias)
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
  return act_mul(cpu_linear(h, layer.gate_up), config_.hidden_act);
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
    local = (fused ? cpu_linear(x, lm_head_) : project(x, lm_head_)).to(at::kFloat);
  }
  const double cap = config_.final_logit_softcapping;
  if (cap > 0) local = local.div(cap).tanh_().mul_(cap);  // elementwise: before the gather is exact
  if (!tp_.comm || !tp_.vocab_parallel) return local;
  return tp_.comm->all_gather_last(local.contiguous());
}

}  // namespace statickv::reference
