#pragma once
// StaticCache and HybridCache: preallocated, address-stable KV caches.
//
// Ownership: the cache owns one key and one value buffer per layer,
// [max_batch, kv_heads, capacity + 1, head_dim], allocated (zeroed) in the
// constructor and never reallocated or reassigned; the extra slot is the
// scratch slot (layers.hpp). The buffers live in one storage object per
// mode (plain, quantized, host offload: detail/storage.hpp), chosen once.
// The cache owns the bookkeeping, shared by all layers of one type (a
// "group"): slot_positions [max_batch, capacity + 1] (-1 = empty; the
// scratch column is garbage and never read) and one seq_lengths
// [max_batch] for the whole cache.
//
// One step: prepare() checks its arguments on the host (shapes, dtypes,
// devices, and position values only when they are in host memory), then
// computes slots and masks with device ops and advances the bookkeeping.
// update() checks, then does one index_copy_ per tensor and returns
// batch-prefix views. Neither reads device memory on the host or allocates
// anything whose size depends on data, so a whole step can be captured in a
// CUDA graph. Row operations (reset_rows, copy_row, reorder) run between
// steps; they read their row arguments on the host to validate them.
//
// Every entry point checks all of its arguments before it changes anything:
// a call that throws leaves buffers and bookkeeping bit-identical. prepare()
// goes further (Note [prepare is all or nothing]): a failure inside LibTorch
// after its checks is rolled back too, and earlier Steps stay valid.
//
// This header declares; the bodies are in detail/cache_impl.hpp, included
// at the end (docs/design.md, "The library's build").

#include <statickv/attention.hpp>
#include <statickv/config.hpp>
#include <statickv/layers.hpp>
#include <statickv/row_state.hpp>
#include <statickv/staging.hpp>
#include <statickv/step.hpp>
#include <statickv/varlen.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace statickv {

namespace detail {
class OffloadRing;
class Storage;
}  // namespace detail

/// The container of layers behind StaticCache and HybridCache. Not copyable
/// and not movable: Steps and CUDA graphs refer to its buffers and to it by
/// address, so its identity must not change. Hold it by value or unique_ptr;
/// copy_from() makes an independent copy into another cache.
class Cache {
 public:
  /// Validates `config` (CacheConfig::validate) and allocates every buffer.
  explicit Cache(CacheConfig config);
  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;
  Cache(Cache&&) = delete;
  Cache& operator=(Cache&&) = delete;
  virtual ~Cache();

  // ==== The step: prepare, then update (and attend) each layer. ====

  /// Plans one forward pass and advances the bookkeeping.
  ///
  /// cache_position: int64 [q] (every live row at the same positions) or
  /// [live_batch, q] (each row at its own positions); a negative position is
  /// a padded token. It must not share memory with the cache (a view of
  /// seq_lengths() would change under the caller when prepare() advances it;
  /// pass a copy). live_batch: rows 0..live_batch-1 take part.
  /// attend_len: full layers expose slots [0, attend_len) (default max_len),
  /// so attention cost can follow the real length.
  StepPlan prepare(const at::Tensor& cache_position, int64_t live_batch, int64_t attend_len = -1);

  /// Writes one layer's new keys and values (one index_copy_ each) and returns
  /// views of the live rows. key/value: [live_batch, kv_heads, q, head_dim].
  KV update(int64_t layer, const at::Tensor& key, const at::Tensor& value, const StepPlan& step);

  /// Where update(layer, key, value, step) would write, after every check
  /// update() makes; nothing is written. For writers that fuse work into
  /// the write (rotary_update(), rotary.hpp): they take the step's own
  /// slots, so slots have one source of truth (Note [fused rotary write]).
  detail::WriteTarget write_target(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                                   const StepPlan& step);

  /// Attention of this step's queries over `kv` (what update(layer, ...)
  /// returned for `step`): [live_batch, heads, q, head_dim]. query: [live_batch,
  /// heads, q, head_dim] in the cache dtype, heads a multiple of kv_heads.
  /// kAuto takes the fastest exact path (attention_path(); Note [attention
  /// paths], docs/design.md): on CUDA in fp16/bf16, full layers read only each
  /// row's live keys through FlashAttention's varlen kernel with no mask;
  /// everything else is sdpa with the step's additive mask. Padded queries
  /// get finite outputs (0 on the varlen path).
  at::Tensor attend(int64_t layer, const at::Tensor& query, const KV& kv, const StepPlan& step,
                    AttentionPath path = AttentionPath::kAuto) const;

