#pragma once
// The fused rotary write (rotary_update(), rotary.hpp) against its
// specification, apply_rotary() then update(), on two caches fed the same
// steps: after every step and layer, the whole buffers (scratch slot
// included) and the rotated queries must agree. Shared by the CPU tests
// (test_rotary.cpp) and the [cuda] ones (test_cuda_rotary.cpp).

#include <statickv/rotary.hpp>
#include <statickv/statickv.hpp>

#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <cstdint>
#include <memory>
#include <vector>

namespace statickv::test {

/// Bit-identical (`tol` = 0) or within `tol`, and the same shape.
inline bool agree(const at::Tensor& actual, const at::Tensor& expected, double tol) {
  if (actual.sizes() != expected.sizes()) return false;
  if (tol == 0) return at::equal(actual, expected);
  return at::allclose(actual.to(at::kFloat), expected.to(at::kFloat), tol, tol);
}

/// Runs `steps` (positions [q] or [live_batch, q], host int64; negative =
/// padding) through a plain cache and a fused one built from `config`, with
/// random queries (8 heads), keys and values in the model's layout (views
/// of [b, q, heads, d], so strided) and random cos/sin. Keys and queries
/// agree within `key_tol` (0: bit-identical); values always bit-identical.
inline void expect_rotary_matches_update(const CacheConfig& config,
                                         const std::vector<at::Tensor>& steps, int64_t live_batch,
                                         double key_tol) {
  const auto opts = at::TensorOptions().dtype(config.dtype).device(config.device);
  const int64_t b = live_batch, kv = config.num_kv_heads, d = config.head_dim, heads = 2 * kv;
  auto plain = std::make_unique<HybridCache>(config);
  auto fused = std::make_unique<HybridCache>(config);
  at::manual_seed(7);
  for (size_t n = 0; n < steps.size(); ++n) {
    const at::Tensor pos = steps[n].to(config.device);
    const int64_t q = pos.size(-1);
    const StepPlan ps = plain->prepare(pos, b);
    const StepPlan fs = fused->prepare(pos, b);
    for (int64_t layer = 0; layer < config.num_layers; ++layer) {
      const at::Tensor query = at::randn({b, q, heads, d}, opts).transpose(1, 2);
      const at::Tensor key = at::randn({b, q, kv, d}, opts).transpose(1, 2);
      const at::Tensor value = at::randn({b, q, kv, d}, opts).transpose(1, 2);
      const at::Tensor angle = at::rand({b, 1, q, d / 2}, opts.dtype(at::kFloat)).mul(6.3);
      const at::Tensor cos = at::cat({angle, angle}, -1).cos().to(config.dtype);
      const at::Tensor sin = at::cat({angle, angle}, -1).sin().to(config.dtype);
      plain->update(layer, apply_rotary(key, cos, sin), value, ps);
      const RotaryKV out = rotary_update(*fused, layer, query, key, value, cos, sin, fs);
      INFO("step " << n << ", layer " << layer << ", " << config.dtype);
      REQUIRE(agree(out.query, apply_rotary(query, cos, sin), key_tol));
      REQUIRE(agree(fused->keys(layer), plain->keys(layer), key_tol));
      REQUIRE(agree(fused->values(layer), plain->values(layer), 0));
      REQUIRE(out.kv.keys.data_ptr() == fused->keys(layer).data_ptr());
      const std::vector<int64_t> view = {b, kv, fs.view_len(layer), d};
      REQUIRE(out.kv.keys.sizes() == at::IntArrayRef(view));
      REQUIRE(out.kv.values.data_ptr() == fused->values(layer).data_ptr());
    }
  }
}

}  // namespace statickv::test
