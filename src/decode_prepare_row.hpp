#pragma once
// One live row of the fused decode prepare (include/statickv/detail/
// decode_prepare.hpp; Note [decode prepare], docs/design.md), for both of
// its kernels: the CPU loop (decode_prepare.cpp) and the CUDA kernel
// (decode_prepare.cu) run these same lines, so the twin is the kernel's
// specification. Each row writes only its own bookkeeping; the outputs of a
// shared position (rows == 1) are written by row 0. Free of ATen, so the
// CUDA kernel compiles without it (nvcc spends about a minute on ATen's
// headers; decode_prepare.cpp turns the tensors into these pointers).

#include <c10/macros/Macros.h>

#include <cstddef>
#include <cstdint>

#ifdef STATICKV_HAS_CUDA
#include <cuda_runtime_api.h>
#endif

namespace statickv::detail {

/// kDecodePrepareGroups (decode_prepare.hpp, which includes ATen);
/// decode_prepare.cpp checks that the two agree.
constexpr std::size_t kPrepareArgsGroups = 4;

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
  PrepareGroupArgs group[kPrepareArgsGroups];
};

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

#ifdef STATICKV_HAS_CUDA
/// One thread per live row on `stream` (decode_prepare.cu).
void launch_decode_prepare(const PrepareArgs& a, cudaStream_t stream);
#endif

}  // namespace statickv::detail
