#pragma once
// Host offload (CacheConfig::host_offload; Note [host offload],
// docs/design.md): every layer's keys and values in host memory (pinned and
// device-mapped on CUDA), a ring of two staging buffers on the device.
// A layer's attended range is in its ring slot (prefetched by the previous
// layer's write() or by begin_step(); issued in write() if not); the
// step's keys and values go into the staging buffer and, with the same
// index, into the host copy; then the next layer's copy-in is issued, to
// run while this layer computes. Internal (detail/storage.hpp).

#include <statickv/detail/offload.hpp>
#include <statickv/detail/storage.hpp>

#include <ATen/ATen.h>

#include <string>

namespace statickv::detail {

class OffloadedStorage final : public Storage {
 public:
  /// group_slots: the buffer slots of each layer type (group), in order.
  OffloadedStorage(const CacheConfig& config,
                   std::shared_ptr<const std::vector<int64_t>> layer_group,
                   const std::vector<int64_t>& layer_slots, const std::vector<int64_t>& group_slots)
      : Storage(config, std::move(layer_group)), ring_(config, group_slots) {
    for (int64_t slots : layer_slots) {
      const std::vector<int64_t> shape = {config.max_batch, config.num_kv_heads, slots,
                                          config.head_dim};
      // Device ops write the store (Note [host offload]); users read the host side.
      HostBuffer k = host_buffer(shape, config.dtype, config.device);
      HostBuffer v = host_buffer(shape, config.dtype, config.device);
      host_keys_.push_back(k.host);
      host_values_.push_back(v.host);
      add_layer(k.store, v.store, k.store, v.store);
    }
  }

  void begin_step(const StepPlan& step) override { prefetch(0, step); }  // overlaps the embedding

  KV write(int64_t layer, const at::Tensor& key, const at::Tensor& value,
           const StepPlan& step) override {
    if (!ring_.holds(layer, StepAccess::generation(step))) prefetch(layer, step);
    ring_.acquire(layer);
    const StagedLayout& staged = ring_.layout(layer, group(layer));
    write_slots(staged.keys, staged.flat_keys, key, step, layer);
    write_slots(staged.values, staged.flat_values, value, step, layer);
    write_layer(layer, key, value, step);
    if (layer + 1 < config_.num_layers) prefetch(layer + 1, step);
    const int64_t b = step.live_batch();
    return KV{batch_prefix(staged.keys, b, step.view_len(layer)),
              batch_prefix(staged.values, b, step.view_len(layer))};
  }

  KV view_buffers(int64_t layer) const override {
    const StagedLayout& staged = ring_.layout(layer, group(layer));
    return KV{staged.keys, staged.values};
  }

  void check_views(int64_t layer, const StepPlan& step) const override {
    const int64_t holder = ring_.holder(layer);
    TORCH_CHECK(ring_.holds(layer, StepAccess::generation(step)), "kv: expected the views update(",
                layer,
                ", ...) returned for this step, still in the staging buffer, but the staging "
                "buffer now holds ",
                holder < 0 ? std::string("nothing current") : "layer " + std::to_string(holder),
                " (host_offload: a layer's views are valid until the next layer's update(); "
                "Note [host offload], docs/design.md)");
  }

  void release() override { ring_.release(); }

  const char* varlen_refusal() const override {
    return "host offload (CacheConfig.host_offload: the staged views take the masked path)";
  }

  void check_write_target() const override {
    TORCH_CHECK(false,
                "write_target: expected a cache with CacheConfig.host_offload=false (a fused "
                "write targets the stored buffers, which offload keeps in host memory; use the "
                "plain update()) but got host_offload=true");
  }

  int64_t device_bytes() const override { return ring_.nbytes(); }
  int64_t host_bytes() const override { return stored_bytes(); }
  int64_t staging_bytes() const override { return ring_.nbytes(); }
  /// The host copies (CPU tensors, pinned when the device is CUDA).
  const at::Tensor& keys(int64_t layer) const override {
    return host_keys_[static_cast<size_t>(layer)];
  }
  const at::Tensor& values(int64_t layer) const override {
    return host_values_[static_cast<size_t>(layer)];
  }
  const OffloadRing& ring() const { return ring_; }

 protected:
  // The store is host memory that device ops reach through a mapped
  // pointer, which a memcpy must not be given (its pointer is not device
  // memory): row operations copy with a kernel (index_copy_) there, on the
  // CPU too, so tests run that path. (A 0-dim row of seq_lengths is
  // bookkeeping, in device memory, and never reaches storage.)
  void store_copy(at::Tensor dst, const at::Tensor& src) const override {
    if (dst.dim() == 0) {
      dst.copy_(src);
      return;
    }
    const at::Tensor all =
        at::arange(dst.size(0), at::TensorOptions().dtype(at::kLong).device(dst.device()));
    dst.index_copy_(0, all, src);
  }

 private:
  int64_t group(int64_t layer) const { return (*layer_group_)[static_cast<size_t>(layer)]; }

  // Issues layer `layer`'s copy-in for `step`: its live rows and view_len
  // slots (Note [host offload]).
  void prefetch(int64_t layer, const StepPlan& step) {
    const auto l = static_cast<size_t>(layer);
    ring_.prefetch(layer, group(layer), StepAccess::generation(step), step.live_batch(),
                   step.view_len(layer), host_keys_[l], host_values_[l]);
  }

  OffloadRing ring_;
  std::vector<at::Tensor> host_keys_, host_values_;  // per layer, the CPU tensors
};

}  // namespace statickv::detail
