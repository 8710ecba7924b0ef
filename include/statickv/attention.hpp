#pragma once
// Attention over cache views, in two forms that must agree: the fused
// scaled_dot_product_attention kernel, and a plain matmul/softmax reference
// used by tests. Both take grouped-query layouts (q heads a multiple of kv
// heads) and the bool masks a StepPlan produces; the fused kernel also takes a
// StepPlan's additive masks, its faster form (no per-call conversion). A query whose row is fully
// masked (a padded token) gets a zero output from the reference rather than
// the NaN a naive softmax gives.

#include <statickv/detail/checks.hpp>
#include <statickv/kernel_switches.hpp>

#include <ATen/ATen.h>

#include <cmath>
#include <optional>

namespace statickv {

namespace detail {

inline void check_attention_args(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                                 const at::Tensor& mask, bool allow_additive = false) {
  check_rank("query", q, 4, "[b, heads, q, head_dim]");
  TORCH_CHECK(k.defined() && k.dim() == 4 && k.size(0) == q.size(0) && k.size(3) == q.size(3),
              "keys: expected [", q.size(0), ", kv_heads, kv, ", q.size(3), "] but got ",
              shape_of(k));
  TORCH_CHECK(v.defined() && v.sizes() == k.sizes(), "values: expected shape ", k.sizes(),
              " but got ", shape_of(v));
  TORCH_CHECK(k.size(1) >= 1, "keys: expected kv_heads >= 1 but got shape ", k.sizes());
  TORCH_CHECK(q.size(1) % k.size(1) == 0, "query: expected heads (", q.size(1),
              ") to be a multiple of kv_heads (", k.size(1), ")");
  if (allow_additive) {
    TORCH_CHECK(mask.defined() &&
                    (mask.scalar_type() == at::kBool || mask.scalar_type() == q.scalar_type()),
                "mask: expected dtype Bool or an additive mask of the query's dtype ",
                q.scalar_type(), " but got ", dtype_of(mask));
  } else {
    check_dtype("mask", mask, at::kBool);
  }
  TORCH_CHECK(mask.dim() == 4 && mask.size(0) == q.size(0) && mask.size(2) == q.size(2) &&
                  mask.size(3) == k.size(2),
              "mask: expected shape [", q.size(0), ", 1, ", q.size(2), ", ", k.size(2),
              "] but got ", mask.sizes());
  check_device("keys", k, q.device(), " (the query's)");
  check_device("values", v, q.device(), " (the query's)");
  check_device("mask", mask, q.device(), " (the query's)");
}

}  // namespace detail

/// reference_attention with the scaled scores capped at
/// softcap * tanh(score / softcap) before the mask (Gemma 2's
/// attn_logit_softcapping; 0 = no cap). sdpa cannot cap, so this kernel
/// serves soft-capped layers.
inline at::Tensor softcapped_attention(const at::Tensor& query, const at::Tensor& keys,
                                       const at::Tensor& values, const at::Tensor& mask,
                                       double softcap) {
  detail::check_attention_args(query, keys, values, mask);
  TORCH_CHECK(softcap >= 0, "softcap: expected >= 0 (0 = none) but got ", softcap);
  const auto compute = query.scalar_type() == at::kDouble ? at::kDouble : at::kFloat;
  const int64_t group = query.size(1) / keys.size(1);
  const at::Tensor k = keys.to(compute).repeat_interleave(group, 1);
  const at::Tensor v = values.to(compute).repeat_interleave(group, 1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(query.size(3)));
  at::Tensor scores = at::matmul(query.to(compute), k.transpose(-1, -2)).mul_(scale);
  if (softcap > 0) scores.div_(softcap).tanh_().mul_(softcap);  // Gemma 2's logit soft-cap
  const at::Tensor blocked = mask.logical_not();
  scores.masked_fill_(blocked, -std::numeric_limits<double>::infinity());
  // A fully masked row is all -inf: softmax gives NaN there, zeroed below.
  at::Tensor probs = at::softmax(scores, -1).masked_fill_(blocked, 0.0);
  return at::matmul(probs, v).to(query.scalar_type());
}

/// Plain matmul/softmax attention, computed in float32 (float64 for double
/// inputs) and returned in the query's dtype: [b, heads, q, head_dim].
inline at::Tensor reference_attention(const at::Tensor& query, const at::Tensor& keys,
                                      const at::Tensor& values, const at::Tensor& mask) {
  return softcapped_attention(query, keys, values, mask, 0.0);
}

/// One query a row on the CPU (Note [decode attention on the CPU]):
/// softmax(q k^T / sqrt(head_dim) + mask) v for query [b, heads, 1,
/// head_dim] and keys, values [b, kv_heads, kv, head_dim] of its dtype
/// (Float, BFloat16 or Half), with an additive mask [b, 1, 1, kv] of that
/// dtype, accumulated in float. A key masked at the dtype's lowest value or
/// below -1e30 is skipped (a query that sees no key gets zeros, as
/// reference_attention). Each (row,
/// kv head) reads its keys and values once for its whole group of query
/// heads, one item of
/// at::parallel_for. Records itself as statickv::decode_attention.
at::Tensor cpu_decode_attention(const at::Tensor& query, const at::Tensor& keys,
                                const at::Tensor& values, const at::Tensor& mask);

namespace detail {

// Whether sdpa_attention takes cpu_decode_attention: one query a row on the
// CPU, an additive mask, a float dtype of at most 32 bits, the switch on.
inline bool takes_decode_attention(const at::Tensor& query, const at::Tensor& mask) {
  static const bool enabled = kernel_enabled("decode_attention");  // read once a process
  const at::ScalarType t = query.scalar_type();
  return enabled && query.device().is_cpu() && query.size(2) == 1 && mask.scalar_type() == t &&
         (t == at::kFloat || t == at::kBFloat16 || t == at::kHalf);
}

}  // namespace detail

/// Fused attention (scaled_dot_product_attention with enable_gqa). mask:
/// a StepPlan's bool mask(layer) or, faster, its additive_mask(layer). A float
/// mask is added to the scores, as in sdpa: a 0/1 float mask blocks nothing.
/// One query a row on the CPU with an additive mask runs
/// cpu_decode_attention (switch decode_attention, Note [kernel switches]).
inline at::Tensor sdpa_attention(const at::Tensor& query, const at::Tensor& keys,
                                 const at::Tensor& values, const at::Tensor& mask) {
  detail::check_attention_args(query, keys, values, mask, /*allow_additive=*/true);
  detail::check_dtype("keys", keys, query.scalar_type(), " (the query's)");
  detail::check_dtype("values", values, query.scalar_type(), " (the query's)");
  if (detail::takes_decode_attention(query, mask)) {
    return cpu_decode_attention(query, keys, values, mask);
  }
  return at::scaled_dot_product_attention(query, keys, values, mask, /*dropout_p=*/0.0,
                                          /*is_causal=*/false, /*scale=*/std::nullopt,
                                          /*enable_gqa=*/true);
}

}  // namespace statickv
