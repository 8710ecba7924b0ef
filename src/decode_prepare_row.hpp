#pragma once
// One live row of the fused decode prepare (include/statickv/detail/
// decode_prepare.hpp; Note [decode prepare], docs/design.md), for both of
// its kernels: the CPU loop (decode_prepare.cpp) and the CUDA kernel
// (decode_prepare.cu) run these same lines, so the twin is the kernel's
// specification. Each row writes only its own bookkeeping; the outputs of a
// shared position (rows == 1) are written by row 0.

#include <statickv/detail/decode_prepare.hpp>

#include <c10/macros/Macros.h>

#include <cstdint>

namespace statickv::detail {

/// A layer type's part, as raw pointers into contiguous tensors.
struct PrepareGroupArgs {
  int64_t* slot_positions = nullptr;  // [max_batch, slots_len]
  int64_t slots_len = 0;
  int64_t* slots = nullptr;       // [rows]
  int64_t* flat_index = nullptr;  // [b * kv_heads] or null
  int32_t* seqused_k = nullptr;   // [b]
  int64_t ring = 0, scratch = 0, view_len = 0;
};

struct PrepareArgs {
  const int64_t* positions = nullptr;  // row r at positions[r * position_stride]
  int64_t position_stride = 0;
  int64_t* sane = nullptr;         // [rows]
  int64_t* seq_lengths = nullptr;  // [max_batch]
  int64_t rows = 0, live_batch = 0, max_len = 0, kv_heads = 0;
  int groups = 0;
  PrepareGroupArgs group[kDecodePrepareGroups];
};

/// The pointers of `p`'s tensors (the cache's own: contiguous, on one device).
inline PrepareArgs prepare_args(const DecodePrepare& p) {
  PrepareArgs a;
  a.positions = p.positions.data_ptr<int64_t>();
  a.position_stride = p.positions.stride(0);
  a.sane = p.sane.data_ptr<int64_t>();
  a.seq_lengths = p.seq_lengths.data_ptr<int64_t>();
  a.rows = p.positions.size(0);
  a.live_batch = p.live_batch;
  a.max_len = p.max_len;
  a.kv_heads = p.kv_heads;
  a.groups = static_cast<int>(p.groups.size());
  for (size_t g = 0; g < p.groups.size(); ++g) {
    const DecodePrepareGroup& in = p.groups[g];
    PrepareGroupArgs& out = a.group[g];
    out.slot_positions = in.slot_positions.data_ptr<int64_t>();
    out.slots_len = in.slot_positions.size(1);
    out.slots = in.slots.data_ptr<int64_t>();
    out.flat_index = in.flat_index.defined() ? in.flat_index.data_ptr<int64_t>() : nullptr;
    out.seqused_k = in.seqused_k.data_ptr<int32_t>();
    out.ring = in.ring;
    out.scratch = in.scratch;
    out.view_len = in.view_len;
  }
  return a;
}

/// Row r of the step: prepare()'s ops for one query, in the same order.
C10_HOST_DEVICE inline void prepare_row(const PrepareArgs& a, int64_t r) {
  const int64_t src = a.rows == 1 ? 0 : r;
  const bool owner = src == r;
  const int64_t p = a.positions[src * a.position_stride];
  const int64_t s = (p >= 0 && p < a.max_len) ? p : -1;  // sanitized: -1 is not stored
  if (owner) a.sane[src] = s;
  if (s + 1 > a.seq_lengths[r]) a.seq_lengths[r] = s + 1;
  for (int g = 0; g < a.groups; ++g) {
    const PrepareGroupArgs& G = a.group[g];
    const int64_t slot = s < 0 ? G.scratch : (G.ring > 0 ? s % G.ring : s);
    if (owner) G.slots[src] = slot;
    G.slot_positions[r * G.slots_len + slot] = s;
    if (G.flat_index != nullptr) {
      for (int64_t h = 0; h < a.kv_heads; ++h) {
        G.flat_index[r * a.kv_heads + h] = (r * a.kv_heads + h) * G.slots_len + slot;
      }
    }
    G.seqused_k[r] = static_cast<int32_t>(s + 1 < G.view_len ? s + 1 : G.view_len);
  }
}

}  // namespace statickv::detail
