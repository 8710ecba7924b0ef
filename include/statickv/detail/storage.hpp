#pragma once
// A cache's storage: the object that owns every layer's key and value
// buffers, writes a step into them, copies, fills, snapshots and clones
// rows, and counts their bytes. One subclass per storage mode (plain:
// detail/storage.hpp; quantized: detail/quantized_storage.hpp; host
// offload: detail/offloaded_storage.hpp), chosen once in the cache's
// constructor (make_storage, detail/make_storage.hpp), so the cache
// dispatches once instead of testing flags. The cache keeps the
// bookkeeping (slot positions, seq_lengths) and every argument check;
// storage methods run after those checks and take well-formed arguments.
//
// Internal: reached through Cache (cache.hpp), never built by users.

#include <statickv/config.hpp>
#include <statickv/row_state.hpp>
#include <statickv/staging.hpp>
#include <statickv/step.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace statickv::detail {

class OffloadRing;

class Storage {
 public:
  /// layer_slots: the buffer slots (capacity + 1) of each layer.
  /// layer_group: the layer type (group) of each layer, shared with the cache.
  Storage(const CacheConfig& config, std::shared_ptr<const std::vector<int64_t>> layer_group)
      : config_(config), layer_group_(std::move(layer_group)) {}
  virtual ~Storage() = default;
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;

  // ---- The step (Invariant [graph-safe step]: device ops only).

  /// The end of prepare(): host offload issues layer 0's copy-in here.
  virtual void begin_step(const StepPlan& /*step*/) {}
  /// update()'s work for `layer` after its checks: writes the step's keys
  /// and values and returns the views attention reads.
  virtual KV write(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                   const StepPlan& step) = 0;
  /// The whole buffers the views write() returns for `layer` alias.
  virtual KV view_buffers(int64_t layer) const {
    const auto l = static_cast<size_t>(layer);
    return KV{keys_[l], values_[l]};
  }
  /// Refuses views of `layer` another update() has overwritten since
  /// (staged modes: Note [staging buffer]).
  virtual void check_views(int64_t /*layer*/, const StepPlan& /*step*/) const {}
  /// Ends every staged view (the next prepare(), reset or row operation).
  virtual void release() {}
  /// Why the varlen attention path cannot read this storage; nullptr when it can.
  virtual const char* varlen_refusal() const { return nullptr; }
  /// Refuses a fused write (Cache::write_target) into this storage.
  virtual void check_write_target() const {}
  /// Refuses row save/restore (RowState) for this storage.
  virtual void check_row_state(const char* /*entry_point*/) const {}

  // ---- Rows (between steps, or graph-safe device ops where noted).

