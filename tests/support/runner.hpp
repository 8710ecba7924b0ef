#pragma once
// A cache step shaped the way GraphRunner serves it: token-major inputs
// [B, Q, ...] (positions, keys/values, queries), one prepare, an update and
// attention for every layer, output [B, Q, heads, head_dim].

#include "config.hpp"

#include <statickv/statickv.hpp>

#include <ATen/ATen.h>

#include <vector>

namespace statickv::test {

struct AttentionStepShape {
  int64_t heads = kHeads, kv_heads = kKvHeads, head_dim = kDim;
};

inline std::vector<InputSpec> attention_step_inputs(const AttentionStepShape& s,
                                                    at::ScalarType dtype) {
  return {
      {"positions", at::kLong, {}, -1},
      {"kv", dtype, {s.kv_heads, s.head_dim}, 0},
      {"query", dtype, {s.heads, s.head_dim}, 0},
  };
}

/// Runs one step over `cache` with token-major inputs; returns [B, Q, heads, head_dim].
inline at::Tensor attention_step(Cache& cache, const at::Tensor& positions, const at::Tensor& kv,
                                 const at::Tensor& query, int64_t attend_len = -1) {
  StepPlan step = cache.prepare(positions, positions.size(0), attend_len);
  const at::Tensor k = kv.permute({0, 2, 1, 3});  // [B, H, Q, D]
  const at::Tensor q = query.permute({0, 2, 1, 3});
  at::Tensor out;
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    KV views = cache.update(l, k, k.mul(0.5), step);
    out = sdpa_attention(q, views.keys, views.values, step.mask(l));
  }
  return out.permute({0, 2, 1, 3});
}

inline GraphRunner::StepFn attention_step_fn(Cache& cache) {
  return [&cache](const std::vector<at::Tensor>& in, const GraphKey& key) {
    return std::vector<at::Tensor>{attention_step(cache, in[0], in[1], in[2], key.attend_len)};
  };
}

/// A chained step over inputs [ids, positions] ({"ids", kLong, {}, 0},
/// {"positions", kLong, {}, -1}): its output is ids * 10 + the position,
/// and it writes its next inputs into its own buffers in place (each live
/// id + 1, each live position + 1), as a decode step whose pick feeds the
/// next step does. Padding (position -1) stays padding.
inline std::vector<InputSpec> chained_step_inputs() {
  return {{"ids", at::kLong, {}, 0}, {"positions", at::kLong, {}, -1}};
}
inline GraphRunner::StepFn chained_step() {
  return [](const std::vector<at::Tensor>& in, const GraphKey&) {
    const at::Tensor live = in[1].ge(0).to(at::kLong);
    at::Tensor out = in[0].mul(10).add(in[1]);
    in[0].add_(live);
    in[1].add_(live);
    return std::vector<at::Tensor>{out};
  };
}

}  // namespace statickv::test
