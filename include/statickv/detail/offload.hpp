#pragma once
// Host offload (Note [host offload], docs/design.md): an offloaded cache
// keeps every layer's keys and values in host memory and, on the device, a
// ring of two staging buffers (Note [staging buffer]). Before layer l
// attends, its attended range (the live rows' first view_len slots) is
// copied into ring slot l % 2; layer l + 1's copy is issued on a side
// stream as soon as layer l's update() is done, so it runs while layer l
// computes. The step's new keys and values are written twice with the
// same index: into the staging buffer (what attention reads) and into the
// host copy (through its device-mapped pointer on CUDA), so only the
// written slots travel back.
//
// Every copy is between fixed addresses and every ordering is an event, so
// a captured step replays them as graph nodes (Invariant [graph-safe
// step]). On the CPU, "host" and "device" are both the CPU and the same
// code runs with synchronous copies: the tests' way to pin the path.

#include <statickv/config.hpp>
#include <statickv/staging.hpp>

#include <ATen/ATen.h>

#include <array>
#include <cstdint>
#include <memory>
#include <vector>

namespace statickv::detail {

/// One layer buffer of an offloaded cache, zeroed. `host` is a CPU tensor,
/// pinned and mapped (cudaHostAllocMapped) when `device` is CUDA; `store`
/// is the same memory as device ops see it: on CUDA a tensor of `device`
/// over the mapped pointer (cudaHostGetDevicePointer), which kernels read
/// and write over the link; on the CPU `host` itself. Copies through
/// `store` must be kernels, never cudaMemcpy (its pointer is host memory).
struct HostBuffer {
  at::Tensor host;
  at::Tensor store;
};
HostBuffer host_buffer(at::IntArrayRef shape, at::ScalarType dtype, const c10::Device& device);

/// The copies into a ring slot and their ordering. On CUDA copy_in() makes
/// a side stream (high priority: apart from the pool GraphRunner captures
/// on) wait for the caller's stream, then runs one cudaMemcpy2DAsync per
/// tensor there and records the slot's event; wait() makes the caller's
/// stream wait for that event; the copier's destructor waits for the side
/// stream, so no copy outlives the buffers. On the CPU copy_in() is a copy_
/// and wait() does nothing.
class OffloadCopier {
 public:
  virtual ~OffloadCopier() = default;
  /// dst[i] (a device staging view) = src[i] (a host view of the same
  /// shape): [rows, heads, n, head_dim] prefixes of contiguous buffers.
  virtual void copy_in(int slot, const std::array<at::Tensor, 2>& dst,
                       const std::array<at::Tensor, 2>& src) = 0;
  virtual void wait(int slot) = 0;
  /// The caller's stream waits for every copy_in no wait() has covered.
  virtual void drain() = 0;
};
std::unique_ptr<OffloadCopier> make_offload_copier(const c10::Device& device);

#ifdef STATICKV_HAS_CUDA
// The CUDA halves of the two factories (src/offload_cuda.cpp).
HostBuffer cuda_host_buffer(at::IntArrayRef shape, at::ScalarType dtype, const c10::Device& device);
std::unique_ptr<OffloadCopier> make_cuda_offload_copier(const c10::Device& device);
#endif

/// A ring slot's buffers laid out like one layer type's buffers (same slot
/// count, so the layer's write index serves both), with the [-1, head_dim]
/// aliases per-row writes use.
struct StagedLayout {
  at::Tensor keys, values;            // [max_batch, kv_heads, slots, head_dim]
  at::Tensor flat_keys, flat_values;  // [-1, head_dim]
};

/// The device side of an offloaded cache: two staging buffers, each seen in
/// every layer type's layout, and the copier that fills them. Layer l lives
/// in slot l % 2, held by (l, the step's generation) from the moment its
/// copy is issued: the views of layer l - 2 end there.
class OffloadRing {
 public:
  OffloadRing() = default;
  /// group_slots: the buffer slots of each layer type (group), in order.
  OffloadRing(const CacheConfig& config, const std::vector<int64_t>& group_slots)
      : copier_(make_offload_copier(config.device)) {
    const auto options = at::TensorOptions().dtype(config.dtype).device(config.device);
    for (StagingBuffer& buffer : buffers_) {
      buffer = StagingBuffer(config.max_batch, config.num_kv_heads, config.max_buffer_slots(),
                             config.head_dim, options);
    }
    for (size_t s = 0; s < buffers_.size(); ++s) {
      for (int64_t slots : group_slots) {
        auto [keys, values] = buffers_[s].layout(slots);
        const int64_t d = config.head_dim;
        layouts_[s].push_back(StagedLayout{keys, values, keys.view({-1, d}), values.view({-1, d})});
      }
    }
  }

  bool defined() const { return copier_ != nullptr; }
  static int slot_of(int64_t layer) { return static_cast<int>(layer % 2); }

  const StagedLayout& layout(int64_t layer, int64_t group) const {
    return layouts_[static_cast<size_t>(slot_of(layer))][static_cast<size_t>(group)];
  }

  /// Issues layer `layer`'s copy-in of rows [0, rows) and slots [0, n) from
  /// its host buffers, held by (layer, stamp) from now on.
  void prefetch(int64_t layer, int64_t group, uint64_t stamp, int64_t rows, int64_t n,
                const at::Tensor& host_keys, const at::Tensor& host_values) {
    const int slot = slot_of(layer);
    const StagedLayout& staged = layout(layer, group);
    copier_->copy_in(slot,
                     {batch_prefix(staged.keys, rows, n), batch_prefix(staged.values, rows, n)},
                     {batch_prefix(host_keys, rows, n), batch_prefix(host_values, rows, n)});
    buffers_[static_cast<size_t>(slot)].hold(layer, stamp);
  }

  /// The caller's stream waits for layer `layer`'s copy-in.
  void acquire(int64_t layer) { copier_->wait(slot_of(layer)); }

  bool holds(int64_t layer, uint64_t stamp) const {
    return buffers_[static_cast<size_t>(slot_of(layer))].holds(layer, stamp);
  }
  /// The layer whose views slot_of(layer) holds now, -1 when none.
  int64_t holder(int64_t layer) const {
    return buffers_[static_cast<size_t>(slot_of(layer))].holder();
  }

  /// Nothing staged is current (Note [staging buffer]: views end with
  /// their step). A copy-in no update() waited for (a step left before its
  /// last layer) is waited for first, so nothing writes a slot after its
  /// release.
  void release() {
    copier_->drain();
    for (StagingBuffer& buffer : buffers_) buffer.release();
  }

  int64_t nbytes() const { return buffers_[0].nbytes() + buffers_[1].nbytes(); }
  /// Ring slot `slot`'s staging buffer (0 or 1).
  const StagingBuffer& buffer(int slot) const { return buffers_.at(static_cast<size_t>(slot)); }

 private:
  std::array<StagingBuffer, 2> buffers_;
  std::array<std::vector<StagedLayout>, 2> layouts_;
  std::unique_ptr<OffloadCopier> copier_;
};

}  // namespace statickv::detail
