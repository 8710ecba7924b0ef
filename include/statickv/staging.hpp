#pragma once
// StagingBuffer: one pair of key and value buffers in the compute dtype that
// every layer of a cache shares, for storage the model cannot read as it is
// (Note [staging buffer], docs/design.md). A quantized cache dequantizes a
// layer's views into one in update(); an offloaded cache streams a layer's
// attended range into a ring of two (offload.hpp, Note [host offload]).
//
// Lifetime: what a layer stages stays valid until the next stage() (the next
// layer's update()) or release() (the next prepare(), reset or row
// operation). The buffer remembers which (holder, stamp) staged last, so a
// caller can check a view is still current (holds()); in debug builds
// release() also fills the buffer with NaN, so a view read after its step
// shows NaN wherever it is used.

#include <ATen/ATen.h>

#include <cstdint>
#include <limits>
#include <utility>
#include <vector>

namespace statickv {

namespace detail {

/// buffer[:rows, :, :slots] of a [batch, heads, slots, head_dim] buffer in
/// one view op (two narrows cost twice the fixed per-op time; see Note
/// [step op count]): the batch-prefix views of caches and staging buffers.
inline at::Tensor batch_prefix(const at::Tensor& buffer, int64_t rows, int64_t slots) {
  return buffer.as_strided({rows, buffer.size(1), slots, buffer.size(3)}, buffer.strides(),
                           buffer.storage_offset());
}

}  // namespace detail

class StagingBuffer {
 public:
  StagingBuffer() = default;

  /// Keys and values [max_batch, heads, slots, head_dim], zeroed, allocated
  /// once: they keep their addresses for the buffer's life (Invariant
  /// [stable addresses]).
  StagingBuffer(int64_t max_batch, int64_t heads, int64_t slots, int64_t head_dim,
                const at::TensorOptions& options)
      : keys_(at::zeros({max_batch, heads, slots, head_dim}, options)),
        values_(at::zeros_like(keys_)) {}

  bool defined() const { return keys_.defined(); }

  /// The first `rows` rows and `slots` slots of the keys and values, as
  /// views, now held by (holder, stamp): whatever was staged before is
  /// no longer current.
  std::pair<at::Tensor, at::Tensor> stage(int64_t holder, uint64_t stamp, int64_t rows,
                                          int64_t slots) {
    hold(holder, stamp);
    return {detail::batch_prefix(keys_, rows, slots), detail::batch_prefix(values_, rows, slots)};
  }

  /// (holder, stamp) holds the buffer from now on, views made by the caller
  /// (layout()): whatever was staged before is no longer current.
  void hold(int64_t holder, uint64_t stamp) {
    holder_ = holder;
    stamp_ = stamp;
  }

  /// The keys and values seen as contiguous [max_batch, heads, slots,
  /// head_dim] over the start of the same memory (slots <= the buffer's):
  /// the layout of a layer buffer with `slots` slots, so that one write
  /// index serves the layer's buffer and the staging buffer alike.
  std::pair<at::Tensor, at::Tensor> layout(int64_t slots) const {
    TORCH_CHECK(slots >= 1 && slots <= keys_.size(2), "slots: expected a value in [1, ",
                keys_.size(2), "] but got ", slots);
    const std::vector<int64_t> shape = {keys_.size(0), keys_.size(1), slots, keys_.size(3)};
    const std::vector<int64_t> strides = {keys_.size(1) * slots * keys_.size(3),
                                          slots * keys_.size(3), keys_.size(3), 1};
    return {keys_.as_strided(shape, strides, 0), values_.as_strided(shape, strides, 0)};
  }

  /// Whether (holder, stamp) staged last and nothing released it since.
  bool holds(int64_t holder, uint64_t stamp) const { return holder_ == holder && stamp_ == stamp; }
  /// The holder that staged last, -1 when none is current.
  int64_t holder() const { return holder_; }

  /// Nothing staged is current any more. Debug builds poison the buffer
  /// with NaN (a device fill, graph-safe) so a stale view is seen.
  void release() {
    holder_ = -1;
#ifndef NDEBUG
    if (defined()) {
      keys_.fill_(std::numeric_limits<double>::quiet_NaN());
      values_.fill_(std::numeric_limits<double>::quiet_NaN());
    }
#endif
  }

  const at::Tensor& keys() const { return keys_; }
  const at::Tensor& values() const { return values_; }
  int64_t nbytes() const { return defined() ? keys_.nbytes() + values_.nbytes() : 0; }

 private:
  at::Tensor keys_, values_;
  int64_t holder_ = -1;
  uint64_t stamp_ = 0;
};

}  // namespace statickv
