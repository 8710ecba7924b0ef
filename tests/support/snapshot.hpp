#pragma once
// A cache's whole state, for "nothing changed" and "these two caches are the
// same" checks, and the addresses of its buffers. No Catch2 here: the fuzz
// targets include it too.

#include <statickv/cache.hpp>
#include <statickv/detail/offload.hpp>  // Cache::offload_ring()'s buffers

#include <ATen/ATen.h>

#include <vector>

namespace statickv::test {

/// True when two tensors hold the same bytes in the same shape: NaN payloads
/// and the sign of zero count, unlike at::equal.
inline bool bit_identical(const at::Tensor& a, const at::Tensor& b) {
  if (!a.defined() || !b.defined()) return a.defined() == b.defined();
  if (a.scalar_type() != b.scalar_type() || a.sizes() != b.sizes() || a.device() != b.device()) {
    return false;
  }
  if (a.numel() == 0) return true;
  return at::equal(a.contiguous().view(-1).view(at::kByte),
                   b.contiguous().view(-1).view(at::kByte));
}

/// Everything a cache stores that a user can see, cloned: every layer's
/// keys and values (scratch slot included), their scales (quantized
/// storage; undefined for plain) and slot positions, and seq_lengths.
struct Snapshot {
  std::vector<at::Tensor> keys, values, key_scales, value_scales, slot_positions;
  at::Tensor seq_lengths;

  explicit Snapshot(const Cache& cache) {
    const bool quantized = !cache.config().plain_storage();
    for (int64_t l = 0; l < cache.num_layers(); ++l) {
      keys.push_back(cache.keys(l).clone());
      values.push_back(cache.values(l).clone());
      key_scales.push_back(quantized ? cache.key_scales(l).clone() : at::Tensor());
      value_scales.push_back(quantized ? cache.value_scales(l).clone() : at::Tensor());
      slot_positions.push_back(cache.slot_positions(l).clone());
    }
    seq_lengths = cache.seq_lengths().clone();
  }

  /// Every buffer and all bookkeeping bit-identical.
  bool operator==(const Snapshot& other) const {
    return all_identical(keys, other.keys) && all_identical(values, other.values) &&
           all_identical(key_scales, other.key_scales) &&
           all_identical(value_scales, other.value_scales) &&
           all_identical(slot_positions, other.slot_positions) &&
           bit_identical(seq_lengths, other.seq_lengths);
  }
  bool operator!=(const Snapshot& other) const { return !(*this == other); }

  /// The same state without each layer's scratch slot (Invariant [scratch
  /// slot]): every padded token of a step lands there, and on CUDA which of
  /// several writes to one slot lands last is not defined, so two caches
  /// given the same padded steps may differ there and nowhere else.
  Snapshot without_scratch() const {
    Snapshot s = *this;
    for (auto* list : {&s.keys, &s.values, &s.key_scales, &s.value_scales}) {
      for (at::Tensor& t : *list) {
        if (t.defined()) t = t.narrow(2, 0, t.size(2) - 1);
      }
    }
    return s;
  }

  /// True when `cache` holds exactly what it held when this was taken.
  bool same_as(const Cache& cache) const { return *this == Snapshot(cache); }

 private:
  static bool all_identical(const std::vector<at::Tensor>& a, const std::vector<at::Tensor>& b) {
    if (a.size() != b.size()) return false;
    for (size_t i = 0; i < a.size(); ++i) {
      if (!bit_identical(a[i], b[i])) return false;
    }
    return true;
  }
};

/// Data pointers of every buffer a cache owns that a user can see: with
/// quantized storage the scales and the staging buffer too, with host
/// offload the staging ring's buffers.
inline std::vector<const void*> addresses(const Cache& cache) {
  std::vector<const void*> out;
  const bool quantized = !cache.config().plain_storage();
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    out.push_back(cache.keys(l).data_ptr());
    out.push_back(cache.values(l).data_ptr());
    out.push_back(cache.slot_positions(l).data_ptr());
    if (!quantized) continue;
    out.push_back(cache.key_scales(l).data_ptr());
    out.push_back(cache.value_scales(l).data_ptr());
  }
  if (quantized) {
    out.push_back(cache.staging().keys().data_ptr());
    out.push_back(cache.staging().values().data_ptr());
  }
  if (cache.config().host_offload) {
    for (int slot : {0, 1}) {
      out.push_back(cache.offload_ring().buffer(slot).keys().data_ptr());
      out.push_back(cache.offload_ring().buffer(slot).values().data_ptr());
    }
  }
  out.push_back(cache.seq_lengths().data_ptr());
  return out;
}

}  // namespace statickv::test