  /// The path attend(layer, query, ..., kAuto) takes for a query like `query`.
  AttentionPath attention_path(int64_t layer, const at::Tensor& query) const;

  /// Whether the varlen path can serve `layer` for `query` (the reasons are
  /// the error attend(..., kVarlen) raises otherwise); nullptr when it can.
  const char* varlen_refusal(int64_t layer, const at::Tensor& query) const;

  /// The arguments of the varlen path's kernel call for this step and layer
  /// (detail::VarlenArgs), built with device ops only: what attend() passes
  /// to at::_flash_attention_forward. Public so that tests can check the
  /// offsets and layouts on any device; needs a full-attention layer.
  detail::VarlenArgs varlen_args(int64_t layer, const at::Tensor& query, const KV& kv,
                                 const StepPlan& step,
                                 KvLayout layout = detail::kDefaultKvLayout) const;

  // ==== Rows: operations between steps. Each makes every StepPlan stale. ====

  /// Empties every row and zeroes every buffer, in place.
  void reset();

  /// Empties the given rows (int64 [n], distinct, any device): each becomes
  /// exactly a row of a freshly built cache. Note [a reset row is a fresh
  /// row]: its key and value slots, the scratch slot included, are zeroed
  /// too, not only its bookkeeping, since a masked NaN or Inf left there
  /// would still reach the next sequence's attention output. Costs one
  /// row-sized fill per buffer (2 per layer), device ops only.
  void reset_rows(const at::Tensor& rows);

  /// Makes row `dst` a copy of row `src` (fork a prefilled prompt).
  void copy_row(int64_t src, int64_t dst);

  /// Beam-search reorder in place: row i becomes old row indices[i], for
  /// i < n = indices.numel(); rows past n are untouched. Repeats are allowed.
  void reorder(const at::Tensor& indices);

  /// Takes back the newest positions of rows 0..b-1 (speculative decoding's
  /// rejected drafts): every position >= new_lengths[r] of row r is dropped,
  /// and seq_lengths[r] becomes new_lengths[r]. The checked forms (below)
  /// refuse new_lengths[r] > seq_lengths[r], naming the row; unchecked
  /// values past it change nothing (seq_lengths[r] becomes the minimum).
  /// new_lengths: int64 [b] on the cache's device, 1 <= b <= max_batch.
  /// Dropped slots are cleared as reset_rows clears them (Note [a reset row
  /// is a fresh row]): keys and values zeroed, slot positions -1, so a NaN
  /// in a rejected draft reaches no later output. Graph-safe (Invariant
  /// [graph-safe step]): a fixed sequence of device ops whose shapes depend
  /// only on b. Like prepare(), it reads the values only when they are in
  /// host memory and check_position_values is on; device-resident values are
  /// routed instead (negative = 0; past seq_lengths = no change). A sliding
  /// ring takes back exactly what Note [ring rollback] allows; the checked
  /// forms refuse a deeper rollback.
  void rollback(const at::Tensor& new_lengths);

  /// Host form of rollback(): new_lengths[r] for rows 0..n-1, always
  /// checked (it reads seq_lengths and slot positions to the host, a sync,
  /// so it is not for a captured step).
  void rollback(const std::vector<int64_t>& new_lengths);

  /// Copies row `row`'s live slots to host tensors (prompt caching; see
  /// RowState, Note [a restored row is the saved row]). Reads the row's
  /// seq_length on the host: between steps only.
  RowState save_row(int64_t row) const;

  /// save_row() of a row whose seq_length the caller knows (`length`, not
  /// read back: no sync) into tensors on `device`. On the cache's own
  /// device it is device copies only (with host offload, copies from the
  /// host-resident store), for a pool of saved rows that restore_row takes
  /// as they are. A CPU cache with check_position_values checks
  /// `length` against the row's; elsewhere a wrong length saves a wrong
  /// state, as a wrong rollback() length would.
  RowState save_row(int64_t row, int64_t length, const at::Device& device) const;

