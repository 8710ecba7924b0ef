// The statickv operator library: TORCH_LIBRARY(statickv) with the cache
// write, its eager kernel and its fake (Meta) kernel. Kept apart from the
// Python bindings so a C++ consumer (AOTInductor) can link it alone.

#include "ops.hpp"

#include <statickv/detail/checks.hpp>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <vector>

namespace statickv::ops {

// Sizes are read as SymInts (sym_size, sym_sizes): in eager mode they are
// plain integers, and under torch.export's fake tensors a comparison such as
// b <= max_batch becomes a range guard instead of pinning the batch to the
// example's size, so a dynamic batch (torch.export.Dim) stays dynamic.
void check_cache_write(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                       const at::Tensor& value, const at::Tensor& slots) {
  detail::check_rank("keys", keys, 4, "[max_batch, kv_heads, slots, head_dim]");
  detail::check_tensor("values", values, keys.scalar_type(), keys.device());
  TORCH_CHECK(values.sym_sizes() == keys.sym_sizes(), "values: expected the shape of keys ",
              keys.sym_sizes(), " but got ", values.sym_sizes());
  TORCH_CHECK(keys.is_contiguous() && values.is_contiguous(),
              "keys, values: expected a layer's whole (contiguous) buffers but got strides ",
              keys.sym_strides(), " and ", values.sym_strides());
  detail::check_tensor("key", key, keys.scalar_type(), keys.device());
  detail::check_tensor("value", value, keys.scalar_type(), keys.device());
  detail::check_rank("key", key, 4, "[b, kv_heads, q, head_dim]");
  TORCH_CHECK(value.sym_sizes() == key.sym_sizes(), "value: expected the shape of key ",
              key.sym_sizes(), " but got ", value.sym_sizes());
  TORCH_CHECK(key.sym_size(0) >= 1 && key.sym_size(0) <= keys.sym_size(0) &&
                  key.sym_size(1) == keys.sym_size(1) && key.sym_size(3) == keys.sym_size(3),
              "key: expected [b <= max_batch=", keys.sym_size(0), ", kv_heads=", keys.sym_size(1),
              ", q, head_dim=", keys.sym_size(3), "] but got ", key.sym_sizes());
  detail::check_tensor("slots", slots, at::kLong, keys.device());
  const std::vector<c10::SymInt> per_row = {key.sym_size(0), key.sym_size(2)};
  TORCH_CHECK((slots.dim() == 1 && slots.sym_size(0) == key.sym_size(2)) ||
                  (slots.dim() == 2 && slots.sym_sizes() == c10::SymIntArrayRef(per_row)),
              "slots: expected [q] = [", key.sym_size(2),
              "] or [b, q] = ", c10::SymIntArrayRef(per_row), " but got ", slots.sym_sizes());
}

void cache_write(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                 const at::Tensor& value, const at::Tensor& slots) {
  check_cache_write(keys, values, key, value, slots);
  const int64_t b = key.size(0);
  if (slots.dim() == 1) {
    keys.narrow(0, 0, b).index_copy_(2, slots, key);
    values.narrow(0, 0, b).index_copy_(2, slots, value);
    return;
  }
  // Per-row slots: one flat index (row * kv_heads + head) * slots_len + slot
  // into a [-1, head_dim] view of each buffer, as Cache::update does.
  const int64_t heads = keys.size(1);
  const int64_t head_dim = keys.size(3);
  const at::Tensor base = at::arange(b * heads, slots.options()).mul_(keys.size(2));
  const at::Tensor index = base.view({b, heads, 1}).add(slots.unsqueeze(1)).view(-1);
  keys.view({-1, head_dim}).index_copy_(0, index, key.reshape({-1, head_dim}));
  values.view({-1, head_dim}).index_copy_(0, index, value.reshape({-1, head_dim}));
}

void check_registered() {
  TORCH_CHECK(c10::Dispatcher::singleton().findSchema({"statickv::cache_write", ""}).has_value(),
              "statickv::cache_write is not registered: link the operator library (CMake target "
              "statickv_ops) or import statickv in Python");
}

namespace {

// Eager kernel behind the schema (buffers come in as mutable references).
void cache_write_kernel(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                        const at::Tensor& value, const at::Tensor& slots) {
  cache_write(keys, values, key, value, slots);
}

// Fake (Meta) kernel: no data, only the checks; the op returns nothing and
// its mutations keep every shape, so there is nothing else to propagate.
void cache_write_fake(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                      const at::Tensor& value, const at::Tensor& slots) {
  check_cache_write(keys, values, key, value, slots);
}

}  // namespace

TORCH_LIBRARY(statickv, m) {
  m.def(
      "cache_write(Tensor(a!) keys, Tensor(b!) values, Tensor key, Tensor value, Tensor slots) "
      "-> ()");
}

TORCH_LIBRARY_IMPL(statickv, CPU, m) { m.impl("cache_write", cache_write_kernel); }
TORCH_LIBRARY_IMPL(statickv, CUDA, m) { m.impl("cache_write", cache_write_kernel); }
TORCH_LIBRARY_IMPL(statickv, Meta, m) { m.impl("cache_write", cache_write_fake); }

}  // namespace statickv::ops
