#pragma once
// StepPlan: the plan of one forward pass, made once by Cache::prepare().
//
// prepare() turns the step's positions into write slots and attention masks
// on the device, once per layer type; update() then only writes through
// those slots and returns views. A StepPlan is tied to the cache that made it and
// to that cache's state at the time: any later prepare(), reset or row
// operation makes it stale, and update() refuses a stale step rather than
// writing through slots that no longer match the bookkeeping.
//
// Note [lazy masks]: masks and the varlen path's per-row arguments are built
// on first use, once per layer type, under a lock shared by every copy of
// the StepPlan (so concurrent first calls build once). prepare() itself only
// plans the writes. A mask first asked for inside a captured step is built
// during the capture, so replays recompute it with the captured kernels.
// Before the cache changes again (the next prepare(), reset or row
// operation) it builds the masks a still-held StepPlan has not built yet,
// from the state they describe, so mask() and additive_mask() of an older
// StepPlan answer what they always did; a StepPlan dropped before then
// costs nothing. CacheConfig::eager_masks builds them in prepare() instead.

#include <statickv/config.hpp>
#include <statickv/mask.hpp>
#include <statickv/varlen.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <mutex>
#include <vector>

namespace statickv {

class Cache;
class StepPlan;

namespace detail {

struct StepAccess;  // what the cache's storage reads of a step (below)

/// One layer type's lazily built parts of a step, and what they are built from.
struct LazyGroup {
  at::Tensor slot_positions;  // the group's [max_batch, slots] bookkeeping (alive with the plan)
  int64_t view_len = 0;
  int64_t window = 0;
  at::Tensor mask, additive;  // [b, 1, q, view_len], built on first use
  VarlenRows varlen;          // built on first use by the varlen path
  bool varlen_built = false;
};

/// Shared by every copy of one StepPlan (Note [lazy masks]).
struct LazyPlan {
  std::mutex mutex;
  std::vector<LazyGroup> groups;
  at::Tensor sane;  // [rows, q] sanitized positions of the step
  int64_t live_batch = 0;
  AdditiveValues values;
  at::Tensor arange32;  // int32 [max_batch + 1]

  // Under `mutex`. The mask over the slot positions the views expose:
  // slot_pos in [0, q_pos] && (window == 0 || q_pos - slot_pos < window).
  void build_masks(LazyGroup& g) {
    if (g.additive.defined()) return;
    const int64_t slots_len = g.slot_positions.size(1);
    const at::Tensor seen =
        g.slot_positions.as_strided({live_batch, 1, 1, g.view_len}, {slots_len, 1, 1, 1});
    const at::Tensor query = sane.view({sane.size(0), 1, sane.size(1), 1});
    at::Tensor mask = seen.le(query).logical_and_(seen.ge(0));  // [b, 1, q, L]
    if (g.window > 0) mask.logical_and_(query.sub(seen).lt(g.window));
    g.additive = at::where(mask, values.attend, values.blocked);
    g.mask = mask;
  }

  // Under `mutex`.
  void build_varlen(LazyGroup& g) {
    if (g.varlen_built) return;
    g.varlen = varlen_rows(sane, live_batch, g.view_len, arange32);
    g.varlen_built = true;
  }

  /// Every mask not built yet (before the cache changes under them).
  void materialize() {
    std::lock_guard<std::mutex> lock(mutex);
    for (LazyGroup& g : groups) build_masks(g);
  }
};

}  // namespace detail

/// Views of one layer's buffers for the live batch; they share storage with
/// the cache (no copy).
struct KV {
  at::Tensor keys;    // [live_batch, kv_heads, view_len, head_dim]
  at::Tensor values;  // [live_batch, kv_heads, view_len, head_dim]
};

namespace detail {

/// Where update() writes one layer's part of a step (Cache::write_target()):
/// what a fused writer (rotary_update(), rotary.hpp) needs, nothing more.
struct WriteTarget {
  at::Tensor keys, values;  // whole buffers [max_batch, kv_heads, capacity + 1, head_dim]
  at::Tensor slots;         // int64 [live_batch, q], the step's write slots (rows may be stride 0)
  KV views;                 // what update() returns
};

}  // namespace detail

class StepPlan {
 public:
  /// Bool attention mask (true = attend) aligned with the views update()
  /// returns for `layer`: [live_batch, 1, q, view_len(layer)].
  /// Built on first use (Note [lazy masks]).
  const at::Tensor& mask(int64_t layer) const { return built_masks(layer).mask; }

  /// The same mask in additive form, in the cache dtype: 0 = attend, the
  /// dtype's lowest finite value = blocked (so a fully blocked query row
  /// stays finite). Made once per layer type per step, it is the form
  /// sdpa_attention runs fastest with: a bool mask is converted again inside
  /// every attention call. Built on first use, with mask() (Note [lazy masks]).
  const at::Tensor& additive_mask(int64_t layer) const { return built_masks(layer).additive; }

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
  friend struct detail::StepAccess;

  // What update() needs of one layer type for this step (the rest is lazy).
  struct GroupPlan {
    at::Tensor slots;       // [q] or [live_batch, q], int64
    at::Tensor flat_index;  // [live_batch * kv_heads * q] into a [-1, head_dim] view (per_row)
    int64_t view_len = 0;
  };

  size_t group_index(int64_t layer) const {
    group(layer);  // checks
    return static_cast<size_t>((*layer_group_)[static_cast<size_t>(layer)]);
  }

  const detail::LazyGroup& built_masks(int64_t layer) const {
    const size_t g = group_index(layer);
    std::lock_guard<std::mutex> lock(lazy_->mutex);
    lazy_->build_masks(lazy_->groups[g]);
    return lazy_->groups[g];
  }

  // The varlen path's per-row arguments of `layer`'s type (Cache::attend
  // checks the step is current first).
  const detail::VarlenRows& varlen_rows(int64_t layer) const {
    const size_t g = group_index(layer);
    std::lock_guard<std::mutex> lock(lazy_->mutex);
    lazy_->build_varlen(lazy_->groups[g]);
    return lazy_->groups[g].varlen;
  }

  const GroupPlan& group(int64_t layer) const {
    TORCH_CHECK(layer_group_ != nullptr,
                "step: expected a StepPlan made by prepare() but got a default-constructed one");
    TORCH_CHECK(layer >= 0 && layer < static_cast<int64_t>(layer_group_->size()),
                "layer: expected an index in [0, ", layer_group_->size(), ") but got ", layer);
    return groups_[static_cast<size_t>((*layer_group_)[static_cast<size_t>(layer)])];
  }

  std::vector<GroupPlan> groups_;
  std::shared_ptr<detail::LazyPlan> lazy_;  // masks and varlen rows, built on first use
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

namespace detail {

/// What a cache's storage (detail/storage.hpp) reads of a step beyond the
/// public accessors: the flat write index of per-row positions and the
/// generation staged views are stamped with.
struct StepAccess {
  static const at::Tensor& flat_index(const StepPlan& step, int64_t layer) {
    return step.group(layer).flat_index;
  }
  static uint64_t generation(const StepPlan& step) { return step.generation_; }
};

}  // namespace detail

}  // namespace statickv