  /// Makes row `row` exactly the saved row: the rest of the row is cleared
  /// as reset_rows clears it (Note [a reset row is a fresh row]), then the
  /// saved slots are copied in. `state` must be on the cache's device
  /// (RowState::to) and match the config (checked before anything is
  /// written); the restore is then device copies whose shapes depend only on
  /// the state, with no host read (graph-safe, Invariant [graph-safe step]).
  void restore_row(const RowState& state, int64_t row);

  /// Makes this cache an independent copy of `other`: every buffer (keys,
  /// values, scales), every slot position and seq_lengths become other's,
  /// copied into this cache's own memory (Invariant [stable addresses]:
  /// nothing is reallocated), so later changes to either are invisible to
  /// the other. `other` must have been built from an equal config (every
  /// field compared, named when it differs). The copy of Python's
  /// copy.deepcopy and of a saved prefix.
  void copy_from(const Cache& other);

  // ==== Inspection: sizes, bytes and the buffers themselves. ====

  /// One past the highest position stored in each row: device int64 [max_batch].
  const at::Tensor& seq_lengths() const { return seq_lengths_; }

  /// Bytes the cache owns (buffers and bookkeeping), on the device and in
  /// host memory together: device_memory_bytes() + host_memory_bytes().
  int64_t memory_bytes() const { return device_memory_bytes() + host_memory_bytes(); }

  /// Bytes on the cache's device: everything but an offloaded cache's
  /// keys and values (host_memory_bytes()).
  int64_t device_memory_bytes() const;

  /// Bytes of host memory (pinned on CUDA): an offloaded cache's keys and
  /// values (CacheConfig::host_offload); 0 otherwise.
  int64_t host_memory_bytes() const;

  const CacheConfig& config() const { return config_; }
  int64_t num_layers() const { return config_.num_layers; }
  const LayerPolicy& layer(int64_t layer) const { return *group_of(layer).policy; }
  int64_t capacity(int64_t layer) const { return group_of(layer).policy->capacity(); }

  /// Whole key buffer of a layer, scratch slot included:
  /// [max_batch, kv_heads, capacity + 1, head_dim]. With host offload, the
  /// host copy (a CPU tensor, pinned when the device is CUDA; read it
  /// after the device work that wrote it, e.g. a stream synchronize).
  const at::Tensor& keys(int64_t layer) const;
  /// Whole value buffer of a layer; see keys().
  const at::Tensor& values(int64_t layer) const;
  /// Per-slot float32 scales of a quantized cache's keys of a layer
  /// ([max_batch, kv_heads, capacity + 1, 1]; a key is codes * scale);
  /// undefined for plain storage.
  const at::Tensor& key_scales(int64_t layer) const;
  /// The values' scales; see key_scales().
  const at::Tensor& value_scales(int64_t layer) const;
  /// The staging buffer a quantized cache's views live in (Note [staging
  /// buffer]); undefined (no tensors) for plain storage.
  const StagingBuffer& staging() const;
  /// The ring of two staging buffers an offloaded cache's views live in
  /// (Note [host offload]); undefined (no tensors) without host offload.
  const detail::OffloadRing& offload_ring() const;
  /// Bytes of the staging buffers (0 for plain storage, the ring's two
  /// with host offload); part of device_memory_bytes().
  int64_t staging_bytes() const;

  /// Position stored in each slot of a layer, -1 = empty: [max_batch, capacity].
  at::Tensor slot_positions(int64_t layer) const {
    const LayerGroup& g = group_of(layer);
    return g.slot_positions.narrow(1, 0, g.policy->capacity());
  }

 protected:
  struct LayerGroup {
    std::shared_ptr<const LayerPolicy> policy;
    at::Tensor slot_positions;  // [max_batch, capacity + 1], int64, -1 = empty
    at::Tensor row_head_base;   // [max_batch, kv_heads, 1], int64
    // int32 [max_batch + 1]: row r's first token in varlen_keys' strided
    // view, r * kv_heads * slots (undefined past int32: varlen refuses it).
    at::Tensor key_starts;
  };

