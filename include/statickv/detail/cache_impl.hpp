#pragma once
// The bodies of Cache, StaticCache and the memory estimates (cache.hpp
// declares them). Inline, so the library stays header-mostly: every
// consumer (the fuzzers' instrumented builds, the Python extension, a
// downstream project) compiles them as it compiles the declarations
// (docs/design.md, "The library's build"). Included by cache.hpp only.

#include <statickv/cache.hpp>
#include <statickv/detail/checks.hpp>
#include <statickv/detail/make_storage.hpp>
#include <statickv/detail/offload.hpp>
#include <statickv/detail/prepare_fault.hpp>
#include <statickv/detail/rows.hpp>
#include <statickv/detail/storage.hpp>
#include <statickv/mask.hpp>

#include <ATen/ATen.h>
#include <c10/core/GradMode.h>
#include <c10/core/InferenceMode.h>

#include <algorithm>
#include <cstdint>
#include <string>
#include <tuple>
#include <utility>
#include <vector>

namespace statickv {

// ---------------------------------------------------------------- building

inline Cache::Cache(CacheConfig config) : config_(std::move(config)) {
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

inline Cache::~Cache() = default;

// A layer type's bookkeeping: its policy, its slot positions (all empty),
// and (row * kv_heads + head) * slots, the start of each [row, head] run of
// slots in a [-1, head_dim] view of a buffer, for per-row writes.
inline void Cache::add_group(LayerType type) {
  const auto long_opts = at::TensorOptions().dtype(at::kLong).device(config_.device);
  LayerGroup group;
  group.policy = make_layer_policy(config_, type);
  const int64_t slots = group.policy->buffer_len();
  group.slot_positions = at::full({config_.max_batch, slots}, -1, long_opts);
  group.row_head_base = at::arange(config_.max_batch * config_.num_kv_heads, long_opts)
                            .mul_(slots)
                            .view({config_.max_batch, config_.num_kv_heads, 1});
  groups_.push_back(std::move(group));
}

// ---------------------------------------------------------------- the step

inline StepPlan Cache::prepare(const at::Tensor& cache_position, int64_t live_batch,
                               int64_t attend_len) {
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
  storage_->begin_step(step);  // Note [host offload]: layer 0's copy-in overlaps the embedding
  return step;
}

inline KV Cache::update(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                        const StepPlan& step) {
  check_update(layer, key, value, step);
  return storage_->write(layer, key, value, step);
}

inline detail::WriteTarget Cache::write_target(int64_t layer, const at::Tensor& key,
                                               const at::Tensor& value, const StepPlan& step) {
  check_update(layer, key, value, step);
  storage_->check_write_target();
  const int64_t b = step.live_batch_;
  const StepPlan::GroupPlan& planned = step.group(layer);
  detail::WriteTarget target;
  target.keys = storage_->stored_keys(layer);
  target.values = storage_->stored_values(layer);
  target.slots = step.per_row_ ? planned.slots : planned.slots.expand({b, step.query_len_});
  target.views = KV{detail::batch_prefix(target.keys, b, planned.view_len),
                    detail::batch_prefix(target.values, b, planned.view_len)};
  return target;
}

inline at::Tensor Cache::attend(int64_t layer, const at::Tensor& query, const KV& kv,
                                const StepPlan& step, AttentionPath path) const {
  check_attend(layer, query, kv, step);
  const AttentionPath chosen = resolve_path(layer, query, path);
  if (chosen == AttentionPath::kMasked) {
    return sdpa_attention(query, kv.keys, kv.values, step.additive_mask(layer));
  }
  return detail::flash_varlen(varlen_args(layer, query, kv, step));
}

inline AttentionPath Cache::attention_path(int64_t layer, const at::Tensor& query) const {
  check_layer(layer);
  return resolve_path(layer, query, AttentionPath::kAuto);
}

inline const char* Cache::varlen_refusal(int64_t layer, const at::Tensor& query) const {
  check_layer(layer);
  if (const char* storage = storage_->varlen_refusal()) return storage;
  if (group_of(layer).policy->window() > 0)
    return "a sliding-window layer (rings take the masked path)";
  if (!config_.device.is_cuda()) return "a cache on the CPU (the kernel is CUDA only)";
  if (query.scalar_type() != at::kHalf && query.scalar_type() != at::kBFloat16) {
    return "a dtype other than Half or BFloat16";
  }
  if (config_.head_dim % 8 != 0 || config_.head_dim > 256) {
    return "a head_dim that is not a multiple of 8 up to 256 (the kernel would pad a copy)";
  }
  if (config_.max_batch * config_.num_kv_heads * group_of(layer).policy->buffer_len() > INT32_MAX) {
    return "buffers of more than 2^31 - 1 tokens (int32 offsets)";
  }
  if (!detail::flash_capable(config_.device)) return "a GPU without FlashAttention (sm80+)";
  return nullptr;
}

inline detail::VarlenArgs Cache::varlen_args(int64_t layer, const at::Tensor& query, const KV& kv,
                                             const StepPlan& step, KvLayout layout) const {
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

// Note [newest wins]: two tokens of one row may map to one slot in a step
// (a ring chunk longer than the ring's spare room, or a repeated position).
// Writes with duplicate indices race on a GPU, so only the newest position
// of each slot keeps it (ties: the later token) and the others are sent to
// the scratch slot. Keys position * q + token order tokens; the per-slot
// maximum is found with one scatter_reduce, so no host sync is needed.
inline at::Tensor Cache::newest_wins(const at::Tensor& slots, const at::Tensor& pos,
                                     int64_t slots_len) {
  const int64_t q = pos.size(1);
  const at::Tensor order = at::arange(q, pos.options()).unsqueeze(0);
  const at::Tensor key = at::where(pos.ge(0), pos.mul(q).add_(order), -1);
  const at::Tensor newest = at::full({pos.size(0), slots_len}, -1, pos.options())
                                .scatter_reduce_(1, slots, key, "amax", /*include_self=*/true);
  return at::where(newest.gather(1, slots).eq(key), slots, slots_len - 1);
}

// Note [prepare is all or nothing]: prepare() writes seq_lengths and each
// layer type's slot_positions in place, then makes masks. If anything
// throws after its checks (LibTorch refusing an op, an allocation failing,
// a test's fault hook), the written bookkeeping is restored from values
// saved just before each write (b entries of seq_lengths; the [rows, q]
// slot positions about to be overwritten) and the generation is not
// advanced, so the cache and every earlier StepPlan are as they were. Saving
// costs two small ops per step (a clone and one gather per layer type).
inline void Cache::advance(StepPlan& step, const at::Tensor& sane,
                           const std::vector<at::Tensor>& slots, int64_t attend) {
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
inline StepPlan::GroupPlan Cache::plan_group(const LayerGroup& group, StepPlan& step,
                                             const at::Tensor& slots, int64_t attend) const {
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

// Note [lazy masks]: before the bookkeeping changes, a still-held latest
// StepPlan builds the masks it has not built yet, from the state they
// describe; a dropped one costs nothing.
inline void Cache::retire_plan() {
  if (const std::shared_ptr<detail::LazyPlan> plan = current_plan_.lock()) plan->materialize();
  current_plan_.reset();
  storage_->release();  // Note [staging buffer]: staged views end with their step
}

// Every row operation, after its checks: held plans keep their masks and
// go stale.
inline void Cache::begin_row_operation() {
  retire_plan();
  generation_ = detail::next_generation();
}

// ---------------------------------------------------------------- rows

inline void Cache::reset() {
  check_mutable("reset");
  begin_row_operation();
  storage_->fill(0);
  for (LayerGroup& g : groups_) g.slot_positions.fill_(-1);
  seq_lengths_.fill_(0);
}

inline void Cache::reset_rows(const at::Tensor& rows) {
  check_mutable("reset_rows");
  const at::Tensor index = device_rows("rows", rows, /*allow_duplicates=*/false);
  begin_row_operation();
  storage_->fill_rows(index);
  for (LayerGroup& g : groups_) g.slot_positions.index_fill_(0, index, -1);
  seq_lengths_.index_fill_(0, index, 0);
}

inline void Cache::copy_row(int64_t src, int64_t dst) {
  check_mutable("copy_row");
  check_row("src", src);
  check_row("dst", dst);
  begin_row_operation();
  if (src == dst) return;
  storage_->copy_row(src, dst);
  for (LayerGroup& g : groups_) g.slot_positions[dst].copy_(g.slot_positions[src]);
  seq_lengths_[dst].copy_(seq_lengths_[src]);
}

inline void Cache::reorder(const at::Tensor& indices) {
  check_mutable("reorder");
  const at::Tensor index = device_rows("indices", indices, /*allow_duplicates=*/true);
  begin_row_operation();
  const int64_t n = index.numel();
  // index_select makes a temporary, so overlapping sources are read before
  // the prefix is overwritten.
  storage_->reorder(index);
  for (LayerGroup& g : groups_) {
    g.slot_positions.narrow(0, 0, n).copy_(g.slot_positions.index_select(0, index));
  }
  seq_lengths_.narrow(0, 0, n).copy_(seq_lengths_.index_select(0, index));
}

inline void Cache::rollback(const at::Tensor& new_lengths) {
  check_rollback(new_lengths);
  if (config_.check_position_values && new_lengths.device().is_cpu()) {
    check_rollback_values(new_lengths);
  }
  apply_rollback(new_lengths);
}

inline void Cache::rollback(const std::vector<int64_t>& new_lengths) {
  const at::Tensor host = at::tensor(new_lengths, at::TensorOptions().dtype(at::kLong));
  check_rollback(host.to(config_.device));
  check_rollback_values(host);
  apply_rollback(host.to(config_.device));
}

inline RowState Cache::save_row(int64_t row) const {
  storage_->check_row_state("save_row");
  check_row("row", row);
  RowState state;
  state.length = seq_lengths_[row].item<int64_t>();
  const at::Device cpu(at::kCPU);
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const int64_t n = detail::row_state_slots(config_, l, state.length);
    state.types.push_back(config_.layer_type(l));
    state.positions.push_back(
        group_of(l).slot_positions[row].narrow(0, 0, n).to(cpu, at::kLong, false, true));
    auto [keys, values] = storage_->save_slots(l, row, n);
    state.keys.push_back(std::move(keys));
    state.values.push_back(std::move(values));
  }
  return state;
}

inline void Cache::restore_row(const RowState& state, int64_t row) {
  check_mutable("restore_row");
  storage_->check_row_state("restore_row");
  check_row("row", row);
  detail::check_row_state(state, config_);
  begin_row_operation();
  storage_->clear_row(row);
  for (LayerGroup& g : groups_) g.slot_positions[row].fill_(-1);
  seq_lengths_[row].fill_(0);
  std::vector<bool> group_done(groups_.size(), false);
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const auto i = static_cast<size_t>(l);
    storage_->restore_slots(l, row, state.keys[i], state.values[i]);
    const auto g = static_cast<size_t>((*layer_group_)[i]);
    if (group_done[g]) continue;  // one layer type shares its positions
    const int64_t n = state.keys[i].size(1);
    groups_[g].slot_positions[row].narrow(0, 0, n).copy_(state.positions[i]);
    group_done[g] = true;
  }
  seq_lengths_.narrow(0, row, 1).fill_(state.length);
}

inline void Cache::copy_from(const Cache& other) {
  check_mutable("copy_from");
  check_same_config(other);
  begin_row_operation();
  if (&other == this) return;
  storage_->copy_from(*other.storage_);
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].slot_positions.copy_(other.groups_[g].slot_positions);
  }
  seq_lengths_.copy_(other.seq_lengths_);
}

// Note [ring rollback]: drops every slot whose position is >= the row's
// new length, in every layer type, with masked fills (no host read). A
// full layer loses nothing else; a ring of window + max_chunk - 1 slots
// lost only positions outside every later query's window as long as the
// new length is at most max_chunk below the newest position ever written
// (any depth when the ring holds max_len), which check_rollback_values
// tests as "the next query's window is still stored".
inline void Cache::apply_rollback(const at::Tensor& new_lengths) {
  const int64_t b = new_lengths.numel();
  const at::Tensor keep = new_lengths.clamp_min(0).unsqueeze(1);  // [b, 1]
  std::vector<at::Tensor> drop;                                   // per group [b, slots]
  for (const LayerGroup& g : groups_) drop.push_back(g.slot_positions.narrow(0, 0, b).ge(keep));
  retire_plan();  // Note [lazy masks]: a held plan's masks describe the state before
  generation_ = detail::next_generation();
  storage_->drop(b, drop);
  for (size_t g = 0; g < groups_.size(); ++g) {
    groups_[g].slot_positions.narrow(0, 0, b).masked_fill_(drop[g], -1);
  }
  at::Tensor seq = seq_lengths_.narrow(0, 0, b);
  at::minimum_out(seq, seq, keep.squeeze(1));
}

// ---------------------------------------------------------------- inspection

inline int64_t Cache::device_memory_bytes() const {
  int64_t total = seq_lengths_.nbytes() + storage_->device_bytes();
  for (const auto& g : groups_) total += g.slot_positions.nbytes() + g.row_head_base.nbytes();
  return total;
}

inline int64_t Cache::host_memory_bytes() const { return storage_->host_bytes(); }

inline const at::Tensor& Cache::keys(int64_t layer) const {
  check_layer(layer);
  return storage_->keys(layer);
}

inline const at::Tensor& Cache::values(int64_t layer) const {
  check_layer(layer);
  return storage_->values(layer);
}

inline const at::Tensor& Cache::key_scales(int64_t layer) const {
  check_layer(layer);
  return storage_->key_scales(layer);
}

inline const at::Tensor& Cache::value_scales(int64_t layer) const {
  check_layer(layer);
  return storage_->value_scales(layer);
}

inline const StagingBuffer& Cache::staging() const { return storage_->staging(); }

inline const detail::OffloadRing& Cache::offload_ring() const {
  static const detail::OffloadRing none;
  const auto* offloaded = dynamic_cast<const detail::OffloadedStorage*>(storage_.get());
  return offloaded ? offloaded->ring() : none;
}

inline int64_t Cache::staging_bytes() const { return storage_->staging_bytes(); }

// ---------------------------------------------------------------- checks

inline void Cache::check_current(const StepPlan& step) const {
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
inline void Cache::check_update(int64_t layer, const at::Tensor& key, const at::Tensor& value,
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
              "value: expected shape [live_batch, kv_heads, q, head_dim] = ", expected, " but got ",
              value.sizes());
  check_source("key", key, layer);
  check_source("value", value, layer);
}

// attend()'s arguments: the current step, the views update() returned
// for this layer, queries of the step's shape.
inline void Cache::check_attend(int64_t layer, const at::Tensor& query, const KV& kv,
                                const StepPlan& step) const {
  check_layer(layer);
  check_current(step);
  const int64_t b = step.live_batch_;
  detail::check_tensor("query", query, config_.dtype, config_.device);
  detail::check_rank("query", query, 4, "[live_batch, heads, q, head_dim]");
  TORCH_CHECK(
      query.size(0) == b && query.size(2) == step.query_len_ && query.size(3) == config_.head_dim,
      "query: expected shape [live_batch, heads, q, head_dim] = [", b, ", heads, ", step.query_len_,
      ", ", config_.head_dim, "] but got ", query.sizes());
  TORCH_CHECK(query.size(1) >= 1 && query.size(1) % config_.num_kv_heads == 0,
              "query: expected heads to be a multiple of kv_heads=", config_.num_kv_heads,
              " but got ", query.size(1));
  const std::vector<int64_t> shape = {b, config_.num_kv_heads, step.view_len(layer),
                                      config_.head_dim};
  storage_->check_views(layer, step);
  const KV buffers = storage_->view_buffers(layer);
  for (const auto& [name, view, buffer] :
       {std::make_tuple("kv.keys", kv.keys, buffers.keys),
        std::make_tuple("kv.values", kv.values, buffers.values)}) {
    TORCH_CHECK(view.defined() && view.is_alias_of(buffer) &&
                    view.sizes() == at::IntArrayRef(shape) && view.strides() == buffer.strides() &&
                    view.storage_offset() == buffer.storage_offset(),
                name, ": expected the view update(", layer, ", ...) returned for this step, ",
                at::IntArrayRef(shape), " over layer ", layer, "'s buffer, but got ",
                detail::shape_of(view),
                view.defined() && !view.is_alias_of(buffer) ? " not a view of that buffer" : "");
  }
}

inline AttentionPath Cache::resolve_path(int64_t layer, const at::Tensor& query,
                                         AttentionPath path) const {
  if (path == AttentionPath::kMasked) return path;
  const char* refusal = varlen_refusal(layer, query);
  TORCH_CHECK(path != AttentionPath::kVarlen || refusal == nullptr,
              "path: expected a layer, device and dtype the varlen path serves but got ",
              refusal == nullptr ? "" : refusal, " (layer ", layer, ")");
  return refusal == nullptr ? AttentionPath::kVarlen : AttentionPath::kMasked;
}

inline void Cache::check_layer(int64_t layer) const {
  TORCH_CHECK(layer >= 0 && layer < config_.num_layers, "layer: expected an index in [0, ",
              config_.num_layers, ") but got ", layer);
}

inline void Cache::check_row(const char* name, int64_t row) const {
  TORCH_CHECK(row >= 0 && row < config_.max_batch, name,
              ": expected a row in [0, max_batch=", config_.max_batch, ") but got ", row);
}

// A source that shares memory with the buffer it is written into would be
// read and written by one index_copy_ (a race on a GPU, and the later
// write sees the earlier one on a CPU). A source that requires grad would
// chain every later write into one autograd graph that holds every step's
// activations: memory that grows for the life of the cache.
inline void Cache::check_source(const char* name, const at::Tensor& t, int64_t layer) const {
  const at::Tensor& k = storage_->stored_keys(layer);
  const at::Tensor& v = storage_->stored_values(layer);
  TORCH_CHECK(!t.is_alias_of(k) && !t.is_alias_of(v), name,
              ": expected a tensor that does not share memory with the cache's buffers of layer ",
              layer, " but got a view of them");
  TORCH_CHECK(!(t.requires_grad() && c10::GradMode::is_enabled()), name,
              ": expected a tensor that does not require grad (run decode under "
              "at::NoGradGuard or c10::InferenceMode) but got requires_grad=true");
}

inline const Cache::LayerGroup& Cache::group_of(int64_t layer) const {
  check_layer(layer);
  return groups_[static_cast<size_t>((*layer_group_)[static_cast<size_t>(layer)])];
}

// Row arguments checked on the host (detail::host_rows), then on the
// cache's device.
inline at::Tensor Cache::device_rows(const char* name, const at::Tensor& rows,
                                     bool allow_duplicates) const {
  return detail::host_rows(name, rows, config_.max_batch, allow_duplicates).to(config_.device);
}

// Only for host-resident positions: rejects values that cannot be stored
// or seen, naming the first offending entry.
inline void Cache::check_position_values(const at::Tensor& cache_position, int64_t attend) const {
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

inline void Cache::check_rollback(const at::Tensor& new_lengths) const {
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
inline void Cache::check_rollback_values(const at::Tensor& new_lengths) const {
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

// Every check of prepare()'s arguments, before anything is computed.
inline void Cache::check_prepare(const at::Tensor& cache_position, int64_t live_batch,
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

// copy_from(): every field that shapes the buffers or the bookkeeping must
// agree; the first that differs is named.
inline void Cache::check_same_config(const Cache& other) const {
  const CacheConfig& a = config_;
  const CacheConfig& o = other.config_;
  auto same = [](const char* field, const auto& mine, const auto& theirs) {
    TORCH_CHECK(mine == theirs, "other: expected a cache of this cache's config, CacheConfig.",
                field, "=", mine, ", but got ", field, "=", theirs);
  };
  same("num_layers", a.num_layers, o.num_layers);
  same("num_kv_heads", a.num_kv_heads, o.num_kv_heads);
  same("head_dim", a.head_dim, o.head_dim);
  same("max_batch", a.max_batch, o.max_batch);
  same("max_len", a.max_len, o.max_len);
  same("dtype", a.dtype, o.dtype);
  same("device", a.device, o.device);
  for (int64_t l = 0; l < a.num_layers; ++l) {
    TORCH_CHECK(a.layer_type(l) == o.layer_type(l),
                "other: expected a cache of this cache's config, CacheConfig.layer_types[", l,
                "]=", a.layer_type(l), ", but got ", o.layer_type(l));
  }
  same("sliding_window", a.sliding_window, o.sliding_window);
  same("max_chunk (effective)", a.effective_max_chunk(), o.effective_max_chunk());
  same("kv_storage", a.kv_storage, o.kv_storage);
  same("host_offload", a.host_offload, o.host_offload);
}

inline bool Cache::aliases_bookkeeping(const at::Tensor& t) const {
  if (t.is_alias_of(seq_lengths_)) return true;
  for (const LayerGroup& g : groups_) {
    if (t.is_alias_of(g.slot_positions)) return true;
  }
  return false;
}

// A cache built under c10::InferenceMode holds inference tensors, which
// LibTorch refuses to modify outside it; say so before anything runs
// instead of failing halfway through an entry point.
inline void Cache::check_mutable(const char* entry_point) const {
  TORCH_CHECK(!seq_lengths_.is_inference() || c10::InferenceMode::is_enabled(), entry_point,
              ": expected c10::InferenceMode to be on, since this cache was built under it "
              "(its buffers are inference tensors, which LibTorch only modifies in "
              "InferenceMode), but it is off; call every cache operation under "
              "c10::InferenceMode, or build the cache outside it");
}

// ---------------------------------------------------------------- the rest

inline int64_t estimate_memory_bytes(const CacheConfig& config) {
  config.validate();  // rejects a config whose bytes overflow
  bool overflow = false;
  return config.owned_bytes(&overflow);
}

inline CacheConfig::Bytes estimate_memory(const CacheConfig& config) {
  config.validate();
  bool overflow = false;
  return config.owned(&overflow);
}

inline StaticCache::StaticCache(CacheConfig config) : Cache(checked(std::move(config))) {}

inline CacheConfig StaticCache::checked(CacheConfig config) {
  for (size_t i = 0; i < config.layer_types.size(); ++i) {
    TORCH_CHECK(config.layer_types[i] == LayerType::kFull, "StaticCache: CacheConfig.layer_types[",
                i, "]: expected full but got ", config.layer_types[i],
                " (use HybridCache for sliding layers)");
  }
  return config;
}

}  // namespace statickv
