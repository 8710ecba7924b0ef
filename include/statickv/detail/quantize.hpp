#pragma once
// Quantized KV storage (Note [quantized storage], docs/design.md): the
// device ops that turn a step's keys or values into stored codes and one
// float32 scale per token and kv head, and back. Fixed sequences of device
// ops whose shapes follow the input's (Invariant [graph-safe step]): no host
// read, no allocation whose size depends on values.

#include <statickv/config.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <limits>
#include <utility>

namespace statickv::detail {

/// The largest code magnitude of a stored type: 127 for int8 (symmetric,
/// -128 unused), 448 for float8 e4m3fn.
inline double quant_max(KvStorage storage) { return storage == KvStorage::kInt8 ? 127.0 : 448.0; }

/// x [..., head_dim] in the compute dtype -> (codes, scales): codes in the
/// dtype the cache writes (int8; float8 e4m3fn bits as uint8, since
/// LibTorch has no index_copy_ for float8 on the CPU), scales float32
/// [..., 1] = amax(|x|) / quant_max, so x ~ codes * scale. An all-zero
/// token gets scale 0 and codes 0.
inline std::pair<at::Tensor, at::Tensor> quantize(const at::Tensor& x, KvStorage storage) {
  const double qmax = quant_max(storage);
  const at::Tensor xf = x.to(at::kFloat);
  at::Tensor scale = xf.abs().amax(-1, /*keepdim=*/true).div_(qmax);
  at::Tensor scaled = xf.div(scale.clamp_min(std::numeric_limits<float>::min()));
  if (storage == KvStorage::kInt8) {
    return {scaled.round_().clamp_(-qmax, qmax).to(at::kChar), std::move(scale)};
  }
  return {scaled.clamp_(-qmax, qmax).to(at::kFloat8_e4m3fn).view(at::kByte), std::move(scale)};
}

/// out = codes * scale, in out's (the compute) dtype, in place: a copy that
/// converts and one multiply. codes [b, h, n, d] in the storage dtype,
/// scale float32 [b, h, n, 1].
inline void dequantize_into(at::Tensor& out, const at::Tensor& codes, const at::Tensor& scale) {
  out.copy_(codes);
  out.mul_(scale);
}

}  // namespace statickv::detail
