#pragma once
// CacheConfig: the shape of a cache, fixed at construction.
//
// A cache is described once, by value, and validated before any memory is
// allocated. Everything else in the library (layer capacities, the largest
// step a cache accepts, which positions are in range) is derived from these
// fields by the member functions below, so the rules live in one place.
// Layer types are listed per layer; helpers build the patterns real models
// use (all sliding, alternating, N sliding then one full).

#include <c10/core/Device.h>
#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <c10/util/safe_numerics.h>

#include <algorithm>
#include <cstdint>
#include <ostream>
#include <utility>
#include <vector>

namespace statickv {

/// How a layer stores and attends to past positions.
enum class LayerType {
  kFull,     ///< every position up to max_len, position p in slot p
  kSliding,  ///< a ring of the newest positions, position p in slot p % capacity
};

inline const char* to_string(LayerType type) {
  switch (type) {
    case LayerType::kFull:
      return "full";
    case LayerType::kSliding:
      return "sliding";
  }
  return "unknown";
}

inline std::ostream& operator<<(std::ostream& os, LayerType type) { return os << to_string(type); }

/// How a cache stores keys and values (Note [quantized storage],
/// docs/design.md). The compute dtype (CacheConfig::dtype) is what update()
/// takes and what its views hold either way.
enum class KvStorage {
  kCompute,  ///< plain: stored in the compute dtype, the views are the buffers
  kInt8,     ///< int8, symmetric, one float32 scale per token and kv head
  kFp8E4m3,  ///< float8 e4m3 (fn), one float32 scale per token and kv head
};

inline const char* to_string(KvStorage storage) {
  switch (storage) {
    case KvStorage::kCompute:
      return "compute";
    case KvStorage::kInt8:
      return "int8";
    case KvStorage::kFp8E4m3:
      return "fp8";
  }
  return "unknown";
}

inline std::ostream& operator<<(std::ostream& os, KvStorage s) { return os << to_string(s); }

/// `num_layers` sliding layers (Mistral-style: every layer windowed).
inline std::vector<LayerType> all_sliding(int64_t num_layers) {
  return std::vector<LayerType>(static_cast<size_t>(std::max<int64_t>(num_layers, 0)),
                                LayerType::kSliding);
}

/// Sliding and full layers alternating, starting with sliding (Gemma 2).
inline std::vector<LayerType> alternating(int64_t num_layers) {
  std::vector<LayerType> types;
  for (int64_t i = 0; i < num_layers; ++i) {
    types.push_back(i % 2 == 0 ? LayerType::kSliding : LayerType::kFull);
  }
  return types;
}

/// `sliding_per_full` sliding layers then one full layer, repeating (Gemma 3
/// uses 5). The last layer of an incomplete group is sliding.
inline std::vector<LayerType> sliding_then_full(int64_t num_layers, int64_t sliding_per_full) {
  TORCH_CHECK(sliding_per_full >= 1, "sliding_then_full: expected sliding_per_full >= 1 but got ",
              sliding_per_full);
  std::vector<LayerType> types;
  for (int64_t i = 0; i < num_layers; ++i) {
    types.push_back((i + 1) % (sliding_per_full + 1) == 0 ? LayerType::kFull : LayerType::kSliding);
  }
  return types;
}

/// The fixed shape of a cache. Fields are plain so configs can be written as
/// designated-style aggregates; call validate() (constructors do) before use.
struct CacheConfig {
  int64_t num_layers = 0;
  int64_t num_kv_heads = 0;
  int64_t head_dim = 0;
  int64_t max_batch = 0;
  /// Positions 0 .. max_len-1 are valid in every layer.
  int64_t max_len = 0;
  c10::ScalarType dtype = c10::kFloat;
  c10::Device device = c10::Device(c10::kCPU);
  /// One entry per layer; empty means every layer is kFull.
  std::vector<LayerType> layer_types;
  /// Keys a sliding-layer query sees, itself included: q - k < sliding_window.
  int64_t sliding_window = 0;
  /// Most query tokens one step may carry (a prefill chunk). 0 picks the
  /// default: max_len for caches without sliding layers, sliding_window for
  /// caches with them. Sliding capacity grows with it; see sliding_capacity().
  int64_t max_chunk = 0;
  /// When positions live in host memory (so reading them needs no device
  /// sync), reject positions that cannot fit instead of routing them to the
  /// scratch slot. Device-resident positions are never read by the host.
  bool check_position_values = true;
  /// Build every mask in prepare() instead of on first use (Note [lazy
  /// masks], step.hpp): for callers that want a step's whole cost in
  /// prepare(). Off by default: a step on the varlen path needs no mask.
  bool eager_masks = false;
  /// Stored dtype of keys and values (Note [quantized storage]): kCompute
  /// (plain, the default) or a quantized type whose update() views are
  /// dequantized into one staging buffer shared by every layer, valid until
  /// the next layer's update() (Note [staging buffer]).
  KvStorage kv_storage = KvStorage::kCompute;
  /// Keep every layer's keys and values in host memory (pinned and
  /// device-mapped when the device is CUDA) and only two layers' worth on
  /// the device, in a staging ring that update() streams the attended range
  /// into (Note [host offload], docs/design.md). update()'s views are the
  /// staging buffers, valid until the next layer's update(). Needs compute
  /// storage; refuses the fused rotary write and the varlen attention path.
  bool host_offload = false;

