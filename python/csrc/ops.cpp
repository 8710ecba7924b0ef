// The statickv operator library: TORCH_LIBRARY(statickv) with the cache
// write, its eager kernel and its fake (Meta) kernel. Kept apart from the
// Python bindings so a C++ consumer (AOTInductor) can link it alone.

#include "ops.hpp"

#include <statickv/detail/checks.hpp>
#include <statickv/detail/quantize.hpp>

#include <ATen/core/dispatch/Dispatcher.h>
#include <torch/library.h>

#include <utility>
#include <vector>

namespace statickv::ops {

// Sizes are read as SymInts (sym_size, sym_sizes): in eager mode they are
// plain integers, and under torch.export's fake tensors a comparison such as
// b <= max_batch becomes a range guard instead of pinning the batch to the
// example's size, so a dynamic batch (torch.export.Dim) stays dynamic.
namespace {

// The step's keys and values against one layer's buffers: key, value
// [b <= max_batch, kv_heads, q, head_dim] in `dtype` on the buffers' device,
// slots [q] or [b, q].
void check_step(const at::Tensor& keys, const at::Tensor& key, const at::Tensor& value,
                const at::Tensor& slots, at::ScalarType dtype) {
  detail::check_tensor("key", key, dtype, keys.device());
  detail::check_tensor("value", value, dtype, keys.device());
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

// One layer's two buffers: [max_batch, kv_heads, slots, head_dim], one dtype,
// contiguous (the per-row write addresses them flat).
void check_buffers(const at::Tensor& keys, const at::Tensor& values) {
  detail::check_rank("keys", keys, 4, "[max_batch, kv_heads, slots, head_dim]");
  detail::check_tensor("values", values, keys.scalar_type(), keys.device());
  TORCH_CHECK(values.sym_sizes() == keys.sym_sizes(), "values: expected the shape of keys ",
              keys.sym_sizes(), " but got ", values.sym_sizes());
  TORCH_CHECK(keys.is_contiguous() && values.is_contiguous(),
              "keys, values: expected a layer's whole (contiguous) buffers but got strides ",
              keys.sym_strides(), " and ", values.sym_strides());
}

// Writes source [b, heads, q, d] into rows 0..b-1 of buffer [max_batch,
// heads, slots, d] at slots [q] (every row) or [b, q] (per row: one flat
// index (row * heads + head) * slots_len + slot into a [-1, d] view, as
// Cache::update does).
void write_rows(const at::Tensor& buffer, const at::Tensor& source, const at::Tensor& slots) {
  const int64_t b = source.size(0);
  if (slots.dim() == 1) {
    buffer.narrow(0, 0, b).index_copy_(2, slots, source);
    return;
  }
  const int64_t heads = buffer.size(1);
  const int64_t width = buffer.size(3);
  const at::Tensor base = at::arange(b * heads, slots.options()).mul_(buffer.size(2));
  const at::Tensor index = base.view({b, heads, 1}).add(slots.unsqueeze(1)).view(-1);
  buffer.view({-1, width}).index_copy_(0, index, source.reshape({-1, width}));
}

// The stored format of a quantized layer's codes: int8 or float8 e4m3fn (its
// uint8 bits also taken, as the C++ cache allocates them).
KvStorage storage_of(const at::Tensor& codes) {
  const at::ScalarType t = codes.scalar_type();
  TORCH_CHECK(t == at::kChar || t == at::kFloat8_e4m3fn || t == at::kByte,
              "keys: expected quantized codes (int8, or float8_e4m3fn / its uint8 bits) but got ",
              t);
  return t == at::kChar ? KvStorage::kInt8 : KvStorage::kFp8E4m3;
}

}  // namespace

// Sizes are read as SymInts (sym_size, sym_sizes): in eager mode they are
// plain integers, and under torch.export's fake tensors a comparison such as
// b <= max_batch becomes a range guard instead of pinning the batch to the
// example's size, so a dynamic batch (torch.export.Dim) stays dynamic.
void check_cache_write(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                       const at::Tensor& value, const at::Tensor& slots) {
  check_buffers(keys, values);
  check_step(keys, key, value, slots, keys.scalar_type());
}

void cache_write(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                 const at::Tensor& value, const at::Tensor& slots) {
  check_cache_write(keys, values, key, value, slots);
  write_rows(keys, key, slots);
  write_rows(values, value, slots);
}

void check_cache_write_quantized(const at::Tensor& keys, const at::Tensor& values,
                                 const at::Tensor& key_scales, const at::Tensor& value_scales,
                                 const at::Tensor& key, const at::Tensor& value,
                                 const at::Tensor& slots) {
  check_buffers(keys, values);
  storage_of(keys);
  for (const auto& [name, scales] :
       {std::pair<const char*, const at::Tensor&>{"key_scales", key_scales},
        std::pair<const char*, const at::Tensor&>{"value_scales", value_scales}}) {
    detail::check_tensor(name, scales, at::kFloat, keys.device());
    const std::vector<c10::SymInt> shape = {keys.sym_size(0), keys.sym_size(1), keys.sym_size(2),
                                            c10::SymInt(1)};
    TORCH_CHECK(scales.sym_sizes() == c10::SymIntArrayRef(shape) && scales.is_contiguous(), name,
                ": expected a contiguous [max_batch, kv_heads, slots, 1] = ",
                c10::SymIntArrayRef(shape), " float32 buffer but got ", scales.sym_sizes());
  }
  TORCH_CHECK(at::isFloatingType(key.scalar_type()) && key.scalar_type() != at::kDouble &&
                  !at::isFloat8Type(key.scalar_type()),
              "key: expected the compute dtype (float32, float16 or bfloat16) but got ",
              key.scalar_type());
  check_step(keys, key, value, slots, key.scalar_type());
}

void cache_write_quantized(const at::Tensor& keys, const at::Tensor& values,
                           const at::Tensor& key_scales, const at::Tensor& value_scales,
                           const at::Tensor& key, const at::Tensor& value,
                           const at::Tensor& slots) {
  check_cache_write_quantized(keys, values, key_scales, value_scales, key, value, slots);
  const KvStorage storage = storage_of(keys);
  // float8 is written through its uint8 bits (no float8 index_copy_ on the
  // CPU), as QuantizedStorage writes it.
  auto bits = [](const at::Tensor& t) {
    return t.scalar_type() == at::kFloat8_e4m3fn ? t.view(at::kByte) : t;
  };
  const auto [key_codes, key_scale] = detail::quantize(key, storage);
  const auto [value_codes, value_scale] = detail::quantize(value, storage);
  write_rows(bits(keys), key_codes, slots);
  write_rows(key_scales, key_scale, slots);
  write_rows(bits(values), value_codes, slots);
  write_rows(value_scales, value_scale, slots);
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

void cache_write_quantized_kernel(const at::Tensor& keys, const at::Tensor& values,
                                  const at::Tensor& key_scales, const at::Tensor& value_scales,
                                  const at::Tensor& key, const at::Tensor& value,
                                  const at::Tensor& slots) {
  cache_write_quantized(keys, values, key_scales, value_scales, key, value, slots);
}

// Fake (Meta) kernel: no data, only the checks; the op returns nothing and
// its mutations keep every shape, so there is nothing else to propagate.
void cache_write_fake(const at::Tensor& keys, const at::Tensor& values, const at::Tensor& key,
                      const at::Tensor& value, const at::Tensor& slots) {
  check_cache_write(keys, values, key, value, slots);
}

void cache_write_quantized_fake(const at::Tensor& keys, const at::Tensor& values,
                                const at::Tensor& key_scales, const at::Tensor& value_scales,
                                const at::Tensor& key, const at::Tensor& value,
                                const at::Tensor& slots) {
  check_cache_write_quantized(keys, values, key_scales, value_scales, key, value, slots);
}

}  // namespace

TORCH_LIBRARY(statickv, m) {
  m.def(
      "cache_write(Tensor(a!) keys, Tensor(b!) values, Tensor key, Tensor value, Tensor slots) "
      "-> ()");
  m.def(
      "cache_write_quantized(Tensor(a!) keys, Tensor(b!) values, Tensor(c!) key_scales, "
      "Tensor(d!) value_scales, Tensor key, Tensor value, Tensor slots) -> ()");
}

TORCH_LIBRARY_IMPL(statickv, CPU, m) {
  m.impl("cache_write", cache_write_kernel);
  m.impl("cache_write_quantized", cache_write_quantized_kernel);
}
TORCH_LIBRARY_IMPL(statickv, CUDA, m) {
  m.impl("cache_write", cache_write_kernel);
  m.impl("cache_write_quantized", cache_write_quantized_kernel);
}
TORCH_LIBRARY_IMPL(statickv, Meta, m) {
  m.impl("cache_write", cache_write_fake);
  m.impl("cache_write_quantized", cache_write_quantized_fake);
}

}  // namespace statickv::ops
