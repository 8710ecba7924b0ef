#pragma once
// Cache's bodies, building (detail/cache_impl.hpp lists them): the
// constructor, each layer type's bookkeeping, the memory estimates and
// StaticCache's own checks. Included by cache_impl.hpp only.

#include <statickv/cache.hpp>
#include <statickv/detail/make_storage.hpp>
#include <statickv/detail/storage.hpp>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <cstdint>
#include <utility>

namespace statickv {

// ---------------------------------------------------------------- building

STATICKV_CACHE_FN Cache::Cache(CacheConfig config) : config_(std::move(config)) {
  config_.validate();
  // A "cuda" device without an index becomes the device actually used.
  seq_lengths_ =
      at::zeros({config_.max_batch}, at::TensorOptions().dtype(at::kLong).device(config_.device));
  config_.device = seq_lengths_.device();
  // One group per layer type present, in order of first appearance.
  std::vector<int64_t> layer_group;
  std::vector<int64_t> layer_slots;
  for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
    const LayerType type = config_.layer_type(layer);
    int64_t g = 0;
    while (g < static_cast<int64_t>(groups_.size()) && groups_[g].policy->type() != type) ++g;
    if (g == static_cast<int64_t>(groups_.size())) add_group(type);
    layer_group.push_back(g);
    layer_slots.push_back(groups_[g].policy->buffer_len());
  }
  std::vector<int64_t> group_slots;
  for (const LayerGroup& group : groups_) group_slots.push_back(group.policy->buffer_len());
  layer_group_ = std::make_shared<const std::vector<int64_t>>(std::move(layer_group));
  storage_ = detail::make_storage(config_, layer_group_, layer_slots, group_slots);
  mask_values_ = detail::additive_values(config_.dtype, config_.device);
  arange32_ =
      at::arange(config_.max_batch + 1, at::TensorOptions().dtype(at::kInt).device(config_.device));
}

STATICKV_CACHE_FN Cache::~Cache() = default;

// A layer type's bookkeeping: its policy, its slot positions (all empty),
// and (row * kv_heads + head) * slots, the start of each [row, head] run of
// slots in a [-1, head_dim] view of a buffer, for per-row writes.
STATICKV_CACHE_FN void Cache::add_group(LayerType type) {
  const auto long_opts = at::TensorOptions().dtype(at::kLong).device(config_.device);
  LayerGroup group;
  group.policy = make_layer_policy(config_, type);
  const int64_t slots = group.policy->buffer_len();
  group.slot_positions = at::full({config_.max_batch, slots}, -1, long_opts);
  group.row_head_base = at::arange(config_.max_batch * config_.num_kv_heads, long_opts)
                            .mul_(slots)
                            .view({config_.max_batch, config_.num_kv_heads, 1});
  // Note [step op count]: the varlen path's key starts depend only on the
  // buffer's shape, so they are built once here, not per layer per step.
  const int64_t per_row = config_.num_kv_heads * slots;
  if (config_.max_batch * per_row <= INT32_MAX) {
    group.key_starts = at::arange(config_.max_batch + 1, long_opts).mul_(per_row).to(at::kInt);
  }
  groups_.push_back(std::move(group));
}

// ---------------------------------------------------------------- the rest

STATICKV_CACHE_FN int64_t estimate_memory_bytes(const CacheConfig& config) {
  config.validate();  // rejects a config whose bytes overflow
  bool overflow = false;
  return config.owned_bytes(&overflow);
}

STATICKV_CACHE_FN CacheConfig::Bytes estimate_memory(const CacheConfig& config) {
  config.validate();
  bool overflow = false;
  return config.owned(&overflow);
}

STATICKV_CACHE_FN StaticCache::StaticCache(CacheConfig config)
    : Cache(checked(std::move(config))) {}

STATICKV_CACHE_FN CacheConfig StaticCache::checked(CacheConfig config) {
  for (size_t i = 0; i < config.layer_types.size(); ++i) {
    TORCH_CHECK(config.layer_types[i] == LayerType::kFull, "StaticCache: CacheConfig.layer_types[",
                i, "]: expected full but got ", config.layer_types[i],
                " (use HybridCache for sliding layers)");
  }
  return config;
}

}  // namespace statickv
