// The counter-based draws on tensors (Note [sampling head], docs/sampling.md):
// integer ops only, so every device draws the same bits; draw_key is their
// host mirror.

#include <statickv/sampling/host_sampling.hpp>

#include "draws.hpp"

#include <c10/util/Exception.h>

namespace statickv::reference {

namespace detail {

at::Tensor mix(at::Tensor x) {
  x = x.bitwise_xor(x.bitwise_right_shift(16)).mul_(kMix).bitwise_and_(kMask);
  x = x.bitwise_xor(x.bitwise_right_shift(16)).mul_(kMix).bitwise_and_(kMask);
  return x.bitwise_xor(x.bitwise_right_shift(16));
}

int64_t seed_key(uint64_t seed) {
  return mix32(static_cast<uint32_t>(seed) ^ mix32(static_cast<uint32_t>(seed >> 32)));
}

namespace {

/// Uniform numbers in (0, 1) from hashes h in [0, 2^32): their top 23
/// bits, centred in their interval. Exact in float (24 bits would round
/// the top one to 1, whose noise is infinite), so a log of them is finite.
at::Tensor unit(const at::Tensor& h) {
  return h.bitwise_right_shift(9).to(at::kFloat).add_(0.5).mul_(1.0 / 8388608.0);
}

}  // namespace

at::Tensor gumbel(const at::Tensor& hashed_ids, const at::Tensor& keys) {
  return unit(mix(hashed_ids.bitwise_xor(keys.unsqueeze(1)))).log_().neg_().log_().neg_();
}

at::Tensor draw_keys(const at::Tensor& index, const at::Tensor& seed) {
  return index.mul(kGolden).add_(seed).bitwise_and_(kMask);
}

at::Tensor uniform(const at::Tensor& keys, int64_t stream) {
  return unit(mix(keys.bitwise_xor(stream)));
}

}  // namespace detail

int64_t draw_key(uint64_t seed, int64_t index) {
  return (detail::seed_key(seed) + index * detail::kGolden) & detail::kMask;
}

at::Tensor sampling_noise(const at::Tensor& keys, const at::Tensor& ids) {
  TORCH_CHECK(keys.dim() == 1 && ids.dim() == 2 && keys.size(0) == ids.size(0),
              "sampling_noise: expected keys [b] and ids [b, n] but got ", keys.sizes(), " and ",
              ids.sizes());
  return detail::gumbel(ids.mul(detail::kGolden).bitwise_and_(detail::kMask), keys);
}

}  // namespace statickv::reference