  /// Plain storage: the buffers hold the compute dtype and update()'s views
  /// are the buffers themselves. What a feature that writes or reads the
  /// buffers directly (a fused write kernel, the varlen path) tests for.
  bool plain_storage() const { return kv_storage == KvStorage::kCompute; }

  /// The dtype of the key and value buffers: dtype, int8 or float8 e4m3fn.
  c10::ScalarType storage_dtype() const {
    switch (kv_storage) {
      case KvStorage::kInt8:
        return c10::kChar;
      case KvStorage::kFp8E4m3:
        return c10::kFloat8_e4m3fn;
      default:
        return dtype;
    }
  }

  /// The largest number of slots a layer's buffer has (the largest
  /// capacity plus the scratch slot): what an offloaded cache's staging
  /// buffers are sized for.
  int64_t max_buffer_slots() const { return max_view_slots() + 1; }

  /// The largest number of slots a view exposes (the largest capacity):
  /// what the staging buffer of a quantized cache is sized for.
  int64_t max_view_slots() const {
    const int64_t full = has_type(LayerType::kFull) ? max_len : 0;
    return std::max(full, has_type(LayerType::kSliding) ? sliding_capacity() : int64_t{0});
  }

  LayerType layer_type(int64_t layer) const {
    TORCH_CHECK(layer >= 0 && layer < num_layers, "layer: expected an index in [0, ", num_layers,
                ") but got ", layer);
    return layer_types.empty() ? LayerType::kFull : layer_types[static_cast<size_t>(layer)];
  }

  bool has_type(LayerType type) const {
    if (layer_types.empty()) return type == LayerType::kFull && num_layers > 0;
    return std::find(layer_types.begin(), layer_types.end(), type) != layer_types.end();
  }

  /// max_chunk with its default resolved: the largest number of query
  /// tokens a step may carry.
  int64_t effective_max_chunk() const {
    if (max_chunk > 0) return max_chunk;
    return has_type(LayerType::kSliding) ? std::min(sliding_window, max_len) : max_len;
  }

  /// Slots of a sliding ring. Note [ring capacity]: a chunk of c tokens
  /// starting at position p0 needs the window-1 positions before p0 (for its
  /// first query) and its own c tokens resident at once, so the ring holds
  /// sliding_window + effective_max_chunk() - 1 slots. No position reaches max_len, so
  /// a ring never needs more than max_len slots (it then never wraps).
  /// (The window is clamped to max_len first: same result, no overflow for a
  /// huge sliding_window.) Such a ring takes back (Cache::rollback) up to
  /// max_chunk of its newest positions exactly: Note [ring rollback].
  int64_t sliding_capacity() const {
    return std::min(std::min(sliding_window, max_len) + effective_max_chunk() - 1, max_len);
  }