  /// Every buffer set to `value` (reset).
  void fill(int64_t value) {
    for_each_buffer([&](at::Tensor& t) { t.fill_(value); });
  }
  /// Rows `index` (int64 on the device) zeroed in every buffer (reset_rows).
  void fill_rows(const at::Tensor& index) {
    for_each_buffer([&](at::Tensor& t) { t.index_fill_(0, index, 0); });
  }
  /// Row `row` zeroed in every buffer.
  void clear_row(int64_t row) {
    for_each_buffer([&](at::Tensor& t) { t[row].fill_(0); });
  }
  /// Row `dst` becomes row `src` in every buffer.
  void copy_row(int64_t src, int64_t dst) {
    for_each_buffer([&](at::Tensor& t) { store_copy(t.select(0, dst), t.select(0, src)); });
  }
  /// Row i becomes old row index[i] for i < index.numel() (index_select
  /// makes a temporary, so overlapping sources are read first).
  void reorder(const at::Tensor& index) {
    const int64_t n = index.numel();
    for_each_buffer(
        [&](at::Tensor& t) { store_copy(t.narrow(0, 0, n), t.index_select(0, index)); });
  }
  /// Zeroes the slots drop[group] [b, slots] marks in rows 0..b-1
  /// (rollback; graph-safe).
  void drop(int64_t b, const std::vector<at::Tensor>& drop) {
    for_each_layer_buffer([&](int64_t layer, at::Tensor& t) {
      const at::Tensor& d = drop[static_cast<size_t>((*layer_group_)[static_cast<size_t>(layer)])];
      t.narrow(0, 0, b).masked_fill_(d.view({b, 1, d.size(1), 1}), 0);
    });
  }
  /// Every buffer becomes `other`'s (a cache of the same config): an
  /// independent copy with its own memory (Cache::copy_from).
  void copy_from(const Storage& other) {
    std::vector<at::Tensor> sources;
    const_cast<Storage&>(other).for_each_buffer([&](at::Tensor& t) { sources.push_back(t); });
    size_t i = 0;
    for_each_buffer([&](at::Tensor& t) { store_copy(t, sources[i++]); });
  }
  /// Layer `layer`'s keys and values of row `row`, slots [0, n), copied to
  /// `device` in the compute dtype (save_row).
  std::pair<at::Tensor, at::Tensor> save_slots(int64_t layer, int64_t row, int64_t n,
                                               const at::Device& device) const {
    return {copy_to(keys(layer)[row].narrow(1, 0, n), device, config_.dtype),
            copy_to(values(layer)[row].narrow(1, 0, n), device, config_.dtype)};
  }
  /// Row `row`'s slots [0, n) of `layer` become keys and values [kv_heads,
  /// n, head_dim] on the device (restore_row; graph-safe).
  void restore_slots(int64_t layer, int64_t row, const at::Tensor& keys, const at::Tensor& values) {
    const auto l = static_cast<size_t>(layer);
    const int64_t n = keys.size(1);
    store_copy(keys_[l][row].narrow(1, 0, n), keys);
    store_copy(values_[l][row].narrow(1, 0, n), values);
  }

  // ---- Bytes.

  /// Bytes of every layer's keys and values (and scales), wherever they live.
  int64_t stored_bytes() const {
    int64_t total = 0;
    const_cast<Storage*>(this)->for_each_buffer([&](at::Tensor& t) { total += t.nbytes(); });
    return total;
  }
  /// Bytes on the cache's device (staging included).
  virtual int64_t device_bytes() const { return stored_bytes(); }
  /// Bytes of host memory: an offloaded cache's keys and values.
  virtual int64_t host_bytes() const { return 0; }
  /// Bytes of staging buffers (part of device_bytes()).
  virtual int64_t staging_bytes() const { return 0; }

  // ---- Inspection.

  /// A layer's whole key buffer as the user reads it (Cache::keys).
  virtual const at::Tensor& keys(int64_t layer) const { return keys_[static_cast<size_t>(layer)]; }
  virtual const at::Tensor& values(int64_t layer) const {
    return values_[static_cast<size_t>(layer)];
  }
  /// Quantized storage's per-slot scales; undefined otherwise.
  virtual const at::Tensor& key_scales(int64_t /*layer*/) const { return undefined_; }
  virtual const at::Tensor& value_scales(int64_t /*layer*/) const { return undefined_; }
  /// The staging buffer of quantized storage; empty otherwise.
  virtual const StagingBuffer& staging() const { return no_staging_; }
  /// The tensors device ops write for `layer` (a step's sources must not
  /// alias them): the stored keys and values in the storage layout.
  const at::Tensor& stored_keys(int64_t layer) const { return keys_[static_cast<size_t>(layer)]; }
  const at::Tensor& stored_values(int64_t layer) const {
    return values_[static_cast<size_t>(layer)];
  }

 protected:
  /// Registers one layer's buffers: `keys`/`values` as views see them
  /// (float8 as its uint8 bits reinterpreted), `raw_*` as written.
  void add_layer(at::Tensor keys, at::Tensor values, at::Tensor raw_keys, at::Tensor raw_values) {
    flat_keys_.push_back(raw_keys.view({-1, config_.head_dim}));
    flat_values_.push_back(raw_values.view({-1, config_.head_dim}));
    write_keys_.push_back(std::move(raw_keys));
    write_values_.push_back(std::move(raw_values));
    keys_.push_back(std::move(keys));
    values_.push_back(std::move(values));
  }

