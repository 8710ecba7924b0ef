#pragma once
// The one place a cache's storage mode is chosen (detail/storage.hpp).

#include <statickv/detail/offloaded_storage.hpp>
#include <statickv/detail/quantized_storage.hpp>
#include <statickv/detail/storage.hpp>

#include <memory>
#include <vector>

namespace statickv::detail {

/// layer_slots: each layer's buffer slots; group_slots: each layer type's.
inline std::unique_ptr<Storage> make_storage(
    const CacheConfig& config, std::shared_ptr<const std::vector<int64_t>> layer_group,
    const std::vector<int64_t>& layer_slots, const std::vector<int64_t>& group_slots) {
  if (config.host_offload) {
    return std::make_unique<OffloadedStorage>(config, std::move(layer_group), layer_slots,
                                              group_slots);
  }
  if (!config.plain_storage()) {
    return std::make_unique<QuantizedStorage>(config, std::move(layer_group), layer_slots);
  }
  return std::make_unique<PlainStorage>(config, std::move(layer_group), layer_slots);
}

}  // namespace statickv::detail
