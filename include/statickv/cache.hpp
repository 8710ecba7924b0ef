#pragma once
// StaticCache and HybridCache: preallocated, address-stable KV caches.
//
// Ownership: the cache owns one key and one value buffer per layer,
// [max_batch, kv_heads, capacity + 1, head_dim], allocated (zeroed) in the
// constructor and never reallocated or reassigned; the extra slot is the
// scratch slot (layers.hpp). It also owns the bookkeeping, shared by all
// layers of one type (a "group"): slot_positions [max_batch, capacity + 1]
// (-1 = empty; the scratch column is garbage and never read) and one
// seq_lengths [max_batch] for the whole cache.
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

#include <statickv/attention.hpp>
#include <statickv/checks.hpp>
#include <statickv/config.hpp>
#include <statickv/layers.hpp>
#include <statickv/mask.hpp>
#include <statickv/offload.hpp>
#include <statickv/quantize.hpp>
#include <statickv/row_state.hpp>
#include <statickv/staging.hpp>
#include <statickv/step.hpp>
#include <statickv/varlen.hpp>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <atomic>
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace statickv {

namespace detail {

// Reads a 1-D int64 row-index tensor (any device) to host memory and checks
// every value is a row of the cache. Row operations are not step operations,
// so this host read is allowed (see the header note).
inline at::Tensor host_rows(const char* name, const at::Tensor& rows, int64_t max_batch,
                            bool allow_duplicates) {
  check_defined(name, rows);
  check_dtype(name, rows, at::kLong);
  check_dense(name, rows);
  TORCH_CHECK(!rows.is_meta(), name, ": expected a tensor with data (any device but meta) but got ",
              rows.device());
  TORCH_CHECK(rows.dim() == 1, name, ": expected a 1-D tensor but got shape ", rows.sizes());
  TORCH_CHECK(rows.numel() >= 1 && rows.numel() <= max_batch, name,
              ": expected between 1 and max_batch=", max_batch, " entries but got ", rows.numel());
  at::Tensor host = rows.to(at::kCPU).contiguous();
  const int64_t* data = host.data_ptr<int64_t>();
  std::vector<bool> seen(static_cast<size_t>(max_batch), false);
  for (int64_t i = 0; i < host.numel(); ++i) {
    TORCH_CHECK(data[i] >= 0 && data[i] < max_batch, name, "[", i,
                "]: expected a row in [0, max_batch=", max_batch, ") but got ", data[i]);
    TORCH_CHECK(allow_duplicates || !seen[static_cast<size_t>(data[i])], name, "[", i,
                "]: expected distinct rows but got ", data[i], " twice");
    seen[static_cast<size_t>(data[i])] = true;
  }
  return host;
}

// Generations are unique across every cache of the process, so a StepPlan of a
// destroyed cache is never taken for a current StepPlan of a new cache built at
// the same address (its slots would index another config's buffers).
inline uint64_t next_generation() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

/// Points inside prepare() where a test can make it fail (Note [prepare is
/// all or nothing]).
enum class PreparePoint {
  kBeforeBookkeeping,   ///< slots planned, nothing written yet
  kAfterSeqLengths,     ///< seq_lengths advanced
  kAfterSlotPositions,  ///< a layer type's slot_positions written
  kAfterMasks,  ///< the step planned (masks too with eager_masks), generation not yet advanced
};

/// Test-only fault injection: when set, prepare() calls it at each
/// PreparePoint, and whatever it throws propagates as a LibTorch failure
/// would. Process-wide and not synchronized: set it only while no other
/// thread prepares a step. Empty (no cost but a test) in normal use.
inline std::function<void(PreparePoint)>& prepare_fault_hook() {
  static std::function<void(PreparePoint)> hook;
  return hook;
}

inline void prepare_fault_point(PreparePoint point) {
  const auto& hook = prepare_fault_hook();
  if (hook) hook(point);
}

}  // namespace detail

/// The container of layers behind StaticCache and HybridCache. Not copyable
/// and not movable: Steps and CUDA graphs refer to its buffers and to it by
/// address, so its identity must not change. Hold it by value or unique_ptr.
class Cache {
 public:
  explicit Cache(CacheConfig config) : config_(std::move(config)) {
    config_.validate();
    // A "cuda" device without an index becomes the device actually used.
    seq_lengths_ =
        at::zeros({config_.max_batch}, at::TensorOptions().dtype(at::kLong).device(config_.device));
    config_.device = seq_lengths_.device();
    const auto long_opts = at::TensorOptions().dtype(at::kLong).device(config_.device);
    const auto data_opts = at::TensorOptions().dtype(config_.dtype).device(config_.device);
    // One group per layer type present, in order of first appearance.
    std::vector<int64_t> layer_group;
    for (int64_t layer = 0; layer < config_.num_layers; ++layer) {
      const LayerType type = config_.layer_type(layer);
      int64_t g = 0;
      while (g < static_cast<int64_t>(groups_.size()) && groups_[g].policy->type() != type) ++g;
      if (g == static_cast<int64_t>(groups_.size())) {
        LayerGroup group;
        group.policy = make_layer_policy(config_, type);
        const int64_t slots = group.policy->buffer_len();
        group.slot_positions = at::full({config_.max_batch, slots}, -1, long_opts);
        // (row * kv_heads + head) * slots: start of each [row, head] run of
        // slots in a [-1, head_dim] view of a buffer, for per-row writes.
        group.row_head_base = at::arange(config_.max_batch * config_.num_kv_heads, long_opts)
                                  .mul_(slots)
                                  .view({config_.max_batch, config_.num_kv_heads, 1});
        groups_.push_back(std::move(group));
      }
      layer_group.push_back(g);
      add_layer_buffers(groups_[g].policy->buffer_len());
    }
    if (config_.host_offload) {
      std::vector<int64_t> group_slots;
      for (const LayerGroup& group : groups_) group_slots.push_back(group.policy->buffer_len());
      offload_ = detail::OffloadRing(config_, group_slots);
    }
    if (!config_.plain_storage()) {
      staging_ = StagingBuffer(config_.max_batch, config_.num_kv_heads, config_.max_view_slots(),
                               config_.head_dim, data_opts);
    }
    mask_values_ = detail::additive_values(config_.dtype, config_.device);
    arange32_ = at::arange(config_.max_batch + 1, long_opts.dtype(at::kInt));
    layer_group_ = std::make_shared<const std::vector<int64_t>>(std::move(layer_group));
  }

  Cache(const Cache&) = delete;
  Cache& operator=(const Cache&) = delete;
  Cache(Cache&&) = delete;
  Cache& operator=(Cache&&) = delete;
  virtual ~Cache() = default;

  /// Plans one forward pass and advances the bookkeeping.
  ///
  /// cache_position: int64 [q] (every live row at the same positions) or
  /// [live_batch, q] (each row at its own positions); a negative position is
  /// a padded token. It must not share memory with the cache (a view of
  /// seq_lengths() would change under the caller when prepare() advances it;
  /// pass a copy). live_batch: rows 0..live_batch-1 take part.
  /// attend_len: full layers expose slots [0, attend_len) (default max_len),
  /// so attention cost can follow the real length.
  StepPlan prepare(const at::Tensor& cache_position, int64_t live_batch, int64_t attend_len = -1) {
    // All checks first: nothing below may throw on user input.
    check_prepare(cache_position, live_batch, attend_len);
    const int64_t attend = attend_len < 0 ? config_.max_len : attend_len;
    if (config_.check_position_values && cache_position.device().is_cpu()) {
      check_position_values(cache_position, attend);
    }

    StepPlan step;
    step.owner_ = this;
    step.layer_group_ = layer_group_;
    step.positions_ = cache_position;
    step.live_batch_ = live_batch;
    step.query_len_ = cache_position.size(-1);
    step.attend_len_ = attend;
    step.per_row_ = cache_position.dim() == 2;

    // [rows, q], rows = 1 (shared positions) or live_batch. Every token that
    // must not be stored (padding, past max_len) becomes -1: it is written to
    // the scratch slot and attends to nothing. (Note [step op count]: a
    // decode step on a CPU is short enough that every op's fixed cost shows,
    // so each line below does its work in as few ops as it can.)
    const at::Tensor pos = step.per_row_ ? cache_position : cache_position.unsqueeze(0);
    const at::Tensor sane = at::where(pos.lt(config_.max_len), pos, -1).clamp_min_(-1);
    std::vector<at::Tensor> slots;  // per group [rows, q]
    for (const LayerGroup& group : groups_) {
      at::Tensor s = group.policy->slots_of(sane);
      if (step.query_len_ > 1) s = newest_wins(s, sane, group.policy->buffer_len());
      slots.push_back(std::move(s));
    }
    detail::prepare_fault_point(detail::PreparePoint::kBeforeBookkeeping);
    retire_plan();
    advance(step, sane, slots, attend);
    current_plan_ = step.lazy_;
    // Only a step that fully succeeded makes earlier Steps stale.
    generation_ = detail::next_generation();
    step.generation_ = generation_;
    if (config_.host_offload) prefetch(0, step);  // Note [host offload]: overlaps the embedding
    return step;
  }

  /// Writes one layer's new keys and values (one index_copy_ each) and returns
  /// views of the live rows. key/value: [live_batch, kv_heads, q, head_dim].
  KV update(int64_t layer, const at::Tensor& key, const at::Tensor& value, const StepPlan& step) {
    check_update(layer, key, value, step);
    const StepPlan::GroupPlan& planned = step.group(layer);
    const int64_t b = step.live_batch_;
    const auto l = static_cast<size_t>(layer);
    if (!config_.plain_storage()) return update_quantized(layer, key, value, step);
    if (config_.host_offload) return update_offloaded(layer, key, value, step);
    write_slots(keys_[l], flat_keys_[l], key, step, planned);
    write_slots(values_[l], flat_values_[l], value, step, planned);
    return KV{detail::batch_prefix(keys_[l], b, planned.view_len),
              detail::batch_prefix(values_[l], b, planned.view_len)};
  }

  /// Where update(layer, key, value, step) would write, after every check
  /// update() makes; nothing is written. For writers that fuse work into
  /// the write (rotary_update(), rotary.hpp): they take the step's own
  /// slots, so slots have one source of truth (Note [fused rotary write]).
  detail::WriteTarget write_target(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                                   const StepPlan& step) {
    check_update(layer, key, value, step);
    TORCH_CHECK(!config_.host_offload,
                "write_target: expected a cache with CacheConfig.host_offload=false (a fused "
                "write targets the stored buffers, which offload keeps in host memory; use the "
                "plain update()) but got host_offload=true");
    const StepPlan::GroupPlan& planned = step.group(layer);
    const int64_t b = step.live_batch_;
    const auto l = static_cast<size_t>(layer);
    detail::WriteTarget target;
    target.keys = keys_[l];
    target.values = values_[l];
    target.slots = step.per_row_ ? planned.slots : planned.slots.expand({b, step.query_len_});
    target.views = KV{detail::batch_prefix(keys_[l], b, planned.view_len),
                      detail::batch_prefix(values_[l], b, planned.view_len)};
    return target;
  }

  /// Attention of this step's queries over `kv` (what update(layer, ...)
  /// returned for `step`): [live_batch, heads, q, head_dim]. query: [live_batch,
  /// heads, q, head_dim] in the cache dtype, heads a multiple of kv_heads.
  /// kAuto takes the fastest exact path (attention_path(); Note [attention
  /// paths], docs/design.md): on CUDA in fp16/bf16, full layers read only each
  /// row's live keys through FlashAttention's varlen kernel with no mask;
  /// everything else is sdpa with the step's additive mask. Padded queries
  /// get finite outputs (0 on the varlen path).
  at::Tensor attend(int64_t layer, const at::Tensor& query, const KV& kv, const StepPlan& step,
                    AttentionPath path = AttentionPath::kAuto) const {
    check_attend(layer, query, kv, step);
    const AttentionPath chosen = resolve_path(layer, query, path);
    if (chosen == AttentionPath::kMasked) {
      return sdpa_attention(query, kv.keys, kv.values, step.additive_mask(layer));
    }
    return detail::flash_varlen(varlen_args(layer, query, kv, step));
  }

  /// The path attend(layer, query, ..., kAuto) takes for a query like `query`.
  AttentionPath attention_path(int64_t layer, const at::Tensor& query) const {
    check_layer(layer);
    return resolve_path(layer, query, AttentionPath::kAuto);
  }

  /// Whether the varlen path can serve `layer` for `query` (the reasons are
  /// the error attend(..., kVarlen) raises otherwise); nullptr when it can.
  const char* varlen_refusal(int64_t layer, const at::Tensor& query) const {
    check_layer(layer);
    if (!config_.plain_storage()) {
      return "quantized KV storage (the kernel reads plain storage; the staged views take the "
             "masked path)";
    }
    if (config_.host_offload) {
      return "host offload (CacheConfig.host_offload: the staged views take the masked path)";
    }
    if (group_of(layer).policy->window() > 0)
      return "a sliding-window layer (rings take the masked path)";
    if (!config_.device.is_cuda()) return "a cache on the CPU (the kernel is CUDA only)";
    if (query.scalar_type() != at::kHalf && query.scalar_type() != at::kBFloat16) {
      return "a dtype other than Half or BFloat16";
    }
    if (config_.head_dim % 8 != 0 || config_.head_dim > 256) {
      return "a head_dim that is not a multiple of 8 up to 256 (the kernel would pad a copy)";
    }
    if (config_.max_batch * config_.num_kv_heads * group_of(layer).policy->buffer_len() >
        INT32_MAX) {
      return "buffers of more than 2^31 - 1 tokens (int32 offsets)";
    }
    if (!detail::flash_capable(config_.device)) return "a GPU without FlashAttention (sm80+)";
    return nullptr;
  }

  /// The arguments of the varlen path's kernel call for this step and layer
  /// (detail::VarlenArgs), built with device ops only: what attend() passes
  /// to at::_flash_attention_forward. Public so that tests can check the
  /// offsets and layouts on any device; needs a full-attention layer.
  detail::VarlenArgs varlen_args(int64_t layer, const at::Tensor& query, const KV& kv,
                                 const StepPlan& step,
                                 KvLayout layout = detail::kDefaultKvLayout) const {
    check_attend(layer, query, kv, step);
    TORCH_CHECK(group_of(layer).policy->window() == 0,
                "layer: expected a full-attention layer "
                "for the varlen path but got layer ",
                layer, ", a sliding-window layer");
    const detail::VarlenRows& rows = step.varlen_rows(layer);
    detail::VarlenArgs args;
    args.query = detail::varlen_query(query, rows);
    args.keys = detail::varlen_keys(kv.keys, layout);
    args.values = detail::varlen_keys(kv.values, layout);
    args.cum_seq_q = rows.cum_seq_q;
    args.cum_seq_k = detail::varlen_key_starts(kv.keys, layout, arange32_);
    args.seqused_k = rows.seqused_k;
    args.max_q = step.query_len_;
    args.max_k = step.view_len(layer);
    args.causal = step.query_len_ > 1;
    args.order = rows.order;
    args.padded = rows.padded;
    args.batch = step.live_batch_;
    args.query_len = step.query_len_;
    args.layout = layout;
    return args;
  }

  /// Empties every row and zeroes every buffer, in place.
  void reset() {
    check_mutable("reset");
    retire_plan();
    generation_ = detail::next_generation();
    for_each_row_tensor([](at::Tensor& t, int64_t empty) { t.fill_(empty); });
  }

  /// Empties the given rows (int64 [n], distinct, any device): each becomes
  /// exactly a row of a freshly built cache. Note [a reset row is a fresh
  /// row]: its key and value slots, the scratch slot included, are zeroed
  /// too, not only its bookkeeping, since a masked NaN or Inf left there
  /// would still reach the next sequence's attention output. Costs one
  /// row-sized fill per buffer (2 per layer), device ops only.
  void reset_rows(const at::Tensor& rows) {
    check_mutable("reset_rows");
    const at::Tensor index = device_rows("rows", rows, /*allow_duplicates=*/false);
    retire_plan();
    generation_ = detail::next_generation();
    for_each_row_tensor([&](at::Tensor& t, int64_t empty) { t.index_fill_(0, index, empty); });
  }

  /// Makes row `dst` a copy of row `src` (fork a prefilled prompt).
  void copy_row(int64_t src, int64_t dst) {
    check_mutable("copy_row");
    TORCH_CHECK(src >= 0 && src < config_.max_batch,
                "src: expected a row in [0, max_batch=", config_.max_batch, ") but got ", src);
    TORCH_CHECK(dst >= 0 && dst < config_.max_batch,
                "dst: expected a row in [0, max_batch=", config_.max_batch, ") but got ", dst);
    retire_plan();
    generation_ = detail::next_generation();
    if (src == dst) return;
    for_each_row_tensor(
        [&](at::Tensor& t, int64_t) { store_copy(t.select(0, dst), t.select(0, src)); });
  }

  /// Beam-search reorder in place: row i becomes old row indices[i], for
  /// i < n = indices.numel(); rows past n are untouched. Repeats are allowed.
  void reorder(const at::Tensor& indices) {
    check_mutable("reorder");
    const at::Tensor index = device_rows("indices", indices, /*allow_duplicates=*/true);
    retire_plan();
    generation_ = detail::next_generation();
    const int64_t n = index.numel();
    // index_select makes a temporary, so overlapping sources are read before
    // the prefix is overwritten.
    for_each_row_tensor(
        [&](at::Tensor& t, int64_t) { store_copy(t.narrow(0, 0, n), t.index_select(0, index)); });
  }

  /// Takes back the newest positions of rows 0..b-1 (speculative decoding's
  /// rejected drafts): every position >= new_lengths[r] of row r is dropped,
  /// and seq_lengths[r] becomes min(seq_lengths[r], new_lengths[r]).
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
  void rollback(const at::Tensor& new_lengths) {
    check_rollback(new_lengths);
    if (config_.check_position_values && new_lengths.device().is_cpu()) {
      check_rollback_values(new_lengths);
    }
    apply_rollback(new_lengths);
  }

  /// Host form of rollback(): new_lengths[r] for rows 0..n-1, always
  /// checked (it reads seq_lengths and slot positions to the host, a sync,
  /// so it is not for a captured step).
  void rollback(const std::vector<int64_t>& new_lengths) {
    const at::Tensor host = at::tensor(new_lengths, at::TensorOptions().dtype(at::kLong));
    check_rollback(host.to(config_.device));
    check_rollback_values(host);
    apply_rollback(host.to(config_.device));
  }

  /// Copies row `row`'s live slots to host tensors (prompt caching; see
  /// RowState, Note [a restored row is the saved row]). Reads the row's seq_length on the host:
  /// between steps only.
  RowState save_row(int64_t row) const {
    check_plain_rows("save_row");
    TORCH_CHECK(row >= 0 && row < config_.max_batch,
                "row: expected a row in [0, max_batch=", config_.max_batch, ") but got ", row);
    RowState state;
    state.length = seq_lengths_[row].item<int64_t>();
    const at::Device cpu(at::kCPU);
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      const int64_t n = detail::row_state_slots(config_, l, state.length);
      state.types.push_back(config_.layer_type(l));
      state.positions.push_back(
          group_of(l).slot_positions[row].narrow(0, 0, n).to(cpu, at::kLong, false, true));
      state.keys.push_back(keys(l)[row].narrow(1, 0, n).to(cpu, config_.dtype, false, true));
      state.values.push_back(values(l)[row].narrow(1, 0, n).to(cpu, config_.dtype, false, true));
    }
    return state;
  }

  /// Makes row `row` exactly the saved row: the rest of the row is cleared
  /// as reset_rows clears it (Note [a reset row is a fresh row]), then the
  /// saved slots are copied in. `state` must be on the cache's device
  /// (RowState::to) and match the config (checked before anything is
  /// written); the restore is then device copies whose shapes depend only on
  /// the state, with no host read (graph-safe, Invariant [graph-safe step]).
  void restore_row(const RowState& state, int64_t row) {
    check_mutable("restore_row");
    check_plain_rows("restore_row");
    TORCH_CHECK(row >= 0 && row < config_.max_batch,
                "row: expected a row in [0, max_batch=", config_.max_batch, ") but got ", row);
    detail::check_row_state(state, config_);
    retire_plan();
    generation_ = detail::next_generation();
    for_each_row_tensor([&](at::Tensor& t, int64_t empty) { t[row].fill_(empty); });
    std::vector<bool> group_done(groups_.size(), false);
    for (int64_t l = 0; l < config_.num_layers; ++l) {
      const auto i = static_cast<size_t>(l);
      const int64_t n = state.keys[i].size(1);
      store_copy(keys_[i][row].narrow(1, 0, n), state.keys[i]);
      store_copy(values_[i][row].narrow(1, 0, n), state.values[i]);
      const auto g = static_cast<size_t>((*layer_group_)[i]);
      if (group_done[g]) continue;  // one layer type shares its positions
      groups_[g].slot_positions[row].narrow(0, 0, n).copy_(state.positions[i]);
      group_done[g] = true;
    }
    seq_lengths_.narrow(0, row, 1).fill_(state.length);
  }

  /// One past the highest position stored in each row: device int64 [max_batch].
  const at::Tensor& seq_lengths() const { return seq_lengths_; }

  /// Bytes the cache owns (buffers and bookkeeping), on the device and in
  /// host memory together: device_memory_bytes() + host_memory_bytes().
  int64_t memory_bytes() const { return device_memory_bytes() + host_memory_bytes(); }

  /// Bytes on the cache's device: everything but an offloaded cache's
  /// keys and values (host_memory_bytes()).
  int64_t device_memory_bytes() const {
    int64_t total = seq_lengths_.nbytes() + staging_.nbytes() + offload_.nbytes();
    for (const auto& g : groups_) total += g.slot_positions.nbytes() + g.row_head_base.nbytes();
    return total + (config_.host_offload ? 0 : stored_bytes());
  }

  /// Bytes of host memory (pinned on CUDA): an offloaded cache's keys and
  /// values (CacheConfig::host_offload); 0 otherwise.
  int64_t host_memory_bytes() const { return config_.host_offload ? stored_bytes() : 0; }

  const CacheConfig& config() const { return config_; }
  int64_t num_layers() const { return config_.num_layers; }
  const LayerPolicy& layer(int64_t layer) const { return *group_of(layer).policy; }
  int64_t capacity(int64_t layer) const { return group_of(layer).policy->capacity(); }

  /// Whole key buffer of a layer, scratch slot included:
  /// [max_batch, kv_heads, capacity + 1, head_dim]. With host offload, the
  /// host copy (a CPU tensor, pinned when the device is CUDA; read it
  /// after the device work that wrote it, e.g. a stream synchronize).
  const at::Tensor& keys(int64_t layer) const {
    check_layer(layer);
    return (config_.host_offload ? host_keys_ : keys_)[static_cast<size_t>(layer)];
  }
  /// Whole value buffer of a layer; see keys().
  const at::Tensor& values(int64_t layer) const {
    check_layer(layer);
    return (config_.host_offload ? host_values_ : values_)[static_cast<size_t>(layer)];
  }
  /// Per-slot float32 scales of a quantized cache's keys of a layer
  /// ([max_batch, kv_heads, capacity + 1, 1]; a key is codes * scale);
  /// undefined for plain storage.
  const at::Tensor& key_scales(int64_t layer) const {
    check_layer(layer);
    return config_.plain_storage() ? undefined_ : key_scales_[static_cast<size_t>(layer)];
  }
  /// The values' scales; see key_scales().
  const at::Tensor& value_scales(int64_t layer) const {
    check_layer(layer);
    return config_.plain_storage() ? undefined_ : value_scales_[static_cast<size_t>(layer)];
  }
  /// The staging buffer a quantized cache's views live in (Note [staging
  /// buffer]); undefined (no tensors) for plain storage.
  const StagingBuffer& staging() const { return staging_; }
  /// The ring of two staging buffers an offloaded cache's views live in
  /// (Note [host offload]); undefined (no tensors) without host offload.
  const detail::OffloadRing& offload_ring() const { return offload_; }
  /// Bytes of the staging buffers (0 for plain storage, the ring's two
  /// with host offload); part of device_memory_bytes().
  int64_t staging_bytes() const { return staging_.nbytes() + offload_.nbytes(); }

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
  };

  void check_current(const StepPlan& step) const {
    TORCH_CHECK(step.owner_ == this,
                "step: expected a StepPlan made by this cache's prepare() but got ",
                step.owner_ == nullptr ? "a default-constructed one" : "one of another cache");
    TORCH_CHECK(step.generation_ == generation_,
                "step: expected the cache's current step (generation ", generation_,
                ") but got a stale one (generation ", step.generation_,
                "); call prepare() again after reset, row operations or another prepare()");
  }

  // update()'s arguments (and write_target()'s): the current step and
  // keys/values of its shape, none sharing memory with the buffers.
  void check_update(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                    const StepPlan& step) const {
    check_mutable("update");
    check_layer(layer);
    check_current(step);
    const std::vector<int64_t> shape = {step.live_batch_, config_.num_kv_heads, step.query_len_,
                                        config_.head_dim};
    const at::IntArrayRef expected(shape);
    detail::check_tensor("key", key, config_.dtype, config_.device);
    detail::check_tensor("value", value, config_.dtype, config_.device);
    TORCH_CHECK(key.sizes() == expected,
                "key: expected shape [live_batch, kv_heads, q, head_dim] = ", expected, " but got ",
                key.sizes());
    TORCH_CHECK(value.sizes() == expected,
                "value: expected shape [live_batch, kv_heads, q, head_dim] = ", expected,
                " but got ", value.sizes());
    check_source("key", key, layer);
    check_source("value", value, layer);
  }

  // attend()'s arguments: the current step, the views update() returned
  // for this layer, queries of the step's shape.
  void check_attend(int64_t layer, const at::Tensor& query, const KV& kv,
                    const StepPlan& step) const {
    check_layer(layer);
    check_current(step);
    const auto l = static_cast<size_t>(layer);
    const int64_t b = step.live_batch_;
    detail::check_tensor("query", query, config_.dtype, config_.device);
    detail::check_rank("query", query, 4, "[live_batch, heads, q, head_dim]");
    TORCH_CHECK(
        query.size(0) == b && query.size(2) == step.query_len_ && query.size(3) == config_.head_dim,
        "query: expected shape [live_batch, heads, q, head_dim] = [", b, ", heads, ",
        step.query_len_, ", ", config_.head_dim, "] but got ", query.sizes());
    TORCH_CHECK(query.size(1) >= 1 && query.size(1) % config_.num_kv_heads == 0,
                "query: expected heads to be a multiple of kv_heads=", config_.num_kv_heads,
                " but got ", query.size(1));
    const std::vector<int64_t> shape = {b, config_.num_kv_heads, step.view_len(layer),
                                        config_.head_dim};
    check_staged(layer, step);
    const bool plain = config_.plain_storage();
    const bool offload = config_.host_offload;
    const detail::StagedLayout* staged =
        offload ? &offload_.layout(layer, (*layer_group_)[l]) : nullptr;
    const at::Tensor& key_buffer = offload ? staged->keys : plain ? keys_[l] : staging_.keys();
    const at::Tensor& value_buffer = offload ? staged->values
                                     : plain ? values_[l]
                                             : staging_.values();
    for (const auto& [name, view, buffer] :
         {std::make_tuple("kv.keys", kv.keys, key_buffer),
          std::make_tuple("kv.values", kv.values, value_buffer)}) {
      TORCH_CHECK(view.defined() && view.is_alias_of(buffer) &&
                      view.sizes() == at::IntArrayRef(shape) &&
                      view.strides() == buffer.strides() &&
                      view.storage_offset() == buffer.storage_offset(),
                  name, ": expected the view update(", layer, ", ...) returned for this step, ",
                  at::IntArrayRef(shape), " over layer ", layer, "'s buffer, but got ",
                  detail::shape_of(view),
                  view.defined() && !view.is_alias_of(buffer) ? " not a view of that buffer" : "");
    }
  }

  AttentionPath resolve_path(int64_t layer, const at::Tensor& query, AttentionPath path) const {
    if (path == AttentionPath::kMasked) return path;
    const char* refusal = varlen_refusal(layer, query);
    TORCH_CHECK(path != AttentionPath::kVarlen || refusal == nullptr,
                "path: expected a layer, device and dtype the varlen path serves but got ",
                refusal == nullptr ? "" : refusal, " (layer ", layer, ")");
    return refusal == nullptr ? AttentionPath::kVarlen : AttentionPath::kMasked;
  }

  void check_layer(int64_t layer) const {
    TORCH_CHECK(layer >= 0 && layer < config_.num_layers, "layer: expected an index in [0, ",
                config_.num_layers, ") but got ", layer);
  }

  // A source that shares memory with the buffer it is written into would be
  // read and written by one index_copy_ (a race on a GPU, and the later
  // write sees the earlier one on a CPU). A source that requires grad would
  // chain every later write into one autograd graph that holds every step's
  // activations: memory that grows for the life of the cache.
  void check_source(const char* name, const at::Tensor& t, int64_t layer) const {
    const auto& k = keys_[static_cast<size_t>(layer)];
    const auto& v = values_[static_cast<size_t>(layer)];
    TORCH_CHECK(!t.is_alias_of(k) && !t.is_alias_of(v), name,
                ": expected a tensor that does not share memory with the cache's buffers of layer ",
                layer, " but got a view of them");
    TORCH_CHECK(!(t.requires_grad() && c10::GradMode::is_enabled()), name,
                ": expected a tensor that does not require grad (run decode under "
                "at::NoGradGuard or c10::InferenceMode) but got requires_grad=true");
  }

  const LayerGroup& group_of(int64_t layer) const {
    check_layer(layer);
    return groups_[static_cast<size_t>((*layer_group_)[static_cast<size_t>(layer)])];
  }

 private:
  // Row arguments checked on the host (detail::host_rows), then on the
  // cache's device.
  at::Tensor device_rows(const char* name, const at::Tensor& rows, bool allow_duplicates) const {
    return detail::host_rows(name, rows, config_.max_batch, allow_duplicates).to(config_.device);
  }

  // Applies a row operation to every tensor the cache keeps per row: each
  // layer's keys and values, each layer type's slot positions, and
  // seq_lengths, with the value an empty row holds in it (0 for buffers and
  // lengths, -1 for slot positions).
  template <typename Fn>
  void for_each_row_tensor(Fn&& fn) {
    for_each_buffer([&](at::Tensor& t) { fn(t, 0); });
    for (auto& g : groups_) fn(g.slot_positions, -1);
    fn(seq_lengths_, 0);
  }

  void check_rollback(const at::Tensor& new_lengths) const {
    check_mutable("rollback");
    detail::check_tensor("new_lengths", new_lengths, at::kLong, config_.device);
    detail::check_rank("new_lengths", new_lengths, 1, "[live_batch]");
    TORCH_CHECK(new_lengths.numel() >= 1 && new_lengths.numel() <= config_.max_batch,
                "new_lengths: expected between 1 and max_batch=", config_.max_batch,
                " entries but got ", new_lengths.numel());
  }

  // Host-resident new lengths only: each in [0, seq_length], and, for a
  // ring that can wrap, Note [ring rollback]: the window - 1 positions
  // before the new length (the next query's window) must still be stored.
  void check_rollback_values(const at::Tensor& new_lengths) const {
    const at::Tensor host = new_lengths.contiguous();
    const at::Tensor seq = seq_lengths_.to(at::kCPU);
    const int64_t* v = host.data_ptr<int64_t>();
    for (int64_t r = 0; r < host.numel(); ++r) {
      const int64_t len = seq.data_ptr<int64_t>()[r];
      TORCH_CHECK(v[r] >= 0 && v[r] <= len, "new_lengths[", r,
                  "]: expected a length in [0, seq_length=", len, "] but got ", v[r]);
    }
    for (const LayerGroup& g : groups_) {
      const int64_t window = g.policy->window();
      const int64_t cap = g.policy->capacity();
      if (window == 0 || cap >= config_.max_len) continue;  // never overwrites
      const at::Tensor stored = g.slot_positions.to(at::kCPU);
      auto acc = stored.accessor<int64_t, 2>();
      for (int64_t r = 0; r < host.numel(); ++r) {
        for (int64_t p = std::max<int64_t>(0, v[r] - window + 1); p < v[r]; ++p) {
          TORCH_CHECK(acc[r][p % cap] == p, "new_lengths[", r, "]: expected a rollback a ",
                      "sliding ring of capacity ", cap, " can take back exactly (at most ",
                      "max_chunk=", config_.effective_max_chunk(), " positions past the newest ",
                      "ever written; Note [ring rollback]) but got ", v[r], ", whose window ",
                      "needs position ", p, ", already overwritten");
        }
      }
    }
  }

  // Note [ring rollback]: drops every slot whose position is >= the row's
  // new length, in every layer type, with masked fills (no host read). A
  // full layer loses nothing else; a ring of window + max_chunk - 1 slots
  // lost only positions outside every later query's window as long as the
  // new length is at most max_chunk below the newest position ever written
  // (any depth when the ring holds max_len), which check_rollback_values
  // tests as "the next query's window is still stored".
  void apply_rollback(const at::Tensor& new_lengths) {
    const int64_t b = new_lengths.numel();
    const at::Tensor keep = new_lengths.clamp_min(0).unsqueeze(1);  // [b, 1]
    std::vector<at::Tensor> drop;                                   // per group [b, slots]
    for (const LayerGroup& g : groups_) drop.push_back(g.slot_positions.narrow(0, 0, b).ge(keep));
    retire_plan();  // Note [lazy masks]: a held plan's masks describe the state before
    generation_ = detail::next_generation();
    size_t i = 0;  // for_each_buffer: per layer, keys then values (then their scales)
    const size_t per_layer = buffers_per_layer();
    for_each_buffer([&](at::Tensor& t) {
      const at::Tensor& d = drop[static_cast<size_t>((*layer_group_)[i++ / per_layer])];
      t.narrow(0, 0, b).masked_fill_(d.view({b, 1, d.size(1), 1}), 0);
    });
    for (size_t g = 0; g < groups_.size(); ++g) {
      groups_[g].slot_positions.narrow(0, 0, b).masked_fill_(drop[g], -1);
    }
    at::Tensor seq = seq_lengths_.narrow(0, 0, b);
    at::minimum_out(seq, seq, keep.squeeze(1));
  }

  // Every check of prepare()'s arguments, before anything is computed.
  void check_prepare(const at::Tensor& cache_position, int64_t live_batch,
                     int64_t attend_len) const {
    check_mutable("prepare");
    const int64_t max_batch = config_.max_batch;
    TORCH_CHECK(live_batch >= 1 && live_batch <= max_batch,
                "live_batch: expected a value in [1, max_batch=", max_batch, "] but got ",
                live_batch);
    detail::check_tensor("cache_position", cache_position, at::kLong, config_.device);
    TORCH_CHECK(cache_position.dim() == 1 || cache_position.dim() == 2,
                "cache_position: expected shape [q] or [live_batch, q] but got ",
                cache_position.sizes());
    TORCH_CHECK(cache_position.dim() == 1 || cache_position.size(0) == live_batch,
                "cache_position: expected ", live_batch, " rows (live_batch) but got shape ",
                cache_position.sizes());
    const int64_t q = cache_position.size(-1);
    TORCH_CHECK(q >= 1 && q <= config_.effective_max_chunk(),
                "cache_position: expected between 1 and max_chunk=", config_.effective_max_chunk(),
                " positions per row but got ", q);
    TORCH_CHECK(attend_len == -1 || (attend_len >= 1 && attend_len <= config_.max_len),
                "attend_len: expected -1 (max_len) or a value in [1, max_len=", config_.max_len,
                "] but got ", attend_len);
    TORCH_CHECK(!aliases_bookkeeping(cache_position),
                "cache_position: expected a tensor that does not share memory with the cache "
                "but got a view of its bookkeeping (seq_lengths() or slot_positions()), which "
                "prepare() advances in place, so the positions would change under the caller; "
                "pass a copy, e.g. seq_lengths().narrow(0, 0, b).view({b, 1}).clone()");
  }

  bool aliases_bookkeeping(const at::Tensor& t) const {
    if (t.is_alias_of(seq_lengths_)) return true;
    for (const LayerGroup& g : groups_) {
      if (t.is_alias_of(g.slot_positions)) return true;
    }
    return false;
  }

  // A cache built under c10::InferenceMode holds inference tensors, which
  // LibTorch refuses to modify outside it; say so before anything runs
  // instead of failing halfway through an entry point.
  void check_mutable(const char* entry_point) const {
    TORCH_CHECK(!seq_lengths_.is_inference() || c10::InferenceMode::is_enabled(), entry_point,
                ": expected c10::InferenceMode to be on, since this cache was built under it "
                "(its buffers are inference tensors, which LibTorch only modifies in "
                "InferenceMode), but it is off; call every cache operation under "
                "c10::InferenceMode, or build the cache outside it");
  }

  // Note [lazy masks]: before the bookkeeping changes, a still-held latest
  // StepPlan builds the masks it has not built yet, from the state they
  // describe; a dropped one costs nothing.
  void retire_plan() {
    if (const std::shared_ptr<detail::LazyPlan> plan = current_plan_.lock()) plan->materialize();
    current_plan_.reset();
    staging_.release();  // Note [staging buffer]: staged views end with their step
    if (offload_.defined()) offload_.release();
  }

  // Note [prepare is all or nothing]: prepare() writes seq_lengths and each
  // layer type's slot_positions in place, then makes masks. If anything
  // throws after its checks (LibTorch refusing an op, an allocation failing,
  // a test's fault hook), the written bookkeeping is restored from values
  // saved just before each write (b entries of seq_lengths; the [rows, q]
  // slot positions about to be overwritten) and the generation is not
  // advanced, so the cache and every earlier StepPlan are as they were. Saving
  // costs two small ops per step (a clone and one gather per layer type).
  void advance(StepPlan& step, const at::Tensor& sane, const std::vector<at::Tensor>& slots,
               int64_t attend) {
    const int64_t b = step.live_batch_;
    at::Tensor seq = seq_lengths_.narrow(0, 0, b);
    const at::Tensor old_seq = seq.clone();
    std::vector<std::pair<at::Tensor, at::Tensor>> written;  // (slots, old values) per group
    try {
      at::maximum_out(seq, seq, sane.amax(1).add_(1));
      detail::prepare_fault_point(detail::PreparePoint::kAfterSeqLengths);
      for (size_t g = 0; g < groups_.size(); ++g) {
        const bool shared = sane.size(0) != b;  // [1, q] positions for every row
        const at::Tensor index = shared ? slots[g].expand({b, step.query_len_}) : slots[g];
        at::Tensor rows_pos = groups_[g].slot_positions.narrow(0, 0, b);
        written.emplace_back(index, rows_pos.gather(1, index));
        rows_pos.scatter_(1, index, shared ? sane.expand({b, step.query_len_}) : sane);
        detail::prepare_fault_point(detail::PreparePoint::kAfterSlotPositions);
      }
      step.lazy_ = std::make_shared<detail::LazyPlan>();
      step.lazy_->sane = sane;
      step.lazy_->live_batch = b;
      step.lazy_->values = mask_values_;
      step.lazy_->arange32 = arange32_;
      for (size_t g = 0; g < groups_.size(); ++g) {
        step.groups_.push_back(plan_group(groups_[g], step, slots[g], attend));
      }
      // Note [lazy masks]: masks are built on first use unless asked for here.
      if (config_.eager_masks) step.lazy_->materialize();
      detail::prepare_fault_point(detail::PreparePoint::kAfterMasks);
    } catch (...) {
      for (size_t g = written.size(); g-- > 0;) {
        groups_[g].slot_positions.narrow(0, 0, b).scatter_(1, written[g].first, written[g].second);
      }
      seq.copy_(old_seq);
      throw;
    }
  }

  // One layer type's part of a step: the flat write index for per-row
  // positions, and what its lazily built masks need (Note [lazy masks]).
  StepPlan::GroupPlan plan_group(const LayerGroup& group, StepPlan& step, const at::Tensor& slots,
                                 int64_t attend) const {
    const LayerPolicy& policy = *group.policy;
    const int64_t b = step.live_batch_;
    StepPlan::GroupPlan planned;
    planned.view_len = policy.view_len(attend);
    detail::LazyGroup lazy;
    lazy.slot_positions = group.slot_positions;
    lazy.view_len = planned.view_len;
    lazy.window = policy.window();
    step.lazy_->groups.push_back(std::move(lazy));
    if (step.per_row_) {
      planned.slots = slots;
      planned.flat_index = group.row_head_base.narrow(0, 0, b).add(slots.unsqueeze(1)).view(-1);
    } else {
      planned.slots = slots.squeeze(0);
    }
    return planned;
  }

  // Note [newest wins]: two tokens of one row may map to one slot in a step
  // (a ring chunk longer than the ring's spare room, or a repeated position).
  // Writes with duplicate indices race on a GPU, so only the newest position
  // of each slot keeps it (ties: the later token) and the others are sent to
  // the scratch slot. Keys position * q + token order tokens; the per-slot
  // maximum is found with one scatter_reduce, so no host sync is needed.
  static at::Tensor newest_wins(const at::Tensor& slots, const at::Tensor& pos, int64_t slots_len) {
    const int64_t q = pos.size(1);
    const at::Tensor order = at::arange(q, pos.options()).unsqueeze(0);
    const at::Tensor key = at::where(pos.ge(0), pos.mul(q).add_(order), -1);
    const at::Tensor newest = at::full({pos.size(0), slots_len}, -1, pos.options())
                                  .scatter_reduce_(1, slots, key, "amax", /*include_self=*/true);
    return at::where(newest.gather(1, slots).eq(key), slots, slots_len - 1);
  }

  // Only for host-resident positions: rejects values that cannot be stored
  // or seen, naming the first offending entry.
  void check_position_values(const at::Tensor& cache_position, int64_t attend) const {
    const at::Tensor pos = cache_position.dim() == 1 ? cache_position.unsqueeze(0).contiguous()
                                                     : cache_position.contiguous();
    const bool has_full = config_.has_type(LayerType::kFull);
    const bool has_sliding = config_.has_type(LayerType::kSliding);
    const int64_t limit = has_full ? attend : config_.max_len;
    auto acc = pos.accessor<int64_t, 2>();
    for (int64_t r = 0; r < pos.size(0); ++r) {
      int64_t lo = INT64_MAX;
      int64_t hi = -1;
      for (int64_t t = 0; t < pos.size(1); ++t) {
        const int64_t p = acc[r][t];
        if (p < 0) continue;  // padding
        TORCH_CHECK(p < limit, "cache_position[", r, ", ", t, "]: expected a position < ",
                    has_full && limit < config_.max_len ? "attend_len=" : "max_len=", limit,
                    " but got ", p);
        lo = std::min(lo, p);
        hi = std::max(hi, p);
      }
      if (has_sliding && hi >= 0) {
        TORCH_CHECK(hi - lo < config_.effective_max_chunk(), "cache_position[", r,
                    "]: expected the row's positions to span at most max_chunk=",
                    config_.effective_max_chunk(), " (sliding layers) but got ", lo, "..", hi);
      }
    }
  }

  // One layer's buffers: keys and values [max_batch, kv_heads, slots,
  // head_dim] in the storage dtype (zeroed; float8 allocated as its uint8
  // bits, which every write and row operation goes through, LibTorch having
  // no float8 index_copy_ or index_fill_ on the CPU), their [-1, head_dim]
  // aliases for per-row writes, and for quantized storage the scales
  // [max_batch, kv_heads, slots, 1] with their [-1, 1] aliases.
  void add_layer_buffers(int64_t slots) {
    const std::vector<int64_t> shape = {config_.max_batch, config_.num_kv_heads, slots,
                                        config_.head_dim};
    const bool fp8 = config_.kv_storage == KvStorage::kFp8E4m3;
    const auto opts =
        at::TensorOptions().dtype(fp8 ? at::kByte : config_.storage_dtype()).device(config_.device);
    for (bool is_key : {true, false}) {
      at::Tensor raw;
      if (config_.host_offload) {  // Note [host offload]: device ops write the store
        detail::HostBuffer buffer = detail::host_buffer(shape, config_.dtype, config_.device);
        (is_key ? host_keys_ : host_values_).push_back(buffer.host);
        raw = buffer.store;
      } else {
        raw = at::zeros(shape, opts);
      }
      (is_key ? keys_ : values_).push_back(fp8 ? raw.view(at::kFloat8_e4m3fn) : raw);
      (is_key ? write_keys_ : write_values_).push_back(raw);
      (is_key ? flat_keys_ : flat_values_).push_back(raw.view({-1, config_.head_dim}));
      if (config_.plain_storage()) continue;
      at::Tensor scale = at::zeros({shape[0], shape[1], slots, 1}, opts.dtype(at::kFloat));
      (is_key ? flat_key_scales_ : flat_value_scales_).push_back(scale.view({-1, 1}));
      (is_key ? key_scales_ : value_scales_).push_back(std::move(scale));
    }
  }

  // One index_copy_ of src into buffer (or its flat alias, for per-row
  // positions) at the step's slots of the layer type.
  void write_slots(const at::Tensor& buffer, const at::Tensor& flat, const at::Tensor& src,
                   const StepPlan& step, const StepPlan::GroupPlan& planned) {
    const int64_t b = step.live_batch_;
    if (step.per_row_) {
      flat.index_copy_(0, planned.flat_index, src.reshape({-1, src.size(-1)}));
    } else if (b == config_.max_batch) {
      buffer.index_copy_(2, planned.slots, src);
    } else {
      detail::batch_prefix(buffer, b, buffer.size(2)).index_copy_(2, planned.slots, src);
    }
  }

  // Note [quantized storage]: codes and scales are written through the same
  // slots a plain cache writes (padding to the scratch slot included), then
  // the layer's view is dequantized into the shared staging buffer (Note
  // [staging buffer]), valid until the next layer's update().
  KV update_quantized(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                      const StepPlan& step) {
    const StepPlan::GroupPlan& planned = step.group(layer);
    const auto l = static_cast<size_t>(layer);
    const auto [key_codes, key_scale] = detail::quantize(key, config_.kv_storage);
    const auto [value_codes, value_scale] = detail::quantize(value, config_.kv_storage);
    write_slots(write_keys_[l], flat_keys_[l], key_codes, step, planned);
    write_slots(key_scales_[l], flat_key_scales_[l], key_scale, step, planned);
    write_slots(write_values_[l], flat_values_[l], value_codes, step, planned);
    write_slots(value_scales_[l], flat_value_scales_[l], value_scale, step, planned);
    const int64_t b = step.live_batch_;
    const int64_t n = planned.view_len;
    auto [keys, values] = staging_.stage(layer, step.generation_, b, n);
    detail::dequantize_into(keys, detail::batch_prefix(keys_[l], b, n),
                            detail::batch_prefix(key_scales_[l], b, n));
    detail::dequantize_into(values, detail::batch_prefix(values_[l], b, n),
                            detail::batch_prefix(value_scales_[l], b, n));
    return KV{keys, values};
  }

  // Note [host offload]: the layer's attended range is in its ring slot
  // (prefetched by the previous layer's update() or prepare(); issued here
  // if not), the step's keys and values go into the staging buffer and,
  // with the same index, into the host copy; then the next layer's copy-in
  // is issued, to run while this layer computes.
  KV update_offloaded(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                      const StepPlan& step) {
    const StepPlan::GroupPlan& planned = step.group(layer);
    const auto l = static_cast<size_t>(layer);
    if (!offload_.holds(layer, step.generation_)) prefetch(layer, step);
    offload_.acquire(layer);
    const detail::StagedLayout& staged = offload_.layout(layer, (*layer_group_)[l]);
    write_slots(staged.keys, staged.flat_keys, key, step, planned);
    write_slots(staged.values, staged.flat_values, value, step, planned);
    write_slots(keys_[l], flat_keys_[l], key, step, planned);
    write_slots(values_[l], flat_values_[l], value, step, planned);
    if (layer + 1 < config_.num_layers) prefetch(layer + 1, step);
    const int64_t b = step.live_batch_;
    return KV{detail::batch_prefix(staged.keys, b, planned.view_len),
              detail::batch_prefix(staged.values, b, planned.view_len)};
  }

  // Issues layer `layer`'s copy-in for `step`: its live rows and view_len
  // slots (Note [host offload]).
  void prefetch(int64_t layer, const StepPlan& step) {
    const auto l = static_cast<size_t>(layer);
    offload_.prefetch(layer, (*layer_group_)[l], step.generation_, step.live_batch_,
                      step.group(layer).view_len, host_keys_[l], host_values_[l]);
  }

  // Under host offload the store is host memory that device ops reach
  // through a mapped pointer, which a memcpy must not be given (its
  // pointer is not device memory): row operations copy with a kernel
  // (index_copy_) there, on the CPU too, so tests run that path.
  // (A 0-dim row of seq_lengths is bookkeeping, in device memory.)
  void store_copy(at::Tensor dst, const at::Tensor& src) const {
    if (!config_.host_offload || dst.dim() == 0) {
      dst.copy_(src);
      return;
    }
    const at::Tensor all =
        at::arange(dst.size(0), at::TensorOptions().dtype(at::kLong).device(dst.device()));
    dst.index_copy_(0, all, src);
  }

  // Bytes of every layer's keys and values (and scales): device or host.
  int64_t stored_bytes() const {
    int64_t total = 0;
    for (const auto* list : {&keys_, &values_, &key_scales_, &value_scales_}) {
      for (const auto& t : *list) total += t.nbytes();
    }
    return total;
  }

  // Every per-row buffer a row operation writes: per layer, the keys and
  // values as written (float8 through its uint8 bits), then for quantized
  // storage their scales. All hold 0 in an empty row.
  template <typename Fn>
  void for_each_buffer(Fn&& fn) {
    for (size_t l = 0; l < keys_.size(); ++l) {
      fn(write_keys_[l]);
      fn(write_values_[l]);
      if (config_.plain_storage()) continue;
      fn(key_scales_[l]);
      fn(value_scales_[l]);
    }
  }
  size_t buffers_per_layer() const { return config_.plain_storage() ? 2 : 4; }

  // Note [staging buffer]: a quantized layer's views live in the shared
  // staging buffer, an offloaded one's in its ring slot (Note [host
  // offload]), only until the next layer's update(); attend() refuses views
  // another update() has overwritten since.
  void check_staged(int64_t layer, const StepPlan& step) const {
    const bool offload = config_.host_offload;
    if (!offload && config_.plain_storage()) return;
    // Quantized: the one staging buffer; offloaded: the layer's ring slot.
    const bool current =
        offload ? offload_.holds(layer, step.generation_) : staging_.holds(layer, step.generation_);
    const int64_t holder = offload ? offload_.holder(layer) : staging_.holder();
    TORCH_CHECK(current, "kv: expected the views update(", layer,
                ", ...) returned for this step, still in the staging buffer, but the staging "
                "buffer now holds ",
                holder < 0 ? std::string("nothing current") : "layer " + std::to_string(holder),
                " (",
                offload ? std::string("host_offload")
                        : "kv_storage=" + std::string(to_string(config_.kv_storage)),
                ": a layer's views are valid until the next layer's update(); Note [",
                offload ? "host offload" : "staging buffer", "], docs/design.md)");
  }

  // Row save/restore copies buffers in the compute dtype (RowState); a
  // quantized row would need its codes and scales saved as they are.
  void check_plain_rows(const char* entry_point) const {
    TORCH_CHECK(config_.plain_storage(), entry_point,
                ": expected a cache with CacheConfig.kv_storage=compute (row save/restore "
                "supports plain storage only) but got kv_storage=",
                config_.kv_storage);
  }

  CacheConfig config_;
  std::vector<LayerGroup> groups_;
  std::shared_ptr<const std::vector<int64_t>> layer_group_;  // group of each layer
  std::vector<at::Tensor> keys_;    // per layer [max_batch, kv_heads, capacity + 1, head_dim]
  std::vector<at::Tensor> values_;  // per layer, same shape
  std::vector<at::Tensor> write_keys_, write_values_;  // per layer, as written (fp8: uint8 bits)
  std::vector<at::Tensor> flat_keys_, flat_values_;    // per layer, [-1, head_dim] aliases
  std::vector<at::Tensor> key_scales_, value_scales_;  // quantized: [max_batch, kv_heads, slots, 1]
  std::vector<at::Tensor> flat_key_scales_, flat_value_scales_;  // quantized: [-1, 1] aliases
  StagingBuffer staging_;                                        // quantized: Note [staging buffer]
  std::vector<at::Tensor> host_keys_, host_values_;  // offload: per layer, the CPU tensors
  detail::OffloadRing offload_;                      // offload: Note [host offload]
  at::Tensor undefined_;
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
inline int64_t estimate_memory_bytes(const CacheConfig& config) {
  config.validate();  // rejects a config whose bytes overflow
  bool overflow = false;
  return config.owned_bytes(&overflow);
}

