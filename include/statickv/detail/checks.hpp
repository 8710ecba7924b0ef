#pragma once
// The tensor-check vocabulary: every entry point of the library (and of the
// reference decoder) checks its tensor arguments with these few helpers, in
// one block at its top, so each rule is written once and every message has
// the same form: "<argument>: expected <what> but got <actual>".
//
// They raise c10::Error through TORCH_CHECK (Invariant [checked before
// written], docs/design.md) and never touch device memory: a check costs a
// few host comparisons, so it may run inside a captured step.

#include <ATen/ATen.h>

#include <cstdint>
#include <initializer_list>
#include <sstream>
#include <string>

namespace statickv::detail {

/// "[2, 3]", or "[] (undefined)" for an undefined tensor, for messages.
inline std::string shape_of(const at::Tensor& t) {
  if (!t.defined()) return "[] (undefined)";
  std::ostringstream out;
  out << t.sizes();
  return out.str();
}

/// "Float", or "undefined", for messages.
inline std::string dtype_of(const at::Tensor& t) {
  return t.defined() ? std::string(c10::toString(t.scalar_type())) : "undefined";
}

inline void check_defined(const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.defined(), name, ": expected a defined tensor but got an undefined one");
}

/// Undefined tensors fail here too ("but got undefined"). `whose` names
/// where the expected dtype comes from (" (the query's)").
inline void check_dtype(const char* name, const at::Tensor& t, at::ScalarType dtype,
                        const char* whose = "") {
  TORCH_CHECK(t.defined() && t.scalar_type() == dtype, name, ": expected dtype ", dtype, whose,
              " but got ", dtype_of(t));
}

/// `whose` names where the expected device comes from (" (the query's)").
inline void check_device(const char* name, const at::Tensor& t, const at::Device& device,
                         const char* whose = "") {
  TORCH_CHECK(t.device() == device, name, ": expected device ", device, whose, " but got ",
              t.device());
}

inline void check_dense(const char* name, const at::Tensor& t) {
  TORCH_CHECK(t.layout() == at::kStrided, name,
              ": expected a strided (dense) tensor but got layout ", t.layout());
}

/// `layout` spells the expected shape ("[b, heads, q, head_dim]").
inline void check_rank(const char* name, const at::Tensor& t, int64_t dim, const char* layout) {
  TORCH_CHECK(t.defined() && t.dim() == dim, name, ": expected ", layout, " but got ", shape_of(t));
}

/// Defined, of `dtype`, on `device`, dense: the common case of an input the
/// cache owns the rules for.
inline void check_tensor(const char* name, const at::Tensor& t, at::ScalarType dtype,
                         const at::Device& device) {
  check_defined(name, t);
  check_dtype(name, t, dtype);
  check_device(name, t, device);
  check_dense(name, t);
}

}  // namespace statickv::detail
