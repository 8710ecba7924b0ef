#pragma once
// rotary_update(): update() with the rotary embedding fused in. One kernel
// rotates the step's queries and keys and writes keys and values into the
// cache's buffers, through the slots prepare() planned (Note [fused rotary
// write], docs/design.md). On CUDA it is one small kernel on the current
// stream (src/rotary.cu); on the CPU its twin of the same signature
// (src/rotary.cpp) does the same loop. Compiled: link statickv::statickv.

#include <statickv/cache.hpp>
#include <statickv/config.hpp>
#include <statickv/step.hpp>

#include <ATen/ATen.h>

#include <cstdint>

namespace statickv {

/// The rotary embedding as plain ops (Hugging Face's apply_rotary_pos_emb):
/// x * cos + rotate_half(x) * sin, rotate_half((x1, x2)) = (-x2, x1) over
/// the two halves of the last dimension. The specification rotary_update()
/// meets; the reference decoder's plain path runs it.
inline at::Tensor apply_rotary(const at::Tensor& x, const at::Tensor& cos, const at::Tensor& sin) {
  const int64_t half = x.size(-1) / 2;
  const at::Tensor rotated = at::cat({x.narrow(-1, half, half).neg(), x.narrow(-1, 0, half)}, -1);
  return x.mul(cos).add(rotated.mul(sin));
}

/// What rotary_update() returns: the rotated queries and update()'s views.
struct RotaryKV {
  at::Tensor query;  ///< [live_batch, heads, q, head_dim], contiguous, rotated
  KV kv;             ///< what update(layer, rotated key, value, step) returns
};

/// Rotates `query` and `key` (Hugging Face's rotate_half convention:
/// x * cos + rotate_half(x) * sin) and writes the rotated key and `value`
/// into `layer`'s buffers for `step`, exactly where update() would: padded
/// tokens to the scratch slot, ring slots for sliding layers, the same
/// slots (they come from the step). Every argument is checked before
/// anything is written: update()'s checks for key and value, and
/// query: [live_batch, heads, q, head_dim] (heads a multiple of kv_heads),
/// cos, sin: [live_batch, 1, q, head_dim], all in the cache dtype on its
/// device; head_dim even. Graph-safe: no host sync, no data-dependent size.
RotaryKV rotary_update(Cache& cache, int64_t layer, const at::Tensor& query, const at::Tensor& key,
                       const at::Tensor& value, const at::Tensor& cos, const at::Tensor& sin,
                       const StepPlan& step);

namespace detail {

/// The one place that says which caches rotary_update() serves: plain
/// storage (keys and values stored as the dtype's own values). A cache that
/// stores them in another form is refused here, naming both options, before
/// anything is written; CacheBackend calls it when it is built for the fused
/// path, so a config that cannot take that path fails up front.
void check_rotary_config(const CacheConfig& config);

/// The kernel's operands, checked by rotary_update(): query [b, heads, q, d],
/// key and value [b, kv_heads, q, d], cos and sin [b, 1, q, d] (any strides);
/// slots int64 [b, q] (any strides); query_out [b, heads, q, d]; key_buffer
/// and value_buffer the layer's whole buffers [max_batch, kv_heads, slots, d].
struct RotaryWrite {
  at::Tensor query, key, value, cos, sin, slots;
  at::Tensor query_out, key_buffer, value_buffer;
};

/// The CPU twin: rotates and writes with one loop over (row, head, token).
void rotary_write_cpu(const RotaryWrite& w);

#ifdef STATICKV_HAS_CUDA
/// One thread per element, on the current CUDA stream (src/rotary.cu).
void rotary_write_cuda(const RotaryWrite& w);
#endif

}  // namespace detail

}  // namespace statickv
