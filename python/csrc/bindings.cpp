// statickv._C: the Python bindings of the C++ classes (pybind11, the copy
// torch ships). The op library (ops.cpp) is linked into the same module, so
// importing statickv registers torch.ops.statickv.*.
//
// Errors: every entry point raises c10::Error before it changes anything
// (Invariant [checked before written], docs/design.md); torch's exception
// translator turns it into a Python RuntimeError (ValueError for
// c10::ValueError) with statickv's message unchanged.

#include <statickv/buckets.hpp>
#include <statickv/cache.hpp>
#include <statickv/config.hpp>
#include <statickv/version.hpp>

#include <torch/extension.h>

#include <utility>
#include <vector>

namespace py = pybind11;

namespace {

using statickv::Cache;
using statickv::CacheConfig;
using statickv::KvStorage;
using statickv::LayerType;
using statickv::ShapeBuckets;
using statickv::StepPlan;

void bind_config(py::module_& m) {
  py::enum_<LayerType>(m, "LayerType")
      .value("FULL", LayerType::kFull)
      .value("SLIDING", LayerType::kSliding);
  py::enum_<KvStorage>(m, "KvStorage")
      .value("COMPUTE", KvStorage::kCompute)
      .value("INT8", KvStorage::kInt8)
      .value("FP8_E4M3", KvStorage::kFp8E4m3);
  py::class_<CacheConfig>(m, "CacheConfig")
      .def(py::init<>())
      .def_readwrite("num_layers", &CacheConfig::num_layers)
      .def_readwrite("num_kv_heads", &CacheConfig::num_kv_heads)
      .def_readwrite("head_dim", &CacheConfig::head_dim)
      .def_readwrite("max_batch", &CacheConfig::max_batch)
      .def_readwrite("max_len", &CacheConfig::max_len)
      .def_readwrite("dtype", &CacheConfig::dtype)
      .def_readwrite("device", &CacheConfig::device)
      .def_readwrite("layer_types", &CacheConfig::layer_types)
      .def_readwrite("sliding_window", &CacheConfig::sliding_window)
      .def_readwrite("max_chunk", &CacheConfig::max_chunk)
      .def_readwrite("check_position_values", &CacheConfig::check_position_values)
      .def_readwrite("kv_storage", &CacheConfig::kv_storage)
      .def_readwrite("host_offload", &CacheConfig::host_offload)
      .def("plain_storage", &CacheConfig::plain_storage)
      .def("validate", &CacheConfig::validate)
      .def("effective_max_chunk", &CacheConfig::effective_max_chunk)
      .def("sliding_capacity", &CacheConfig::sliding_capacity)
      .def("layer_type", &CacheConfig::layer_type, py::arg("layer"));
  m.def("estimate_memory_bytes", &statickv::estimate_memory_bytes, py::arg("config"));
  // By where the bytes live (host: an offloaded cache's keys and values).
  m.def(
      "estimate_memory",
      [](const CacheConfig& config) {
        const CacheConfig::Bytes bytes = statickv::estimate_memory(config);
        py::dict out;
        out["device"] = bytes.device;
        out["host"] = bytes.host;
        return out;
      },
      py::arg("config"));
  m.def("all_sliding", &statickv::all_sliding, py::arg("num_layers"));
  m.def("alternating", &statickv::alternating, py::arg("num_layers"));
  m.def("sliding_then_full", &statickv::sliding_then_full, py::arg("num_layers"),
        py::arg("sliding_per_full"));
}

void bind_step(py::module_& m) {
  py::class_<StepPlan>(m, "StepPlan")
      .def("mask", &StepPlan::mask, py::arg("layer"))
      .def("additive_mask", &StepPlan::additive_mask, py::arg("layer"))
      .def("write_slots", &StepPlan::write_slots, py::arg("layer"))
      .def("view_len", &StepPlan::view_len, py::arg("layer"))
      .def_property_readonly("positions", &StepPlan::positions)
      .def_property_readonly("live_batch", &StepPlan::live_batch)
      .def_property_readonly("query_len", &StepPlan::query_len)
      .def_property_readonly("attend_len", &StepPlan::attend_len)
      .def_property_readonly("per_row", &StepPlan::per_row);
}

// The row operations and accessors shared by StaticCache and HybridCache.
void bind_cache(py::module_& m) {
  py::class_<Cache>(m, "Cache")
      .def("prepare", &Cache::prepare, py::arg("cache_position"), py::arg("live_batch"),
           py::arg("attend_len") = -1, py::keep_alive<0, 1>())
      .def(
          "update",
          [](Cache& c, int64_t layer, const at::Tensor& k, const at::Tensor& v, const StepPlan& s) {
            statickv::KV kv = c.update(layer, k, v, s);
            return std::make_pair(kv.keys, kv.values);
          },
          py::arg("layer"), py::arg("key"), py::arg("value"), py::arg("step"))
      .def("reset", &Cache::reset)
      .def("reset_rows", &Cache::reset_rows, py::arg("rows"))
      .def("copy_row", &Cache::copy_row, py::arg("src"), py::arg("dst"))
      .def("reorder", &Cache::reorder, py::arg("indices"))
      .def("copy_from", &Cache::copy_from, py::arg("other"))
      .def("rollback", py::overload_cast<const at::Tensor&>(&Cache::rollback),
           py::arg("new_lengths"))
      .def("rollback", py::overload_cast<const std::vector<int64_t>&>(&Cache::rollback),
           py::arg("new_lengths"))
      .def("seq_lengths", &Cache::seq_lengths)
      .def("memory_bytes", &Cache::memory_bytes)
      .def("staging_bytes", &Cache::staging_bytes)
      .def("device_memory_bytes", &Cache::device_memory_bytes)
      .def("host_memory_bytes", &Cache::host_memory_bytes)
      .def_property_readonly("config", &Cache::config)
      .def_property_readonly("num_layers", &Cache::num_layers)
      .def("capacity", &Cache::capacity, py::arg("layer"))
      .def(
          "layer_type", [](const Cache& c, int64_t l) { return c.layer(l).type(); },
          py::arg("layer"))
      .def(
          "window", [](const Cache& c, int64_t l) { return c.layer(l).window(); }, py::arg("layer"))
      .def("keys", &Cache::keys, py::arg("layer"))
      .def("values", &Cache::values, py::arg("layer"))
      .def("key_scales", &Cache::key_scales, py::arg("layer"))
      .def("value_scales", &Cache::value_scales, py::arg("layer"))
      .def("slot_positions", &Cache::slot_positions, py::arg("layer"));
  py::class_<statickv::StaticCache, Cache>(m, "StaticCache")
      .def(py::init<CacheConfig>(), py::arg("config"));
  py::class_<statickv::HybridCache, Cache>(m, "HybridCache")
      .def(py::init<CacheConfig>(), py::arg("config"));
}

void bind_buckets(py::module_& m) {
  py::class_<ShapeBuckets>(m, "ShapeBuckets")
      .def_static("powers_of_two", &ShapeBuckets::powers_of_two, py::arg("max"), py::arg("min") = 1)
      .def_static("multiples_of", &ShapeBuckets::multiples_of, py::arg("step"), py::arg("max"))
      .def_static("geometric", &ShapeBuckets::geometric, py::arg("ratio"), py::arg("max"),
                  py::arg("min") = 1)
      .def_static("of", &ShapeBuckets::of, py::arg("sizes"))
      .def(
          "round_up", [](const ShapeBuckets& b, int64_t n) { return b.round_up(n, "size"); },
          py::arg("n"))
      .def(
          "index_of", [](const ShapeBuckets& b, int64_t n) { return b.index_of(n, "size"); },
          py::arg("n"))
      .def("sizes", &ShapeBuckets::sizes)
      .def("capture_order", &ShapeBuckets::capture_order)
      .def_property_readonly("max", &ShapeBuckets::max)
      .def_property_readonly("count", &ShapeBuckets::count);
}

}  // namespace

PYBIND11_MODULE(_C, m) {
  m.doc() = "statickv: preallocated, CUDA-graph-safe KV caches (C++ bindings)";
  m.attr("__version__") = statickv::kVersion;
#ifdef STATICKV_HAS_CUDA
  m.attr("built_with_cuda") = true;  // the library's CUDA parts (CMakeLists.txt)
#else
  m.attr("built_with_cuda") = false;
#endif
  bind_config(m);
  bind_step(m);
  bind_cache(m);
  bind_buckets(m);
}
