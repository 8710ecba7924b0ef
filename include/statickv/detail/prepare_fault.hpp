#pragma once
// Test-only fault injection into Cache::prepare() (Note [prepare is all or
// nothing], docs/design.md). Not part of the public API: only the tests
// include this header; the cache calls prepare_fault_point() at each point.

#include <cstdint>
#include <functional>

namespace statickv::detail {

/// Points inside prepare() where a test can make it fail.
enum class PreparePoint {
  kBeforeBookkeeping,   ///< slots planned, nothing written yet
  kAfterSeqLengths,     ///< seq_lengths advanced
  kAfterSlotPositions,  ///< a layer type's slot_positions written
  kAfterMasks,  ///< the step planned (masks too with eager_masks), generation not yet advanced
};

/// When set, prepare() calls it at each PreparePoint, and whatever it throws
/// propagates as a LibTorch failure would. Process-wide and not
/// synchronized: set it only while no other thread prepares a step. Empty
/// (no cost but a test) in normal use.
inline std::function<void(PreparePoint)>& prepare_fault_hook() {
  static std::function<void(PreparePoint)> hook;
  return hook;
}

inline void prepare_fault_point(PreparePoint point) {
  const auto& hook = prepare_fault_hook();
  if (hook) hook(point);
}

}  // namespace statickv::detail
