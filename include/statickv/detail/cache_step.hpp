#pragma once
// Cache's bodies, the step (detail/cache_impl.hpp lists them): prepare,
// update, attend and the bookkeeping a step advances (Notes [newest wins],
// [prepare is all or nothing], [lazy masks]). Included by cache_impl.hpp
// only.

#include <statickv/cache.hpp>
#include <statickv/detail/decode_prepare.hpp>
#include <statickv/detail/prepare_fault.hpp>
#include <statickv/detail/rows.hpp>
#include <statickv/detail/storage.hpp>
#include <statickv/kernel_switches.hpp>
#include <statickv/mask.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <tuple>
#include <utility>
#include <vector>

namespace statickv {

// ---------------------------------------------------------------- the step

STATICKV_CACHE_FN StepPlan Cache::prepare(const at::Tensor& cache_position, int64_t live_batch,
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

  // [rows, q], rows = 1 (shared positions) or live_batch.
  const at::Tensor pos = step.per_row_ ? cache_position : cache_position.unsqueeze(0);
  if (fused_prepare_fits(step)) {
    plan_fused(step, pos, attend);
  } else {
    plan_composed(step, pos, attend);
  }
  current_plan_ = step.lazy_;
  // Only a step that fully succeeded makes earlier Steps stale.
  generation_ = detail::next_generation();
  step.generation_ = generation_;
  storage_->begin_step(step);  // Note [host offload]: layer 0's copy-in overlaps the embedding
  return step;
}

// The step in ATen ops. Every token that must not be stored (padding, past
// max_len) becomes -1: it is written to the scratch slot and attends to
// nothing. (Note [step op count]: a decode step on a CPU is short enough
// that every op's fixed cost shows, so each line below does its work in as
// few ops as it can.)
STATICKV_CACHE_FN void Cache::plan_composed(StepPlan& step, const at::Tensor& pos, int64_t attend) {
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
}

// Note [decode prepare]: a step of one query a row, on a cache whose layer
// types map positions to slots by a remainder and which builds masks
// lazily, is planned by one kernel (detail/decode_prepare.hpp) unless its
// switch is off (Note [kernel switches]).
STATICKV_CACHE_FN bool Cache::fused_prepare_fits(const StepPlan& step) const {
  if (step.query_len_ != 1 || config_.eager_masks) return false;
  if (groups_.size() > detail::kDecodePrepareGroups) return false;
#ifndef STATICKV_HAS_CUDA
  if (config_.device.is_cuda()) return false;
#endif
  if (!config_.device.is_cpu() && !config_.device.is_cuda()) return false;
  for (const LayerGroup& group : groups_) {
    if (group.policy->slot_ring() < 0) return false;
  }
  static const bool enabled = kernel_enabled("decode_prepare");
  return enabled;
}

// Outputs are allocated and the plan is built before the one kernel that
// writes the bookkeeping, so a failure before it leaves everything as it
// was (Note [prepare is all or nothing]): here every fault point comes
// before the write.
STATICKV_CACHE_FN void Cache::plan_fused(StepPlan& step, const at::Tensor& pos, int64_t attend) {
  const int64_t b = step.live_batch_;
  const int64_t rows = pos.size(0);
  detail::DecodePrepare p;
  p.positions = pos;
  p.sane = at::empty({rows, 1}, pos.options());
  p.seq_lengths = seq_lengths_;
  p.live_batch = b;
  p.max_len = config_.max_len;
  p.kv_heads = config_.num_kv_heads;
  step.lazy_ = lazy_plan(p.sane, b);
  for (const LayerGroup& group : groups_) {
    const LayerPolicy& policy = *group.policy;
    detail::DecodePrepareGroup d;
    d.slot_positions = group.slot_positions;
    d.slots = at::empty({rows, 1}, pos.options());
    if (step.per_row_) d.flat_index = at::empty({b * config_.num_kv_heads}, pos.options());
    d.seqused_k = at::empty({b}, pos.options().dtype(at::kInt));
    d.ring = policy.slot_ring();
    d.scratch = policy.scratch_slot();
    d.view_len = policy.view_len(attend);
    step.groups_.push_back(plan_group(group, step, d.slots, attend, d.flat_index));
    detail::LazyGroup& lazy = step.lazy_->groups.back();  // the kernel writes its varlen rows
    lazy.varlen.cum_seq_q = arange32_.narrow(0, 0, b + 1);
    lazy.varlen.seqused_k = d.seqused_k;
    lazy.varlen_built = true;
    p.groups.push_back(std::move(d));
  }
  detail::prepare_fault_point(detail::PreparePoint::kBeforeBookkeeping);
  retire_plan();
  detail::prepare_fault_point(detail::PreparePoint::kAfterSeqLengths);
  detail::prepare_fault_point(detail::PreparePoint::kAfterSlotPositions);
  detail::prepare_fault_point(detail::PreparePoint::kAfterMasks);
  detail::decode_prepare(p);
}

// A step's lazily built parts, before any group's.
STATICKV_CACHE_FN std::shared_ptr<detail::LazyPlan> Cache::lazy_plan(const at::Tensor& sane,
                                                                     int64_t live_batch) const {
  auto lazy = std::make_shared<detail::LazyPlan>();
  lazy->sane = sane;
  lazy->live_batch = live_batch;
  lazy->values = mask_values_;
  lazy->arange32 = arange32_;
  return lazy;
}

STATICKV_CACHE_FN KV Cache::update(int64_t layer, const at::Tensor& key, const at::Tensor& value,
                                   const StepPlan& step) {
  check_update(layer, key, value, step);
  return storage_->write(layer, key, value, step);
}

STATICKV_CACHE_FN detail::WriteTarget Cache::write_target(int64_t layer, const at::Tensor& key,
                                                          const at::Tensor& value,
                                                          const StepPlan& step) {
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

STATICKV_CACHE_FN at::Tensor Cache::attend(int64_t layer, const at::Tensor& query, const KV& kv,
                                           const StepPlan& step, AttentionPath path) const {
  check_attend(layer, query, kv, step);
  const AttentionPath chosen = resolve_path(layer, query, path);
  if (chosen == AttentionPath::kMasked) {
    return sdpa_attention(query, kv.keys, kv.values, step.additive_mask(layer));
  }
  return detail::flash_varlen(varlen_args(layer, query, kv, step));
}

STATICKV_CACHE_FN AttentionPath Cache::attention_path(int64_t layer,
                                                      const at::Tensor& query) const {
  check_layer(layer);
  return resolve_path(layer, query, AttentionPath::kAuto);
}

STATICKV_CACHE_FN const char* Cache::varlen_refusal(int64_t layer, const at::Tensor& query) const {
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

STATICKV_CACHE_FN detail::VarlenArgs Cache::varlen_args(int64_t layer, const at::Tensor& query,
                                                        const KV& kv, const StepPlan& step,
                                                        KvLayout layout) const {
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
  args.cum_seq_k = varlen_key_starts(layer, kv, step, layout);
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

// The strided view's key starts were built with the group (add_group); a
// packed copy's depend on the step's view length.
STATICKV_CACHE_FN at::Tensor Cache::varlen_key_starts(int64_t layer, const KV& kv,
                                                      const StepPlan& step, KvLayout layout) const {
  const LayerGroup& group = group_of(layer);
  const int64_t dim = kv.keys.size(3);
  if (layout == KvLayout::kPackedCopy || !group.key_starts.defined() ||
      kv.keys.stride(1) != group.policy->buffer_len() * dim) {
    return detail::varlen_key_starts(kv.keys, layout, arange32_);
  }
  return group.key_starts.narrow(0, 0, step.live_batch_ + 1);
}

// Note [newest wins]: two tokens of one row may map to one slot in a step
// (a ring chunk longer than the ring's spare room, or a repeated position).
// Writes with duplicate indices race on a GPU, so only the newest position
// of each slot keeps it (ties: the later token) and the others are sent to
// the scratch slot. Keys position * q + token order tokens; the per-slot
// maximum is found with one scatter_reduce, so no host sync is needed.
STATICKV_CACHE_FN at::Tensor Cache::newest_wins(const at::Tensor& slots, const at::Tensor& pos,
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
STATICKV_CACHE_FN void Cache::advance(StepPlan& step, const at::Tensor& sane,
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
    step.lazy_ = lazy_plan(sane, b);
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
// positions (`flat_index` when the decode prepare's kernel wrote it, else
// computed here), and what its lazily built masks need (Note [lazy masks]).
STATICKV_CACHE_FN StepPlan::GroupPlan Cache::plan_group(const LayerGroup& group, StepPlan& step,
                                                        const at::Tensor& slots, int64_t attend,
                                                        const at::Tensor& flat_index) const {
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
    planned.flat_index = flat_index.defined()
                             ? flat_index
                             : group.row_head_base.narrow(0, 0, b).add(slots.unsqueeze(1)).view(-1);
  } else {
    planned.slots = slots.squeeze(0);
  }
  return planned;
}

// Note [lazy masks]: before the bookkeeping changes, a still-held latest
// StepPlan builds the masks it has not built yet, from the state they
// describe; a dropped one costs nothing.
STATICKV_CACHE_FN void Cache::retire_plan() {
  if (const std::shared_ptr<detail::LazyPlan> plan = current_plan_.lock()) plan->materialize();
  current_plan_.reset();
  storage_->release();  // Note [staging buffer]: staged views end with their step
}

// Every row operation, after its checks: held plans keep their masks and
// go stale.
STATICKV_CACHE_FN void Cache::begin_row_operation() {
  retire_plan();
  generation_ = detail::next_generation();
}

}  // namespace statickv