  /// Throws c10::Error naming the first field that makes the config impossible.
  void validate() const {
    TORCH_CHECK(num_layers > 0, "CacheConfig.num_layers: expected > 0 but got ", num_layers);
    TORCH_CHECK(num_kv_heads > 0, "CacheConfig.num_kv_heads: expected > 0 but got ", num_kv_heads);
    TORCH_CHECK(head_dim > 0, "CacheConfig.head_dim: expected > 0 but got ", head_dim);
    TORCH_CHECK(max_batch > 0, "CacheConfig.max_batch: expected > 0 but got ", max_batch);
    TORCH_CHECK(max_len > 0, "CacheConfig.max_len: expected > 0 but got ", max_len);
    TORCH_CHECK(dtype == c10::kFloat || dtype == c10::kHalf || dtype == c10::kBFloat16 ||
                    dtype == c10::kDouble,
                "CacheConfig.dtype: expected Float, Half, BFloat16 or Double but got ", dtype);
    validate_storage();
    TORCH_CHECK(device.is_cpu() || device.is_cuda(),
                "CacheConfig.device: expected a cpu or cuda device but got ", device);
    TORCH_CHECK(layer_types.empty() || static_cast<int64_t>(layer_types.size()) == num_layers,
                "CacheConfig.layer_types: expected empty or num_layers (", num_layers,
                ") entries but got ", layer_types.size());
    for (size_t i = 0; i < layer_types.size(); ++i) {
      TORCH_CHECK(layer_types[i] == LayerType::kFull || layer_types[i] == LayerType::kSliding,
                  "CacheConfig.layer_types[", i, "]: expected full or sliding but got ",
                  static_cast<int>(layer_types[i]));
    }
    if (has_type(LayerType::kSliding)) {
      TORCH_CHECK(sliding_window > 0,
                  "CacheConfig.sliding_window: expected > 0 when a layer is kSliding but got ",
                  sliding_window);
    } else {
      TORCH_CHECK(sliding_window >= 0, "CacheConfig.sliding_window: expected >= 0 but got ",
                  sliding_window);
    }
    TORCH_CHECK(max_chunk >= 0 && max_chunk <= max_len,
                "CacheConfig.max_chunk: expected a value in [0, max_len=", max_len, "] but got ",
                max_chunk);
    // Keeps slot arithmetic (position * chunk tie-breaking keys) far from overflow.
    TORCH_CHECK(max_len <= (int64_t{1} << 40), "CacheConfig.max_len: expected <= 2^40 but got ",
                max_len);
    // Note [newest wins] keys are position * q + token with position < max_len
    // and q <= effective_max_chunk(): they must fit int64.
    TORCH_CHECK(
        effective_max_chunk() <= INT64_MAX / max_len,
        "CacheConfig.max_chunk: expected max_len * max_chunk < 2^63 but got max_len=", max_len,
        " and max_chunk=", effective_max_chunk(), max_chunk == 0 ? " (the default)" : "");
    bool overflow = false;
    owned_bytes(&overflow);
    const int64_t element = static_cast<int64_t>(c10::elementSize(dtype));
    TORCH_CHECK(!overflow, "CacheConfig: expected < 2^63 bytes of buffers in total but got ",
                num_layers, " layers of max_batch=", max_batch, " x num_kv_heads=", num_kv_heads,
                " x slots (max_len=", max_len, ") x head_dim=", head_dim, " x ", element,
                " bytes, twice, which overflows");
  }

  /// The stored type against the compute dtype (Note [quantized storage]).
  void validate_storage() const {
    TORCH_CHECK(kv_storage == KvStorage::kCompute || kv_storage == KvStorage::kInt8 ||
                    kv_storage == KvStorage::kFp8E4m3,
                "CacheConfig.kv_storage: expected compute, int8 or fp8 but got ",
                static_cast<int>(kv_storage));
    TORCH_CHECK(
        plain_storage() || dtype == c10::kFloat || dtype == c10::kHalf || dtype == c10::kBFloat16,
        "CacheConfig.kv_storage: expected compute storage with CacheConfig.dtype=", dtype,
        " (quantized storage takes a Float, Half or BFloat16 compute dtype) but got "
        "kv_storage=",
        kv_storage);
    TORCH_CHECK(
        !host_offload || plain_storage(),
        "CacheConfig.host_offload: expected false with CacheConfig.kv_storage=", kv_storage,
        " (offloaded storage holds the compute dtype; use kv_storage=compute to offload, or "
        "host_offload=false to quantize) but got true");
  }

  /// Staging buffers on the device (Note [staging buffer]): none for plain
  /// storage, one for a quantized cache, two (a ring) for an offloaded one.
  int64_t staging_count() const { return host_offload ? 2 : plain_storage() ? 0 : 1; }

