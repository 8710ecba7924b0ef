#pragma once
// The sampling head's per-row tables, as its fused picks index them, and the
// draws' mixer (pick_fused.hpp). Free of ATen: the CUDA pick
// (pick_cuda.cu) compiles without it.

#include <cstdint>

namespace statickv::reference::detail {

/// The draws' 32-bit mixer (docs/sampling.md): one home for the host
/// mirror (draw keys) and the fused kernels, on uint32_t or a vector of
/// them (the CPU pick's lanes); the tensor form is in draws.cpp.
template <typename Word>
#if defined(__CUDACC__)
__host__ __device__
#endif
    inline Word
    mix32(Word x) {
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  return x ^ (x >> 16);
}

/// The columns of SamplingHead's per-row tables. params (float32):
enum Param : int64_t {
  kTemperature,  // the divisor: the row's temperature, 1 for a greedy row
  kOneMinusTopP,
  kLogMinP,  // log(min_p): -inf when off
  kRepetition,
  kPresence,
  kFrequency,
  kParams
};
/// keys (int64):
/// kPlain: 1 for a greedy row with no logit bias and no penalties, whose
/// argmax is of the raw logits once past min_tokens (the greedy grid,
/// pick_grid.hpp).
enum Key : int64_t { kSeedKey, kDrawIndex, kKthPosition, kMinTokens, kSampled, kPlain, kKeys };

}  // namespace statickv::reference::detail
