#pragma once
// Cache's bodies, the row operations and inspection (detail/cache_impl.hpp
// lists them): reset, copy, reorder, rollback (Note [ring rollback]), row
// snapshots, and what the buffers and storage report. Included by
// cache_impl.hpp only.

#include <statickv/cache.hpp>
#include <statickv/detail/offload.hpp>
#include <statickv/detail/rows.hpp>
#include <statickv/detail/storage.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace statickv {

// ---------------------------------------------------------------- rows

STATICKV_CACHE_FN void Cache::reset() {
  check_mutable("reset");
  begin_row_operation();
  storage_->fill(0);
  for (LayerGroup& g : groups_) g.slot_positions.fill_(-1);
  seq_lengths_.fill_(0);
}

STATICKV_CACHE_FN void Cache::reset_rows(const at::Tensor& rows) {
  check_mutable("reset_rows");
  const at::Tensor index = device_rows("rows", rows, /*allow_duplicates=*/false);
  begin_row_operation();
  storage_->fill_rows(index);
  for (LayerGroup& g : groups_) g.slot_positions.index_fill_(0, index, -1);
  seq_lengths_.index_fill_(0, index, 0);
}

STATICKV_CACHE_FN void Cache::copy_row(int64_t src, int64_t dst) {
  check_mutable("copy_row");
  check_row("src", src);
  check_row("dst", dst);
  begin_row_operation();
  if (src == dst) return;
  storage_->copy_row(src, dst);
  for (LayerGroup& g : groups_) g.slot_positions[dst].copy_(g.slot_positions[src]);
  seq_lengths_[dst].copy_(seq_lengths_[src]);
}

STATICKV_CACHE_FN void Cache::reorder(const at::Tensor& indices) {
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

STATICKV_CACHE_FN void Cache::rollback(const at::Tensor& new_lengths) {
  check_rollback(new_lengths);
  if (config_.check_position_values && new_lengths.device().is_cpu()) {
    check_rollback_values(new_lengths);
  }
  apply_rollback(new_lengths);
}

STATICKV_CACHE_FN void Cache::rollback(const std::vector<int64_t>& new_lengths) {
  const at::Tensor host = at::tensor(new_lengths, at::TensorOptions().dtype(at::kLong));
  check_rollback(host.to(config_.device));
  check_rollback_values(host);
  apply_rollback(host.to(config_.device));
}

STATICKV_CACHE_FN RowState Cache::save_row(int64_t row) const {
  storage_->check_row_state("save_row");
  check_row("row", row);
  return save_row(row, seq_lengths_[row].item<int64_t>(), at::Device(at::kCPU));
}

STATICKV_CACHE_FN RowState Cache::save_row(int64_t row, int64_t length,
                                           const at::Device& device) const {
  storage_->check_row_state("save_row");
  check_row("row", row);
  TORCH_CHECK(length >= 0 && length <= config_.max_len,
              "length: expected a length in [0, max_len=", config_.max_len, "] but got ", length);
  if (config_.check_position_values && seq_lengths_.device().is_cpu()) {
    const int64_t stored = seq_lengths_.const_data_ptr<int64_t>()[row];
    TORCH_CHECK(length == stored, "length: expected row ", row, "'s seq_length=", stored,
                " but got ", length);
  }
  RowState state;
  state.length = length;
  for (int64_t l = 0; l < config_.num_layers; ++l) {
    const int64_t n = detail::row_state_slots(config_, l, length);
    state.types.push_back(config_.layer_type(l));
    state.positions.push_back(
        detail::copy_to(group_of(l).slot_positions[row].narrow(0, 0, n), device, at::kLong));
    auto [keys, values] = storage_->save_slots(l, row, n, device);
    state.keys.push_back(std::move(keys));
    state.values.push_back(std::move(values));
  }
  return state;
}

STATICKV_CACHE_FN void Cache::restore_row(const RowState& state, int64_t row) {
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

STATICKV_CACHE_FN void Cache::copy_from(const Cache& other) {
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
STATICKV_CACHE_FN void Cache::apply_rollback(const at::Tensor& new_lengths) {
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

STATICKV_CACHE_FN int64_t Cache::device_memory_bytes() const {
  int64_t total = seq_lengths_.nbytes() + storage_->device_bytes();
  for (const auto& g : groups_) total += g.slot_positions.nbytes() + g.row_head_base.nbytes();
  return total;
}

STATICKV_CACHE_FN int64_t Cache::host_memory_bytes() const { return storage_->host_bytes(); }

STATICKV_CACHE_FN const at::Tensor& Cache::keys(int64_t layer) const {
  check_layer(layer);
  return storage_->keys(layer);
}

STATICKV_CACHE_FN const at::Tensor& Cache::values(int64_t layer) const {
  check_layer(layer);
  return storage_->values(layer);
}

STATICKV_CACHE_FN const at::Tensor& Cache::key_scales(int64_t layer) const {
  check_layer(layer);
  return storage_->key_scales(layer);
}

STATICKV_CACHE_FN const at::Tensor& Cache::value_scales(int64_t layer) const {
  check_layer(layer);
  return storage_->value_scales(layer);
}

STATICKV_CACHE_FN const StagingBuffer& Cache::staging() const { return storage_->staging(); }

STATICKV_CACHE_FN const detail::OffloadRing& Cache::offload_ring() const {
  static const detail::OffloadRing none;
  const auto* offloaded = dynamic_cast<const detail::OffloadedStorage*>(storage_.get());
  return offloaded ? offloaded->ring() : none;
}

STATICKV_CACHE_FN int64_t Cache::staging_bytes() const { return storage_->staging_bytes(); }

}  // namespace statickv
