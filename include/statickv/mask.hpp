#pragma once
// Mask helpers for attention kernels that take something other than the bool
// masks a Step produces. Step masks are bool, true = attend, shaped
// [batch, 1, q, kv] (the convention of scaled_dot_product_attention). These
// helpers fold in a user's own padding and convert to the additive form; all
// are plain device ops on static shapes, safe inside a captured step.

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
  TORCH_CHECK(mask.defined() && mask.scalar_type() == at::kBool,
              "mask: expected a Bool tensor but got ",
              mask.defined() ? c10::toString(mask.scalar_type()) : "undefined");
  TORCH_CHECK(mask.dim() == 4, "mask: expected shape [b, 1, q, kv] but got ", mask.sizes());
}

}  // namespace detail

/// Additive float mask: 0 where `mask` is true, the dtype's lowest finite
/// value where it is false (finite, so a fully masked row stays NaN-free in
/// kernels that add before a softmax). mask: bool [b, 1, q, kv].
inline at::Tensor additive_mask(const at::Tensor& mask, at::ScalarType dtype) {
  TORCH_CHECK(mask.defined() && mask.scalar_type() == at::kBool,
              "mask: expected a defined Bool tensor but got ",
              mask.defined() ? c10::toString(mask.scalar_type()) : "undefined");
  const detail::AdditiveValues values = detail::additive_values(dtype, mask.device());
  return at::where(mask, values.attend, values.blocked);
}

/// Masks out keys a user marks as padding. key_keep: bool [b, kv], true =
/// a real key, aligned with the same views as `mask` [b, 1, q, kv].
inline at::Tensor fold_key_padding(const at::Tensor& mask, const at::Tensor& key_keep) {
  detail::check_bool_mask(mask);
  TORCH_CHECK(key_keep.defined() && key_keep.scalar_type() == at::kBool,
              "key_keep: expected a Bool tensor but got ",
              key_keep.defined() ? c10::toString(key_keep.scalar_type()) : "undefined");
  TORCH_CHECK(
      key_keep.dim() == 2 && key_keep.size(0) == mask.size(0) && key_keep.size(1) == mask.size(3),
      "key_keep: expected shape [", mask.size(0), ", ", mask.size(3), "] but got ",
      key_keep.sizes());
  TORCH_CHECK(key_keep.device() == mask.device(), "key_keep: expected device ", mask.device(),
              " but got ", key_keep.device());
  return mask.logical_and(key_keep.view({mask.size(0), 1, 1, mask.size(3)}));
}

/// Masks out queries a user marks as padding (their rows attend to nothing).
/// query_keep: bool [b, q], true = a real query.
inline at::Tensor fold_query_padding(const at::Tensor& mask, const at::Tensor& query_keep) {
  detail::check_bool_mask(mask);
  TORCH_CHECK(query_keep.defined() && query_keep.scalar_type() == at::kBool,
              "query_keep: expected a Bool tensor but got ",
              query_keep.defined() ? c10::toString(query_keep.scalar_type()) : "undefined");
  TORCH_CHECK(query_keep.dim() == 2 && query_keep.size(0) == mask.size(0) &&
                  query_keep.size(1) == mask.size(2),
              "query_keep: expected shape [", mask.size(0), ", ", mask.size(2), "] but got ",
              query_keep.sizes());
  TORCH_CHECK(query_keep.device() == mask.device(), "query_keep: expected device ", mask.device(),
              " but got ", query_keep.device());
  return mask.logical_and(query_keep.view({mask.size(0), 1, mask.size(2), 1}));
}

}  // namespace statickv
