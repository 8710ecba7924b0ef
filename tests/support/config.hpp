#pragma once
// The tests' cache configs: one builder with the usual small shape as
// defaults, so a test names only the fields it cares about. No Catch2 here:
// the fuzz targets include it too.

#include <statickv/config.hpp>

#include <cstdint>
#include <utility>
#include <vector>

namespace statickv::test {

/// The tests' usual attention shape: grouped-query, 2 query heads per kv head.
constexpr int64_t kHeads = 4;
constexpr int64_t kKvHeads = 2;
constexpr int64_t kDim = 8;

/// Every stored type, plain first: the suites that pin a guarantee for
/// every storage iterate over these (Catch2's GENERATE(from_range(...))).
inline const std::vector<KvStorage>& all_storages() {
  static const std::vector<KvStorage> storages = {KvStorage::kCompute, KvStorage::kInt8,
                                                  KvStorage::kFp8E4m3};
  return storages;
}

/// A CacheConfig built from named fields; the ones not named keep these
/// defaults: 2 layers, all full, kKvHeads heads of kDim, max_batch 4,
/// max_len 16, float on the CPU, the default chunk, host-checked positions.
/// Setters are named after CacheConfig's fields; a later call wins.
///   HybridCache cache(ConfigBuilder().max_batch(8).max_len(96).hybrid(/*window=*/8, /*chunk=*/6));
class ConfigBuilder {
 public:
  ConfigBuilder() {
    c_.num_layers = 2;
    c_.num_kv_heads = kKvHeads;
    c_.head_dim = kDim;
    c_.max_batch = 4;
    c_.max_len = 16;
  }

  ConfigBuilder& num_layers(int64_t n) { return set(c_.num_layers, n); }
  ConfigBuilder& num_kv_heads(int64_t n) { return set(c_.num_kv_heads, n); }
  ConfigBuilder& head_dim(int64_t n) { return set(c_.head_dim, n); }
  ConfigBuilder& max_batch(int64_t n) { return set(c_.max_batch, n); }
  ConfigBuilder& max_len(int64_t n) { return set(c_.max_len, n); }
  ConfigBuilder& dtype(c10::ScalarType t) { return set(c_.dtype, t); }
  ConfigBuilder& device(c10::Device d) { return set(c_.device, d); }
  ConfigBuilder& sliding_window(int64_t n) { return set(c_.sliding_window, n); }
  ConfigBuilder& max_chunk(int64_t n) { return set(c_.max_chunk, n); }
  ConfigBuilder& check_position_values(bool on) { return set(c_.check_position_values, on); }
  ConfigBuilder& kv_storage(KvStorage s) { return set(c_.kv_storage, s); }
  ConfigBuilder& host_offload(bool on) { return set(c_.host_offload, on); }
  /// One layer per entry: sets num_layers to types.size() as well.
  ConfigBuilder& layer_types(std::vector<LayerType> types) {
    c_.num_layers = static_cast<int64_t>(types.size());
    return set(c_.layer_types, std::move(types));
  }
  /// The tests' hybrid: a sliding layer, then a full one.
  ConfigBuilder& hybrid(int64_t window, int64_t chunk) {
    return layer_types({LayerType::kSliding, LayerType::kFull})
        .sliding_window(window)
        .max_chunk(chunk);
  }

  /// A builder stands wherever a CacheConfig is taken: `StaticCache cache(ConfigBuilder())`.
  /// By value, so `const CacheConfig& c = ConfigBuilder()...;` holds a live copy.
  operator CacheConfig() const { return c_; }  // NOLINT(google-explicit-constructor)

 private:
  template <typename T, typename V>
  ConfigBuilder& set(T& field, V&& value) {
    field = std::forward<V>(value);
    return *this;
  }

  CacheConfig c_;
};

}  // namespace statickv::test
