#pragma once
// Quantized storage (kv_storage=int8 or fp8_e4m3; Note [quantized storage],
// docs/design.md): codes in the storage dtype plus a float32 scale per slot
// and kv head, written through the same slots plain storage writes
// (padding to the scratch slot included); a layer's view is dequantized
// into the one staging buffer every layer shares (Note [staging buffer]),
// valid until the next layer's update(). Internal (detail/storage.hpp).

#include <statickv/detail/quantize.hpp>
#include <statickv/detail/storage.hpp>

#include <ATen/ATen.h>

#include <string>

namespace statickv::detail {

class QuantizedStorage final : public Storage {
 public:
  // Buffers zeroed; float8 is allocated as its uint8 bits, which every
  // write and row operation goes through (LibTorch has no float8
  // index_copy_ or index_fill_ on the CPU). Scales [max_batch, kv_heads,
  // slots, 1] with their [-1, 1] aliases for per-row writes.
  QuantizedStorage(const CacheConfig& config,
                   std::shared_ptr<const std::vector<int64_t>> layer_group,
                   const std::vector<int64_t>& layer_slots)
      : Storage(config, std::move(layer_group)) {
    const bool fp8 = config.kv_storage == KvStorage::kFp8E4m3;
    const auto opts =
        at::TensorOptions().dtype(fp8 ? at::kByte : config.storage_dtype()).device(config.device);
    for (int64_t slots : layer_slots) {
      const std::vector<int64_t> shape = {config.max_batch, config.num_kv_heads, slots,
                                          config.head_dim};
      at::Tensor k = at::zeros(shape, opts);
      at::Tensor v = at::zeros(shape, opts);
      add_layer(fp8 ? k.view(at::kFloat8_e4m3fn) : k, fp8 ? v.view(at::kFloat8_e4m3fn) : v, k, v);
      for (std::vector<at::Tensor>* scales : {&key_scales_, &value_scales_}) {
        scales->push_back(at::zeros({shape[0], shape[1], slots, 1}, opts.dtype(at::kFloat)));
      }
      flat_key_scales_.push_back(key_scales_.back().view({-1, 1}));
      flat_value_scales_.push_back(value_scales_.back().view({-1, 1}));
    }
    staging_ = StagingBuffer(config.max_batch, config.num_kv_heads, config.max_view_slots(),
                             config.head_dim,
                             at::TensorOptions().dtype(config.dtype).device(config.device));
  }

  KV write(int64_t layer, const at::Tensor& key, const at::Tensor& value,
           const StepPlan& step) override {
    const auto l = static_cast<size_t>(layer);
    const auto [key_codes, key_scale] = quantize(key, config_.kv_storage);
    const auto [value_codes, value_scale] = quantize(value, config_.kv_storage);
    write_slots(write_keys_[l], flat_keys_[l], key_codes, step, layer);
    write_slots(key_scales_[l], flat_key_scales_[l], key_scale, step, layer);
    write_slots(write_values_[l], flat_values_[l], value_codes, step, layer);
    write_slots(value_scales_[l], flat_value_scales_[l], value_scale, step, layer);
    const int64_t b = step.live_batch();
    const int64_t n = step.view_len(layer);
    auto [keys, values] = staging_.stage(layer, StepAccess::generation(step), b, n);
    dequantize_into(keys, batch_prefix(keys_[l], b, n), batch_prefix(key_scales_[l], b, n));
    dequantize_into(values, batch_prefix(values_[l], b, n), batch_prefix(value_scales_[l], b, n));
    return KV{keys, values};
  }

  KV view_buffers(int64_t /*layer*/) const override {
    return KV{staging_.keys(), staging_.values()};
  }

  void check_views(int64_t layer, const StepPlan& step) const override {
    const int64_t holder = staging_.holder();
    TORCH_CHECK(staging_.holds(layer, StepAccess::generation(step)),
                "kv: expected the views update(", layer,
                ", ...) returned for this step, still in the staging buffer, but the staging "
                "buffer now holds ",
                holder < 0 ? std::string("nothing current") : "layer " + std::to_string(holder),
                " (kv_storage=", to_string(config_.kv_storage),
                ": a layer's views are valid until the next layer's update(); Note [staging "
                "buffer], docs/design.md)");
  }

  void release() override { staging_.release(); }

  const char* varlen_refusal() const override {
    return "quantized KV storage (the kernel reads plain storage; the staged views take the "
           "masked path)";
  }

  // Row save/restore copies buffers in the compute dtype (RowState); a
  // quantized row would need its codes and scales saved as they are.
  void check_row_state(const char* entry_point) const override {
    TORCH_CHECK(false, entry_point,
                ": expected a cache with CacheConfig.kv_storage=compute (row save/restore "
                "supports plain storage only) but got kv_storage=",
                config_.kv_storage);
  }

  int64_t device_bytes() const override { return stored_bytes() + staging_.nbytes(); }
  int64_t staging_bytes() const override { return staging_.nbytes(); }
  const at::Tensor& key_scales(int64_t layer) const override {
    return key_scales_[static_cast<size_t>(layer)];
  }
  const at::Tensor& value_scales(int64_t layer) const override {
    return value_scales_[static_cast<size_t>(layer)];
  }
  const StagingBuffer& staging() const override { return staging_; }

 protected:
  // Keys and values as written, then their scales: all 0 in an empty row.
  void for_each_layer_buffer(const std::function<void(int64_t, at::Tensor&)>& fn) override {
    for (size_t l = 0; l < keys_.size(); ++l) {
      const auto layer = static_cast<int64_t>(l);
      fn(layer, write_keys_[l]);
      fn(layer, write_values_[l]);
      fn(layer, key_scales_[l]);
      fn(layer, value_scales_[l]);
    }
  }

 private:
  std::vector<at::Tensor> key_scales_, value_scales_;            // [max_batch, kv_heads, slots, 1]
  std::vector<at::Tensor> flat_key_scales_, flat_value_scales_;  // [-1, 1] aliases
  StagingBuffer staging_;                                        // Note [staging buffer]
};

}  // namespace statickv::detail