  void check_current(const StepPlan& step) const;
  void check_update(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                    const StepPlan& step) const;
  void check_attend(int64_t layer, const at::Tensor& query, const KV& kv,
                    const StepPlan& step) const;
  AttentionPath resolve_path(int64_t layer, const at::Tensor& query, AttentionPath path) const;
  void check_layer(int64_t layer) const;
  void check_source(const char* name, const at::Tensor& t, int64_t layer) const;
  const LayerGroup& group_of(int64_t layer) const;
  at::Tensor varlen_key_starts(int64_t layer, const KV& kv, const StepPlan& step,
                               KvLayout layout) const;

 private:
  void add_group(LayerType type);
  static at::Tensor newest_wins(const at::Tensor& slots, const at::Tensor& pos, int64_t slots_len);
  void check_position_values(const at::Tensor& cache_position, int64_t attend) const;
  at::Tensor device_rows(const char* name, const at::Tensor& rows, bool allow_duplicates) const;
  void check_row(const char* name, int64_t row) const;
  void check_rollback(const at::Tensor& new_lengths) const;
  void check_rollback_values(const at::Tensor& new_lengths) const;
  void apply_rollback(const at::Tensor& new_lengths);
  void check_prepare(const at::Tensor& cache_position, int64_t live_batch,
                     int64_t attend_len) const;
  void check_same_config(const Cache& other) const;
  bool aliases_bookkeeping(const at::Tensor& t) const;
  void check_mutable(const char* entry_point) const;
  void retire_plan();
  void begin_row_operation();
  void plan_composed(StepPlan& step, const at::Tensor& pos, int64_t attend);
  void advance(StepPlan& step, const at::Tensor& sane, const std::vector<at::Tensor>& slots,
               int64_t attend);
  bool fused_prepare_fits(const StepPlan& step) const;
  void plan_fused(StepPlan& step, const at::Tensor& pos, int64_t attend);
  std::shared_ptr<detail::LazyPlan> lazy_plan(const at::Tensor& sane, int64_t live_batch) const;
  StepPlan::GroupPlan plan_group(const LayerGroup& group, StepPlan& step, const at::Tensor& slots,
                                 int64_t attend, const at::Tensor& flat_index = {}) const;

  CacheConfig config_;
  std::vector<LayerGroup> groups_;
  std::shared_ptr<const std::vector<int64_t>> layer_group_;  // group of each layer
  std::unique_ptr<detail::Storage> storage_;      // the buffers: one object per storage mode
  detail::AdditiveValues mask_values_;            // [] each, in dtype on the device
  at::Tensor arange32_;                           // int32 [max_batch + 1]: 0, 1, 2, ...
  std::weak_ptr<detail::LazyPlan> current_plan_;  // the latest StepPlan's lazy parts
  at::Tensor seq_lengths_;                        // [max_batch], int64
  uint64_t generation_ = 0;
};

/// Bytes a cache built from `config` will own (buffers and bookkeeping),
/// computed without allocating: equals memory_bytes() of such a cache.
/// (Per layer type, not per layer: num_layers may be anything validate()
/// accepts.)
int64_t estimate_memory_bytes(const CacheConfig& config);

/// estimate_memory_bytes() by where the bytes live: `device` equals
/// device_memory_bytes() of such a cache, `host` host_memory_bytes() (an
/// offloaded cache's keys and values, pinned on CUDA).
CacheConfig::Bytes estimate_memory(const CacheConfig& config);

/// Every layer full attention (Llama-style models).
class StaticCache : public Cache {
 public:
  explicit StaticCache(CacheConfig config);

 private:
  static CacheConfig checked(CacheConfig config);
};

/// Full and sliding-window layers in one cache, by CacheConfig::layer_types
/// (Mistral, Gemma 2/3, Qwen2 with mixed layer types).
class HybridCache : public Cache {
 public:
  explicit HybridCache(CacheConfig config) : Cache(std::move(config)) {}
};

}  // namespace statickv

// The bodies: compiled into the library (src/cache.cpp), or here with
// STATICKV_HEADER_ONLY (docs/design.md, "The library's build").
#ifdef STATICKV_HEADER_ONLY
#include <statickv/detail/cache_impl.hpp>
#endif
