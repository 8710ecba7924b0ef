#pragma once
// OpCounter: what a decode step launches, counted from the operators this
// thread dispatches (RecordFunction, the profiler's mechanism), so a test
// or a benchmark can hold a step to a budget (Note [counted step],
// docs/design.md).
//
// Three tallies, each by operator name:
//   - launches: operators that do work on the device. An operator counts
//     when nothing it calls counts (the leaves of the call tree), so a
//     composite (at::linear, at::rms_norm on the CPU) counts as what it
//     decomposes into and a wrapper cannot hide what it calls. Left out, by
//     name in left_out(): views and metadata ops (a schema whose result
//     aliases an input without writing it: view, narrow, transpose, ...),
//     allocations (empty, empty_strided, resize_, ...) and composites that
//     did nothing (to() to the same dtype, contiguous() of a contiguous
//     tensor, reshape() as a view).
//   - host_copies: copies to the CPU, counted once at their outermost call:
//     to, _to_copy with a CPU device argument, copy_ into a CPU tensor from
//     another device.
//   - syncs: operators that make the host wait for the device: item,
//     _local_scalar_dense, nonzero, masked_select, unique (every overload),
//     equal, is_nonzero, and repeat_interleave without an output_size.
// statickv's own kernels (statickv::rotary_write, the reference decoder's
// statickv::rms_norm) record themselves under those names.
//
// On CUDA the devices tell a copy to the host from any other copy. On the
// CPU, where every tensor lives on the host, the counter takes the counted
// scope to be the device step: a to() with a CPU device argument is the
// step's copy out, and item() and its kin are syncs whatever they read.
// Count a step on the CPU from inputs already in place, then.
//
// Compiled (src/op_counter.cpp): link statickv::statickv.

#include <ATen/ATen.h>
#include <ATen/core/dispatch/Dispatcher.h>
#include <ATen/record_function.h>

#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <unordered_map>
#include <vector>

namespace statickv {

/// What an OpCounter saw: totals and each operator's count.
struct OpCounts {
  int64_t launches = 0;
  int64_t host_copies = 0;
  int64_t syncs = 0;
  /// Launches by region, then operator name. A region is the innermost
  /// user scope open around the launch (RECORD_USER_SCOPE, Python's
  /// torch.profiler.record_function; LlamaModel::forward opens
  /// "statickv::layer" around each layer); "" outside any.
  std::map<std::string, std::map<std::string, int64_t>> launched;
  std::map<std::string, int64_t> copies;    ///< host copies by operator name
  std::map<std::string, int64_t> synced;    ///< syncs by operator name
  std::map<std::string, int64_t> left_out;  ///< views, metadata, allocations seen

  /// Launches inside `region` ("" = outside every region).
  int64_t launches_in(const std::string& region) const {
    int64_t total = 0;
    if (auto it = launched.find(region); it != launched.end()) {
      for (const auto& entry : it->second) total += entry.second;
    }
    return total;
  }
};

namespace detail {

/// One open operator on this thread's call stack; the counter's state.
struct OpFrame;
struct CounterState {
  OpCounts counts;
  std::vector<OpFrame*> stack;
  bool proxy = true;
};

}  // namespace detail

/// Counts what this thread launches, copies to the host and syncs on while
/// it lives (see the file comment). `device`: the device the counted step
/// runs on; the CPU makes the counter the proxy described above. One
/// counter per thread at a time.
class OpCounter {
 public:
  explicit OpCounter(at::Device device = at::kCPU);
  ~OpCounter();
  OpCounter(const OpCounter&) = delete;
  OpCounter& operator=(const OpCounter&) = delete;

  const OpCounts& counts() const { return state_.counts; }
  int64_t launches() const { return state_.counts.launches; }
  int64_t host_copies() const { return state_.counts.host_copies; }
  int64_t syncs() const { return state_.counts.syncs; }
  /// Starts the tallies over (the callback stays).
  void reset() { state_.counts = OpCounts{}; }

 private:
  detail::CounterState state_;
  at::CallbackHandle handle_;
};

}  // namespace statickv
