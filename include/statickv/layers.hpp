#pragma once
// Layer policies: where a position lives in a layer's buffer.
//
// A policy owns no memory. It answers three questions for the cache that owns
// the buffers: how many slots attention may see (capacity), which slot a
// position is written to, and how far back a query may look (window). Every
// buffer has one extra slot past the capacity, the scratch slot (Invariant
// [scratch slot], docs/design.md): padded tokens and positions that cannot be
// stored are written there, and no view handed to attention ever includes it.
//
// The host overload slot_of() is the specification and is unit-tested without
// tensors; slots_of() is the same arithmetic on the device, used inside a
// captured step. A new layer type (chunked attention, quantized storage) is a
// new subclass; the caches only talk to this interface.

#include <statickv/config.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>

namespace statickv {

/// Slot arithmetic of one kind of layer. Positions handed to slots_of() are
/// already sanitized by the cache: -1 for every token that must not be stored.
class LayerPolicy {
 public:
  virtual ~LayerPolicy() = default;

  virtual LayerType type() const = 0;
  /// Slots visible to attention; the scratch slot is index capacity().
  virtual int64_t capacity() const = 0;
  /// Keys a query sees, itself included (0 = unlimited).
  virtual int64_t window() const = 0;
  /// Slots the returned views expose for a step attending `attend_len` positions.
  virtual int64_t view_len(int64_t attend_len) const = 0;
  /// Host arithmetic: the slot of `pos` (capacity() for the scratch slot).
  virtual int64_t slot_of(int64_t pos) const = 0;
  /// Device arithmetic: the same mapping, elementwise, for sanitized positions.
  virtual at::Tensor slots_of(const at::Tensor& pos) const = 0;

  /// For the fused decode prepare (Note [decode prepare]): the slot of a
  /// sanitized position p >= 0 is p % slot_ring(), or p itself when it is 0;
  /// -1 says the mapping is not of that form, and prepare() keeps to
  /// slots_of() for the cache.
  virtual int64_t slot_ring() const { return -1; }

  int64_t scratch_slot() const { return capacity(); }
  /// Slots per buffer row, scratch included.
  int64_t buffer_len() const { return capacity() + 1; }
};

/// Full attention: position p lives in slot p; nothing is ever evicted.
class FullAttentionLayer final : public LayerPolicy {
 public:
  explicit FullAttentionLayer(int64_t max_len) : max_len_(max_len) {
    TORCH_CHECK(max_len > 0, "FullAttentionLayer: expected max_len > 0 but got ", max_len);
  }

  LayerType type() const override { return LayerType::kFull; }
  int64_t capacity() const override { return max_len_; }
  int64_t window() const override { return 0; }
  int64_t view_len(int64_t attend_len) const override { return std::min(attend_len, max_len_); }
  int64_t slot_of(int64_t pos) const override {
    return (pos >= 0 && pos < max_len_) ? pos : scratch_slot();
  }
  at::Tensor slots_of(const at::Tensor& pos) const override {
    // Sanitized positions are -1 or in [0, max_len): a floored remainder by
    // buffer_len() keeps the latter and sends -1 to the scratch slot, in one op.
    return pos.remainder(buffer_len());
  }
  int64_t slot_ring() const override { return 0; }

 private:
  int64_t max_len_;
};

/// Sliding window: a ring of capacity slots, position p in slot p % capacity.
/// See Note [ring capacity] in config.hpp for why capacity exceeds the window.
class SlidingWindowLayer final : public LayerPolicy {
 public:
  SlidingWindowLayer(int64_t window, int64_t capacity, int64_t max_len)
      : window_(window), capacity_(capacity), max_len_(max_len) {
    TORCH_CHECK(window > 0, "SlidingWindowLayer: expected window > 0 but got ", window);
    TORCH_CHECK(capacity > 0 && capacity <= max_len,
                "SlidingWindowLayer: expected capacity in [1, max_len=", max_len, "] but got ",
                capacity);
  }

  LayerType type() const override { return LayerType::kSliding; }
  int64_t capacity() const override { return capacity_; }
  int64_t window() const override { return window_; }
  // The ring's slot order is not position order, so a prefix of it means
  // nothing: sliding views always expose the whole (already small) ring.
  int64_t view_len(int64_t /*attend_len*/) const override { return capacity_; }
  int64_t slot_of(int64_t pos) const override {
    return (pos >= 0 && pos < max_len_) ? pos % capacity_ : scratch_slot();
  }
  at::Tensor slots_of(const at::Tensor& pos) const override {
    return at::where(pos.ge(0), pos.remainder(capacity_), scratch_slot());
  }
  int64_t slot_ring() const override { return capacity_; }

 private:
  int64_t window_;
  int64_t capacity_;
  int64_t max_len_;
};

/// The policy a config gives layers of `type`.
inline std::shared_ptr<const LayerPolicy> make_layer_policy(const CacheConfig& config,
                                                            LayerType type) {
  switch (type) {
    case LayerType::kFull:
      return std::make_shared<FullAttentionLayer>(config.max_len);
    case LayerType::kSliding:
      return std::make_shared<SlidingWindowLayer>(config.sliding_window, config.sliding_capacity(),
                                                  config.max_len);
  }
  TORCH_INTERNAL_ASSERT(false, "unknown LayerType");
}

}  // namespace statickv