  /// Every per-row buffer a row operation writes, per layer (keys and
  /// values as written, then a mode's extra buffers): all hold 0 in an
  /// empty row.
  void for_each_buffer(const std::function<void(at::Tensor&)>& fn) {
    for_each_layer_buffer([&](int64_t, at::Tensor& t) { fn(t); });
  }
  virtual void for_each_layer_buffer(const std::function<void(int64_t, at::Tensor&)>& fn) {
    for (size_t l = 0; l < keys_.size(); ++l) {
      fn(static_cast<int64_t>(l), write_keys_[l]);
      fn(static_cast<int64_t>(l), write_values_[l]);
    }
  }

  /// dst = src for a row operation (host offload copies with a kernel).
  virtual void store_copy(at::Tensor dst, const at::Tensor& src) const { dst.copy_(src); }

  /// One index_copy_ of src into buffer (or its flat alias, for per-row
  /// positions) at the step's slots of `layer`'s type.
  void write_slots(const at::Tensor& buffer, const at::Tensor& flat, const at::Tensor& src,
                   const StepPlan& step, int64_t layer) const {
    const int64_t b = step.live_batch();
    if (step.per_row()) {
      flat.index_copy_(0, StepAccess::flat_index(step, layer), src.reshape({-1, src.size(-1)}));
    } else if (b == config_.max_batch) {
      buffer.index_copy_(2, step.write_slots(layer), src);
    } else {
      batch_prefix(buffer, b, buffer.size(2)).index_copy_(2, step.write_slots(layer), src);
    }
  }
  /// write_slots() into layer `layer`'s stored keys and values.
  void write_layer(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                   const StepPlan& step) const {
    const auto l = static_cast<size_t>(layer);
    write_slots(write_keys_[l], flat_keys_[l], key, step, layer);
    write_slots(write_values_[l], flat_values_[l], value, step, layer);
  }
  /// The batch-prefix views of `layer`'s stored buffers for `step`.
  KV stored_views(int64_t layer, const StepPlan& step) const {
    const auto l = static_cast<size_t>(layer);
    const int64_t b = step.live_batch();
    const int64_t n = step.view_len(layer);
    return KV{batch_prefix(keys_[l], b, n), batch_prefix(values_[l], b, n)};
  }

  CacheConfig config_;
  std::shared_ptr<const std::vector<int64_t>> layer_group_;  // group of each layer
  std::vector<at::Tensor> keys_;    // per layer [max_batch, kv_heads, capacity + 1, head_dim]
  std::vector<at::Tensor> values_;  // per layer, same shape
  std::vector<at::Tensor> write_keys_, write_values_;  // per layer, as written (fp8: uint8 bits)
  std::vector<at::Tensor> flat_keys_, flat_values_;    // per layer, [-1, head_dim] aliases
  at::Tensor undefined_;
  StagingBuffer no_staging_;
};

/// Plain storage (kv_storage=compute, no offload): one zeroed device buffer
/// per layer and tensor, written with one index_copy_ each; the views are
/// batch prefixes of the buffers themselves.
class PlainStorage final : public Storage {
 public:
  PlainStorage(const CacheConfig& config, std::shared_ptr<const std::vector<int64_t>> layer_group,
               const std::vector<int64_t>& layer_slots)
      : Storage(config, std::move(layer_group)) {
    const auto opts = at::TensorOptions().dtype(config.dtype).device(config.device);
    for (int64_t slots : layer_slots) {
      const std::vector<int64_t> shape = {config.max_batch, config.num_kv_heads, slots,
                                          config.head_dim};
      at::Tensor k = at::zeros(shape, opts);
      at::Tensor v = at::zeros(shape, opts);
      add_layer(k, v, k, v);
    }
  }

  KV write(int64_t layer, const at::Tensor& key, const at::Tensor& value,
           const StepPlan& step) override {
    write_layer(layer, key, value, step);
    return stored_views(layer, step);
  }
};

}  // namespace statickv::detail
