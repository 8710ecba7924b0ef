#pragma once
// The sampling head's shared parts (Note [sampling head], docs/sampling.md):
// the counter-based draws on tensors, the host-to-device upload without a
// sync, and the per-row questions every job asks of a row's settings. Not
// installed; the head's sources (row_table, pick, verify, logprobs) use it.

#include <statickv/sampling/head.hpp>

#include "pick_fused.hpp"

#include <cstdint>
#include <limits>
#include <vector>

namespace statickv::reference::detail {

constexpr int64_t kMask = 0xffffffffLL;
constexpr int64_t kMix = 0x45d9f3bLL;      // < 2^27: x * kMix < 2^59 for x < 2^32
constexpr int64_t kGolden = 0x9e3779b1LL;  // < 2^32: id * kGolden < 2^56 for ids < 2^24
constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// Streams of the speculative draws (Note [sampling head]): a draw key is
// mixed with one of these before use, so the draft model's draws, the
// acceptance tests and the target's draws at one index are independent.
constexpr int64_t kDraftStream = 0x6a09e667LL;
constexpr int64_t kAcceptStream = 0xbb67ae85LL;

/// mix32 on int64 tensors holding values in [0, 2^32): the same bits.
at::Tensor mix(at::Tensor x);
/// A row's seed key: the draws' per-request input.
int64_t seed_key(uint64_t seed);
/// Gumbel noise from hashed ids ((id * kGolden) mod 2^32) and keys [b].
at::Tensor gumbel(const at::Tensor& hashed_ids, const at::Tensor& keys);
/// The per-draw keys of draw indices `index` for rows with seed keys
/// `seed` (broadcast alike): draw_key on the device.
at::Tensor draw_keys(const at::Tensor& index, const at::Tensor& seed);
/// Uniform numbers in (0, 1) from keys (int64 in [0, 2^32)) on `stream`.
at::Tensor uniform(const at::Tensor& keys, int64_t stream);

inline bool sampled(const Sampling& s) { return s.temperature > 0.0; }
inline bool has_penalty(const Sampling& s) {
  return s.repetition_penalty != 1.0 || s.presence_penalty != 0.0 || s.frequency_penalty != 0.0;
}

/// Host values on `device` without a host sync: on CUDA they go through
/// pinned memory with a non-blocking copy (a copy from pageable memory
/// would wait for the stream). The caching host allocator keeps the pinned
/// block until the copy is done.
template <typename T>
at::Tensor upload(const std::vector<T>& values, const at::Device& device) {
  at::Tensor host = at::tensor(values);
  if (device.is_cpu()) return host;
  return host.pin_memory().to(device, /*non_blocking=*/true);
}

}  // namespace statickv::reference::detail

namespace statickv::reference {

/// What rows [0, b) of one call ask for (host side): the stages a call runs.
struct SamplingHead::Rows {
  int64_t b = 0;
  bool any = false, sampled = false, top_k = false, top_p = false, min_p = false;
  bool repetition = false, additive = false, bias = false, min_tokens = false, marks = false;
  int64_t logprobs = -1;        // the most alternatives a taking row asks for; -1: none
  std::vector<int64_t> sorted;  // the sampled rows with top-k or top-p
};

/// The settings of the rows a distribution is computed for.
struct SamplingHead::Table {
  at::Tensor params, keys;  // [n, kParams] and [n, kKeys]
  at::Tensor column(int64_t c) const { return params.select(1, c).unsqueeze(1); }
};

}  // namespace statickv::reference
