#pragma once
// Mask helpers for attention kernels that take something other than the bool
// masks a StepPlan produces. StepPlan masks are bool, true = attend, shaped
// [batch, 1, q, kv] (the convention of scaled_dot_product_attention). These
// helpers fold in a user's own padding and convert to the additive form; all
// are plain device ops on static shapes, safe inside a captured step.

#include <statickv/detail/checks.hpp>

#include <ATen/ATen.h>

#include <c10/util/BFloat16.h>
#include <c10/util/Half.h>

#include <limits>

namespace statickv {

namespace detail {

// The most negative finite value of a floating dtype.
inline double lowest_value(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return static_cast<double>(std::numeric_limits<c10::Half>::lowest());
    case at::kBFloat16:
      return static_cast<double>(std::numeric_limits<c10::BFloat16>::lowest());
    case at::kFloat:
      return static_cast<double>(std::numeric_limits<float>::lowest());
    case at::kDouble:
      return std::numeric_limits<double>::lowest();
    default:
      TORCH_CHECK(false, "dtype: expected Half, BFloat16, Float or Double but got ", dtype);
  }
}

// The two values of an additive mask as 0-dim tensors in `dtype` on
// `device`: 0 (attend) and the dtype's lowest finite value (blocked). With
// them, at::where(mask, attend, blocked) makes the mask in one op; a cache
// makes them once and reuses them every step.
struct AdditiveValues {
  at::Tensor attend, blocked;
};

inline AdditiveValues additive_values(at::ScalarType dtype, const at::Device& device) {
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  return {at::zeros({}, opts), at::full({}, lowest_value(dtype), opts)};
}

inline void check_bool_mask(const at::Tensor& mask) {
  check_dtype("mask", mask, at::kBool);
  check_rank("mask", mask, 4, "shape [b, 1, q, kv]");
}

/// A [b, n] bool `name` tensor on the mask's device, n = mask.size(dim).
inline void check_keep(const char* name, const at::Tensor& keep, const at::Tensor& mask,
                       int64_t dim) {
  check_dtype(name, keep, at::kBool);
  TORCH_CHECK(keep.dim() == 2 && keep.size(0) == mask.size(0) && keep.size(1) == mask.size(dim),
              name, ": expected shape [", mask.size(0), ", ", mask.size(dim), "] but got ",
              keep.sizes());
  check_device(name, keep, mask.device(), " (the mask's)");
}

}  // namespace detail

/// Additive float mask: 0 where `mask` is true, the dtype's lowest finite
/// value where it is false (finite, so a fully masked row stays NaN-free in
/// kernels that add before a softmax). mask: bool [b, 1, q, kv].
inline at::Tensor additive_mask(const at::Tensor& mask, at::ScalarType dtype) {
  detail::check_dtype("mask", mask, at::kBool);
  const detail::AdditiveValues values = detail::additive_values(dtype, mask.device());
  return at::where(mask, values.attend, values.blocked);
}

/// Masks out keys a user marks as padding. key_keep: bool [b, kv], true =
/// a real key, aligned with the same views as `mask` [b, 1, q, kv].
inline at::Tensor fold_key_padding(const at::Tensor& mask, const at::Tensor& key_keep) {
  detail::check_bool_mask(mask);
  detail::check_keep("key_keep", key_keep, mask, /*dim=*/3);
  return mask.logical_and(key_keep.view({mask.size(0), 1, 1, mask.size(3)}));
}

/// Masks out queries a user marks as padding (their rows attend to nothing).
/// query_keep: bool [b, q], true = a real query.
inline at::Tensor fold_query_padding(const at::Tensor& mask, const at::Tensor& query_keep) {
  detail::check_bool_mask(mask);
  detail::check_keep("query_keep", query_keep, mask, /*dim=*/2);
  return mask.logical_and(query_keep.view({mask.size(0), 1, mask.size(2), 1}));
}

}  // namespace statickv
