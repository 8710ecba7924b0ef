#pragma once
// The mask-free attention path: FlashAttention's variable-length form over a
// cache's own buffers (Note [attention paths], docs/design.md).
//
// at::_flash_attention_forward with cum_seq_q/cum_seq_k takes queries
// [total_q, heads, head_dim] and keys/values [total_k, kv_heads, head_dim],
// and row r's queries are query[cum_seq_q[r] .. cum_seq_q[r+1]), its keys
// key[cum_seq_k[r] .. cum_seq_k[r] + seqused_k[r]). With is_causal, query i
// of a row with n_q queries and n_k keys sees keys j <= i + n_k - n_q (the
// causal diagonal aligned to the end of the row's keys). Grouped-query heads
// are the kernel's: query head h reads kv head h / (heads / kv_heads).
//
// Everything here is plain ATen on fixed shapes (no host read of device
// values), so building the arguments is capturable (Invariant [graph-safe
// step]); the arguments are built by functions the CPU tests call, and
// tests/support.hpp emulates the kernel's semantics over them.

#include <ATen/ATen.h>

#include <cstdint>
#include <optional>
#include <tuple>

namespace statickv {

/// How Cache::attend computes attention (Note [attention paths]).
enum class AttentionPath {
  kAuto,    ///< the fastest exact path for the layer, device and dtype
  kMasked,  ///< scaled_dot_product_attention with the step's additive mask
  kVarlen,  ///< FlashAttention varlen over the cache buffers (CUDA, fp16/bf16, full layers)
};

/// How the varlen path hands the cache's keys to the kernel. The one place
/// this is decided is detail::kDefaultKvLayout.
enum class KvLayout {
  /// The [max_batch, kv_heads, slots, head_dim] buffer itself, as a strided
  /// [total, kv_heads, head_dim] view (token stride head_dim, head stride
  /// slots * head_dim), no copy: row r starts at token r * kv_heads * slots.
  kStridedView,
  /// A contiguous [b * view_len, kv_heads, head_dim] copy of the live rows'
  /// views: row r starts at token r * view_len. Costs one copy per layer.
  kPackedCopy,
};

namespace detail {

/// The layout the varlen path uses. The strided view needs no copy; whether
/// the kernel takes it as it is can only be seen on a GPU: tests/cuda/test_cuda.cpp
/// ("on CUDA, attend's varlen path equals the masked path in fp16 and
/// bf16") compares it with the packed copy and the masked path. If it fails
/// there, kPackedCopy here is the one-line fallback.
constexpr KvLayout kDefaultKvLayout = KvLayout::kStridedView;

#ifdef STATICKV_HAS_CUDA
/// Whether `device` is a CUDA device whose LibTorch FlashAttention kernels
/// run there (compute capability 8.0 or newer); src/cuda_attention.cpp.
bool flash_capable(const at::Device& device);
#else
inline bool flash_capable(const at::Device& /*device*/) { return false; }
#endif

/// One layer type's per-row arguments of a step, shared by its layers.
struct VarlenRows {
  at::Tensor cum_seq_q;  ///< int32 [b + 1]: where each row's real queries start when packed
  at::Tensor seqused_k;  ///< int32 [b]: keys each row reads (its newest real position + 1)
  at::Tensor order;      ///< int64 [b * q]: packed token k is token order[k] (q > 1 only)
  at::Tensor padded;     ///< bool [b * q, 1, 1]: padded tokens, zeroed when unpacking (q > 1)
};

/// The per-row arguments from the step's sanitized positions `sane` ([rows,
/// q], -1 = padding; rows = 1 for shared positions) for `b` live rows whose
/// views expose `view_len` slots. `arange32` is int32 [>= b + 1], 0, 1, 2...
/// A row's real queries must be consecutive positions in token order (any
/// padding before or after them): packing them in order and reading keys up
/// to the newest makes FA's end-aligned causal mask the cache's rule
/// slot_pos <= q_pos (Note [attention paths]).
inline VarlenRows varlen_rows(const at::Tensor& sane, int64_t b, int64_t view_len,
                              const at::Tensor& arange32) {
  const int64_t q = sane.size(1);
  const at::Tensor pos = sane.size(0) == b ? sane : sane.expand({b, q});
  VarlenRows rows;
  if (q == 1) {
    // One query per row: no packing; a padded row (-1) reads 0 keys.
    rows.cum_seq_q = arange32.narrow(0, 0, b + 1);
    rows.seqused_k = pos.reshape({b}).add(1).clamp_max_(view_len).to(at::kInt);
    return rows;
  }
  const at::Tensor real = pos.ge(0);  // [b, q]
  rows.cum_seq_q = at::cat({arange32.narrow(0, 0, 1), real.sum(1).cumsum(0).to(at::kInt)});
  rows.seqused_k = pos.amax(1).add_(1).clamp_max_(view_len).to(at::kInt);
  // A stable sort puts every row's real tokens first, in row-major order:
  // exactly the packed order cum_seq_q describes. Fixed shapes, no host sync.
  rows.order = at::argsort(real.view(-1).to(at::kInt), /*stable=*/true, /*dim=*/0,
                           /*descending=*/true);
  rows.padded = real.logical_not().view({b * q, 1, 1});
  return rows;
}

/// Everything one at::_flash_attention_forward call of the varlen path takes,
/// plus what unpack_varlen needs to give back [b, heads, q, head_dim].
struct VarlenArgs {
  at::Tensor query;                  ///< [b * q, heads, head_dim]: real tokens first (cum_seq_q)
  at::Tensor keys, values;           ///< [total_k, kv_heads, head_dim]
  at::Tensor cum_seq_q, cum_seq_k;   ///< int32 [b + 1]
  at::Tensor seqused_k;              ///< int32 [b]
  int64_t max_q = 0, max_k = 0;      ///< bounds: q, and the view length
  bool causal = false;               ///< q > 1
  at::Tensor order, padded;          ///< VarlenRows' (q > 1 only)
  int64_t batch = 0, query_len = 0;  ///< b, q of the unpacked output
  KvLayout layout = KvLayout::kStridedView;
};

/// keys: a KV view [b, kv_heads, view_len, head_dim] of a buffer [max_batch,
/// kv_heads, slots, head_dim] (the view's strides are the buffer's).
/// kStridedView: the view over the same memory as [total, kv_heads,
/// head_dim] with strides [head_dim, slots * head_dim, 1], where token t of
/// kv head h is at element t * head_dim + h * slots * head_dim; row r, slot
/// s, head h is at ((r * kv_heads + h) * slots + s) * head_dim, so row r's
/// keys start at token r * kv_heads * slots, and total = (b - 1) * kv_heads
/// * slots + slots ends exactly at the end of the batch prefix.
inline at::Tensor varlen_keys(const at::Tensor& keys, KvLayout layout) {
  const int64_t b = keys.size(0), heads = keys.size(1), dim = keys.size(3);
  if (layout == KvLayout::kPackedCopy) {
    return keys.transpose(1, 2).reshape({b * keys.size(2), heads, dim});
  }
  const int64_t slots = keys.stride(1) / dim;
  return keys.as_strided({(b - 1) * heads * slots + slots, heads, dim}, {dim, slots * dim, 1});
}

/// Where each row's keys start, in tokens of varlen_keys(keys, layout):
/// int32 [b + 1] (the last entry only closes the list; seqused_k bounds
/// every row).
inline at::Tensor varlen_key_starts(const at::Tensor& keys, KvLayout layout,
                                    const at::Tensor& arange32) {
  const int64_t b = keys.size(0);
  const int64_t per_row = layout == KvLayout::kPackedCopy
                              ? keys.size(2)
                              : keys.size(1) * (keys.stride(1) / keys.size(3));
  return arange32.narrow(0, 0, b + 1).mul(per_row);
}

/// query [b, heads, q, head_dim] in the packed token order of `rows`.
inline at::Tensor varlen_query(const at::Tensor& query, const VarlenRows& rows) {
  const int64_t b = query.size(0), heads = query.size(1), q = query.size(2);
  const int64_t dim = query.size(3);
  at::Tensor tokens = query.transpose(1, 2).reshape({b * q, heads, dim});
  if (q > 1) return tokens.index_select(0, rows.order);
  return tokens.stride(-1) == 1 ? tokens : tokens.contiguous();
}

/// The kernel's packed output [total_q, heads, head_dim] back to [b, heads,
/// q, head_dim]; padded tokens get 0 (the kernel leaves the packed tail
/// unwritten).
inline at::Tensor unpack_varlen(const VarlenArgs& args, const at::Tensor& packed) {
  const int64_t b = args.batch, q = args.query_len;
  const int64_t heads = packed.size(1), dim = packed.size(2);
  if (q == 1) return packed.reshape({b, heads, 1, dim});
  at::Tensor tokens = at::empty_like(packed).index_copy_(0, args.order, packed);
  tokens.masked_fill_(args.padded, 0);
  return tokens.view({b, q, heads, dim}).transpose(1, 2);
}

/// Runs FlashAttention's varlen kernel (CUDA, fp16/bf16) on `args` and
/// returns [b, heads, q, head_dim]. Scale: 1/sqrt(head_dim), as sdpa.
inline at::Tensor flash_varlen(const VarlenArgs& args) {
  auto result = at::_flash_attention_forward(
      args.query, args.keys, args.values, args.cum_seq_q, args.cum_seq_k, args.max_q, args.max_k,
      /*dropout_p=*/0.0, args.causal, /*return_debug_mask=*/false, /*scale=*/std::nullopt,
      /*window_size_left=*/std::nullopt, /*window_size_right=*/std::nullopt, args.seqused_k);
  return unpack_varlen(args, std::get<0>(result));
}

}  // namespace detail
}  // namespace statickv
