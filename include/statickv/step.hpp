#pragma once
// StepPlan: the plan of one forward pass, made once by Cache::prepare().
//
// prepare() turns the step's positions into write slots and attention masks
// on the device, once per layer type; update() then only writes through
// those slots and returns views. A StepPlan is tied to the cache that made it and
// to that cache's state at the time: any later prepare(), reset or row
// operation makes it stale, and update() refuses a stale step rather than
// writing through slots that no longer match the bookkeeping.

#include <statickv/config.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <vector>

namespace statickv {

class Cache;

/// Views of one layer's buffers for the live batch; they share storage with
/// the cache (no copy).
struct KV {
  at::Tensor keys;    // [live_batch, kv_heads, view_len, head_dim]
  at::Tensor values;  // [live_batch, kv_heads, view_len, head_dim]
};

class StepPlan {
 public:
  /// Bool attention mask (true = attend) aligned with the views update()
  /// returns for `layer`: [live_batch, 1, q, view_len(layer)].
  const at::Tensor& mask(int64_t layer) const { return group(layer).mask; }

  /// The same mask in additive form, in the cache dtype: 0 = attend, the
  /// dtype's lowest finite value = blocked (so a fully blocked query row
  /// stays finite). Made once per layer type per step, it is the form
  /// sdpa_attention runs fastest with: a bool mask is converted again inside
  /// every attention call.
  const at::Tensor& additive_mask(int64_t layer) const { return group(layer).additive; }

  /// Slots this step writes in `layer`'s buffers, the scratch slot
  /// (capacity(layer)) for tokens that must not be stored: [q] when positions
  /// were given as [q], else [live_batch, q]. For consumers that do their own
  /// index_copy_ (TorchScript, AOTInductor).
  const at::Tensor& write_slots(int64_t layer) const { return group(layer).slots; }

  /// Slots the views of `layer` expose (attend_len for full layers, the ring
  /// capacity for sliding layers).
  int64_t view_len(int64_t layer) const { return group(layer).view_len; }

  /// The positions given to prepare(): [q] or [live_batch, q].
  const at::Tensor& positions() const { return positions_; }
  int64_t live_batch() const { return live_batch_; }
  int64_t query_len() const { return query_len_; }
  int64_t attend_len() const { return attend_len_; }
  /// True when positions were given per row ([live_batch, q]).
  bool per_row() const { return per_row_; }

 private:
  friend class Cache;

  // Everything one layer type needs for this step.
  struct GroupPlan {
    at::Tensor slots;       // [q] or [live_batch, q], int64
    at::Tensor flat_index;  // [live_batch * kv_heads * q] into a [-1, head_dim] view (per_row)
    at::Tensor mask;        // [live_batch, 1, q, view_len], bool
    at::Tensor additive;    // [live_batch, 1, q, view_len], cache dtype
    int64_t view_len = 0;
  };

  const GroupPlan& group(int64_t layer) const {
    TORCH_CHECK(layer_group_ != nullptr,
                "step: expected a StepPlan made by prepare() but got a default-constructed one");
    TORCH_CHECK(layer >= 0 && layer < static_cast<int64_t>(layer_group_->size()),
                "layer: expected an index in [0, ", layer_group_->size(), ") but got ", layer);
    return groups_[static_cast<size_t>((*layer_group_)[static_cast<size_t>(layer)])];
  }

  std::vector<GroupPlan> groups_;
  // Shared with the cache, so a StepPlan that outlives its cache still answers
  // mask() and write_slots() instead of reading freed memory.
  std::shared_ptr<const std::vector<int64_t>> layer_group_;
  const Cache* owner_ = nullptr;
  uint64_t generation_ = 0;
  at::Tensor positions_;
  int64_t live_batch_ = 0;
  int64_t query_len_ = 0;
  int64_t attend_len_ = 0;
  bool per_row_ = false;
};

/// The name StepPlan had before 0.2; kept so existing code compiles.
using Step = StepPlan;

}  // namespace statickv