  /// Bytes of the staging buffers (Note [staging buffer]): keys and values
  /// [max_batch, kv_heads, slots, head_dim] in the compute dtype, each
  /// staging_count() times, with slots = max_view_slots() for a quantized
  /// cache and max_buffer_slots() (the scratch slot too: update() writes
  /// into them) for an offloaded one. Part of owned(). On overflow sets
  /// *overflow and returns 0.
  int64_t staging_bytes(bool* overflow) const {
    if (staging_count() == 0) return 0;
    const int64_t slots = host_offload ? max_buffer_slots() : max_view_slots();
    int64_t bytes = 2 * staging_count() * static_cast<int64_t>(c10::elementSize(dtype));
    const bool bad = c10::mul_overflows(bytes, max_batch, &bytes) ||
                     c10::mul_overflows(bytes, num_kv_heads, &bytes) ||
                     c10::mul_overflows(bytes, slots, &bytes) ||
                     c10::mul_overflows(bytes, head_dim, &bytes);
    if (bad) *overflow = true;
    return bad ? 0 : bytes;
  }

  /// Bytes a cache built from this config owns, computed without allocating
  /// (the one place they are computed: validate() rejects a config whose
  /// total overflows int64, estimate_memory() returns them), by where they
  /// live. Per layer type present: keys and values [max_batch, kv_heads,
  /// slots, head_dim], slot_positions [max_batch, slots] and row offsets
  /// [max_batch, kv_heads] (int64), with slots = capacity + 1 (the scratch
  /// slot); plus seq_lengths [max_batch]. A quantized cache stores keys and
  /// values in storage_dtype() and adds a float32 scale per slot, kv head
  /// and row to each (4 bytes a slot where head_dim elements take head_dim
  /// bytes). Keys, values and scales are host bytes under host_offload,
  /// device bytes otherwise; bookkeeping and the staging buffers
  /// (staging_bytes()) are device bytes. On overflow sets *overflow and
  /// returns zeros.
  struct Bytes {
    int64_t device = 0;  ///< on CacheConfig::device
    int64_t host = 0;    ///< in host memory (host_offload), pinned on CUDA
  };
  Bytes owned(bool* overflow) const {
    const int64_t scale = plain_storage() ? 0 : 4;  // float32 per token and kv head
    const int64_t element = static_cast<int64_t>(c10::elementSize(storage_dtype()));
    const int64_t sliding = static_cast<int64_t>(
        std::count(layer_types.begin(), layer_types.end(), LayerType::kSliding));
    const std::pair<int64_t, int64_t> kinds[] = {
        {num_layers - sliding, max_len + 1},
        {sliding, sliding > 0 ? sliding_capacity() + 1 : 0}};  // {layers, slots}
    int64_t book_total = 0;
    int64_t kv_total = 0;
    bool bad = c10::mul_overflows(int64_t{8}, max_batch, &book_total);  // seq_lengths
    for (const auto& [layers, slots] : kinds) {
      if (layers == 0) continue;
      int64_t kv = 2 * element;  // keys and values
      int64_t scales = 2 * scale;
      int64_t book = 8;     // slot_positions
      int64_t offsets = 8;  // row offsets
      bad = bad || c10::mul_overflows(kv, head_dim, &kv) || c10::add_overflows(kv, scales, &kv) ||
            c10::mul_overflows(kv, slots, &kv) || c10::mul_overflows(kv, num_kv_heads, &kv) ||
            c10::mul_overflows(kv, max_batch, &kv) || c10::mul_overflows(kv, layers, &kv) ||
            c10::mul_overflows(book, slots, &book) || c10::mul_overflows(book, max_batch, &book) ||
            c10::mul_overflows(offsets, num_kv_heads, &offsets) ||
            c10::mul_overflows(offsets, max_batch, &offsets) ||
            c10::add_overflows(kv_total, kv, &kv_total) ||
            c10::add_overflows(book_total, book, &book_total) ||
            c10::add_overflows(book_total, offsets, &book_total);
    }
    const int64_t staging = staging_bytes(&bad);
    Bytes out;
    out.host = host_offload ? kv_total : 0;
    bad = bad || c10::add_overflows(book_total, staging, &out.device) ||
          (!host_offload && c10::add_overflows(out.device, kv_total, &out.device));
    int64_t total = 0;
    bad = bad || c10::add_overflows(out.device, out.host, &total);
    *overflow = bad;
    return bad ? Bytes{} : out;
  }
  /// owned()'s device and host bytes together.
  int64_t owned_bytes(bool* overflow) const {
    const Bytes bytes = owned(overflow);
    return bytes.device + bytes.host;
  }
};

}  // namespace statickv
