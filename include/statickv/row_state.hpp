#pragma once
// RowState: one row of a cache, saved (prompt caching). Cache::save_row
// copies a row's live slots to host tensors; Cache::restore_row writes them
// into any row of a compatible cache (the same layer types, kv heads, head
// dim and dtype, the same ring capacity, and room for the length), in this
// process or, through reference::write_prompt_cache, the next one (Note [a
// restored row is the saved row], docs/design.md).

#include <statickv/config.hpp>
#include <statickv/detail/checks.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <utility>
#include <vector>

namespace statickv {

/// A row's live slots, per layer. A full layer keeps slots [0, length)
/// (position p is in slot p); a sliding layer keeps its whole ring
/// ([0, capacity), slot order, Note [ring capacity]).
struct RowState {
  int64_t length = 0;                 ///< the row's seq_length
  std::vector<LayerType> types;       ///< per layer
  std::vector<at::Tensor> positions;  ///< per layer int64 [slots], -1 = empty
  std::vector<at::Tensor> keys;       ///< per layer [kv_heads, slots, head_dim]
  std::vector<at::Tensor> values;     ///< per layer, same shape

  /// A copy on `device`: restore_row takes a state on the cache's device, so
  /// that the restore itself is device copies only (graph-safe).
  RowState to(const at::Device& device) const {
    RowState out{length, types, {}, {}, {}};
    for (size_t l = 0; l < keys.size(); ++l) {
      out.positions.push_back(positions[l].to(device));
      out.keys.push_back(keys[l].to(device));
      out.values.push_back(values[l].to(device));
    }
    return out;
  }
};

namespace detail {

/// A copy of `t` on `device` in `dtype` (save_row): where `t` already is, a
/// copy on its device with no device argument, so nothing goes through the
/// host.
inline at::Tensor copy_to(const at::Tensor& t, const at::Device& device, at::ScalarType dtype) {
  if (t.device() == device) return t.to(dtype, /*non_blocking=*/false, /*copy=*/true);
  return t.to(device, dtype, /*non_blocking=*/false, /*copy=*/true);
}

/// Slots a layer of `config` keeps in a RowState of `length` positions.
inline int64_t row_state_slots(const CacheConfig& config, int64_t layer, int64_t length) {
  return config.layer_type(layer) == LayerType::kFull ? length : config.sliding_capacity();
}

/// Every check of restore_row's state against the cache's config, naming the
/// field and the expected and actual values.
inline void check_row_state(const RowState& state, const CacheConfig& config) {
  TORCH_CHECK(state.length >= 0 && state.length <= config.max_len,
              "state.length: expected a length in [0, max_len=", config.max_len, "] but got ",
              state.length);
  const auto layers = static_cast<size_t>(config.num_layers);
  TORCH_CHECK(state.types.size() == layers && state.positions.size() == layers &&
                  state.keys.size() == layers && state.values.size() == layers,
              "state: expected num_layers=", config.num_layers,
              " entries of types, positions, keys and values but got ", state.types.size(), ", ",
              state.positions.size(), ", ", state.keys.size(), " and ", state.values.size());
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const auto i = static_cast<size_t>(l);
    TORCH_CHECK(state.types[i] == config.layer_type(l), "state.types[", l, "]: expected ",
                config.layer_type(l), " (the cache's layer type) but got ", state.types[i]);
    const int64_t slots = row_state_slots(config, l, state.length);
    const std::vector<int64_t> shape = {config.num_kv_heads, slots, config.head_dim};
    auto check_kv = [&](const char* name, const at::Tensor& t) {
      check_tensor(name, t, config.dtype, config.device);
      TORCH_CHECK(t.sizes() == at::IntArrayRef(shape), name, "[", l,
                  "]: expected shape [kv_heads, slots, head_dim] = ", at::IntArrayRef(shape),
                  " (slots: ", state.types[i] == LayerType::kFull ? "length" : "ring capacity",
                  ") but got ", t.sizes());
    };
    check_kv("state.keys", state.keys[i]);
    check_kv("state.values", state.values[i]);
    check_tensor("state.positions", state.positions[i], at::kLong, config.device);
    TORCH_CHECK(state.positions[i].dim() == 1 && state.positions[i].size(0) == slots,
                "state.positions[", l, "]: expected shape [", slots, "] but got ",
                state.positions[i].sizes());
  }
}

}  // namespace detail

}  // namespace statickv
