#pragma once
// The fused decode prepare (Note [decode prepare], docs/design.md): one
// kernel does what Cache::prepare() does in about fourteen ATen ops for a
// step of one query per row: sanitize the positions, map them to each layer
// type's slots, advance seq_lengths, write slot_positions, and make the
// per-row write index and the varlen path's key counts. On CUDA it is one
// small kernel on the current stream (src/decode_prepare.cu); on the CPU
// its twin (src/decode_prepare.cpp) runs the same loop. Compiled: link
// statickv::statickv. Not public API: Cache::prepare() is its one caller.

#include <ATen/ATen.h>

#include <cstdint>
#include <vector>

namespace statickv::detail {

/// The most layer types one fused prepare serves (a cache has one or two).
constexpr size_t kDecodePrepareGroups = 4;

/// One layer type's part: its bookkeeping (written) and its outputs.
struct DecodePrepareGroup {
  at::Tensor slot_positions;  ///< int64 [max_batch, slots]: row r's slot s gets the position
  at::Tensor slots;           ///< out: int64 [rows, 1]
  at::Tensor flat_index;      ///< out: int64 [b * kv_heads] (per-row positions), else undefined
  at::Tensor seqused_k;       ///< out: int32 [b], min(position + 1, view_len)
  int64_t ring = 0;           ///< slot = p % ring (0: p), for p >= 0
  int64_t scratch = 0;        ///< the slot of a position that is not stored
  int64_t view_len = 0;
};

/// The whole step: `positions` int64 [rows, 1] (rows = 1: shared by every
/// row, else b), sanitized into `sane` [rows, 1] (-1 for a position below
/// 0 or at max_len and past it); `seq_lengths` int64 [max_batch], whose
/// first b entries advance to position + 1 where that is larger.
struct DecodePrepare {
  at::Tensor positions, sane, seq_lengths;
  int64_t live_batch = 0, max_len = 0, kv_heads = 0;
  std::vector<DecodePrepareGroup> groups;
};

/// Runs the step's kernel on the positions' device, recorded for OpCounter
/// as one operator, statickv::decode_prepare. Arguments are the cache's own,
/// checked by prepare() before: this only dispatches.
void decode_prepare(const DecodePrepare& p);

/// The CPU twin: one loop over the live rows.
void decode_prepare_cpu(const DecodePrepare& p);

#ifdef STATICKV_HAS_CUDA
/// One thread per live row, on the current CUDA stream.
void decode_prepare_cuda(const DecodePrepare& p);
#endif

}  // namespace statickv::detail
