// The statickv operator library: TORCH_LIBRARY(statickv) with the cache
// write, its eager kernel and its fake (Meta) kernel. Kept apart from the
// Python bindings so a C++ consumer (AOTInductor) can link it alone.

#include "ops.hpp"

#include <statickv/checks.hpp>

#include <torch/library.h>

#include <vector>

namespace statickv::ops {

void check_cache_write(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                       const at::Tensor& value, const at::Tensor& slots) {
  detail::check_rank("keys", keys, 4, "[max_batch, kv_heads, slots, head_dim]");
  detail::check_tensor("values", values, keys.scalar_type(), keys.device());
  TORCH_CHECK(values.sizes() == keys.sizes(), "values: expected the shape of keys ", keys.sizes(),
              " but got ", values.sizes());
  TORCH_CHECK(keys.is_contiguous() && values.is_contiguous(),
              "keys, values: expected a layer's whole (contiguous) buffers but got strides ",
              keys.strides(), " and ", values.strides());
  detail::check_tensor("key", key, keys.scalar_type(), keys.device());
  detail::check_tensor("value", value, keys.scalar_type(), keys.device());
  detail::check_rank("key", key, 4, "[b, kv_heads, q, head_dim]");
  TORCH_CHECK(value.sizes() == key.sizes(), "value: expected the shape of key ", key.sizes(),
              " but got ", value.sizes());
  TORCH_CHECK(key.size(0) >= 1 && key.size(0) <= keys.size(0) && key.size(1) == keys.size(1) &&
                  key.size(3) == keys.size(3),
              "key: expected [b <= max_batch=", keys.size(0), ", kv_heads=", keys.size(1),
              ", q, head_dim=", keys.size(3), "] but got ", key.sizes());
  detail::check_tensor("slots", slots, at::kLong, keys.device());
  const std::vector<int64_t> per_row = {key.size(0), key.size(2)};
  TORCH_CHECK((slots.dim() == 1 && slots.size(0) == key.size(2)) ||
                  (slots.dim() == 2 && slots.sizes() == at::IntArrayRef(per_row)),
              "slots: expected [q] = [", key.size(2), "] or [b, q] = ", at::IntArrayRef(per_row),
              " but got ", slots.sizes());
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