/// estimate_memory_bytes() by where the bytes live: `device` equals
/// device_memory_bytes() of such a cache, `host` host_memory_bytes() (an
/// offloaded cache's keys and values, pinned on CUDA).
inline CacheConfig::Bytes estimate_memory(const CacheConfig& config) {
  config.validate();
  bool overflow = false;
  return config.owned(&overflow);
}

/// The name Cache had before 0.2; kept so existing code compiles.
using CacheBase = Cache;

/// Every layer full attention (Llama-style models).
class StaticCache : public Cache {
 public:
  explicit StaticCache(CacheConfig config) : Cache(checked(std::move(config))) {}

 private:
  static CacheConfig checked(CacheConfig config) {
    for (size_t i = 0; i < config.layer_types.size(); ++i) {
      TORCH_CHECK(config.layer_types[i] == LayerType::kFull,
                  "StaticCache: CacheConfig.layer_types[", i, "]: expected full but got ",
                  config.layer_types[i], " (use HybridCache for sliding layers)");
    }
    return config;
  }
};

/// Full and sliding-window layers in one cache, by CacheConfig::layer_types
/// (Mistral, Gemma 2/3, Qwen2 with mixed layer types).
class HybridCache : public Cache {
 public:
  explicit HybridCache(CacheConfig config) : Cache(std::move(config)) {}
};

}  // namespace statickv
