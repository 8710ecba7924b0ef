#pragma once
// torch.ops.statickv: the cache write as a registered operator, so that a
// compiled forward (torch.compile, AOTInductor) can write into statickv's
// buffers in place with no graph break and no copy of the cache.
//
// Schema (registered in ops.cpp):
//   statickv::cache_write(Tensor(a!) keys, Tensor(b!) values, Tensor key,
//                         Tensor value, Tensor slots) -> ()
// keys, values: one layer's whole buffers [max_batch, kv_heads, slots_len,
// head_dim] (the scratch slot included); key, value: [b, kv_heads, q,
// head_dim]; slots: int64 [q] (every row at the same slots) or [b, q] (per
// row), as StepPlan::write_slots() gives them, every value in [0, slots_len).
// Rows 0..b-1 are written; nothing else changes.
//
//   statickv::cache_write_quantized(Tensor(a!) keys, Tensor(b!) values,
//       Tensor(c!) key_scales, Tensor(d!) value_scales, Tensor key,
//       Tensor value, Tensor slots) -> ()
// The same write into quantized storage (Note [quantized storage],
// docs/design.md): keys, values hold codes (int8, or float8_e4m3fn or its
// uint8 bits), key_scales, value_scales float32 [max_batch, kv_heads,
// slots_len, 1]; key, value in the compute dtype are quantized per token and
// kv head exactly as the C++ cache's update() quantizes them.

#include <ATen/ATen.h>

namespace statickv::ops {

/// The eager kernel (any device): one index_copy_ per buffer. Checks only
/// metadata on the host (Invariant [graph-safe step], docs/design.md).
void cache_write(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                 const at::Tensor& value, const at::Tensor& slots);

/// The shape checks every implementation runs (the fake one included), so a
/// bad call fails at trace time with the same message as in eager mode.
void check_cache_write(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                       const at::Tensor& value, const at::Tensor& slots);

/// The quantized write's eager kernel: detail::quantize, then one
/// index_copy_ per codes and scales buffer.
void cache_write_quantized(const at::Tensor& keys, const at::Tensor& values,
                           const at::Tensor& key_scales, const at::Tensor& value_scales,
                           const at::Tensor& key, const at::Tensor& value, const at::Tensor& slots);

/// The quantized write's checks (every implementation, the fake one too).
void check_cache_write_quantized(const at::Tensor& keys, const at::Tensor& values,
                                 const at::Tensor& key_scales, const at::Tensor& value_scales,
                                 const at::Tensor& key, const at::Tensor& value,
                                 const at::Tensor& slots);

/// Throws c10::Error unless torch's dispatcher has statickv::cache_write. A
/// C++ consumer of a package that calls the op (the AOTInductor runner,
/// aoti/) calls it before the first run; calling it also keeps this library
/// linked, whose static TORCH_LIBRARY initialiser registers the op.
void check_registered();

}  // namespace statickv::ops
