#pragma once
// The cache-storage flags of statickv-demo, statickv-serve and the model
// benchmarks: --kv-dtype and --offload, and the rule that --offload does not
// combine with a quantized --kv-dtype, --path fused or --cache dynamic
// (docs/offload.md). App rules on top of the flag parser (statickv_flags).

#include <statickv/config.hpp>
#include <statickv/flags/parser.hpp>

#include <string>

namespace statickv::apps {

/// --kv-dtype: the cache's stored type, parsed by parse_kv_storage.
inline void add_kv_dtype(flags::Flags& flags, std::string* target) {
  flags.add_choice("--kv-dtype T", target, {"compute", "int8", "fp8"},
                   "stored type of the KV cache: compute (the --dtype, default), int8 or fp8 "
                   "(e4m3), one scale per token and kv head; the views are dequantized into one "
                   "staging buffer");
}

/// --offload: the cache's keys and values in host memory (pinned on
/// CUDA), two layers' worth staged on the device (CacheConfig::
/// host_offload); check_offload_flags() refuses what it does not serve.
inline void add_offload(flags::Flags& flags, bool* target) {
  flags.add_switch("--offload", target,
                   "keep the KV cache in host memory (pinned on cuda) and stream each layer's "
                   "attended range into two device staging buffers (CacheConfig::host_offload)");
}

/// --kv-dtype: "" and "compute" store the compute dtype; "int8" and "fp8"
/// are the quantized storages (Note [quantized storage], docs/design.md).
inline KvStorage parse_kv_storage(const std::string& kv_dtype) {
  if (kv_dtype == "int8") return KvStorage::kInt8;
  if (kv_dtype == "fp8") return KvStorage::kFp8E4m3;
  return KvStorage::kCompute;
}

/// --offload against the flags it does not combine with, naming both:
/// quantized --kv-dtype, --path fused and --cache dynamic (docs/offload.md).
inline void check_offload_flags(bool offload, const std::string& kv_dtype, const std::string& path,
                                const std::string& cache) {
  if (!offload) return;
  if (parse_kv_storage(kv_dtype) != KvStorage::kCompute) {
    throw flags::FlagError(
        "--kv-dtype: expected compute with --offload (offloaded storage holds the "
        "compute dtype) but got " +
        kv_dtype);
  }
  if (path == "fused") {
    throw flags::FlagError(
        "--path: expected plain or auto with --offload (the fused rotary write targets "
        "device buffers) but got fused");
  }
  if (cache == "dynamic") {
    throw flags::FlagError(
        "--cache: expected static or hybrid with --offload (it offloads a "
        "preallocated cache) but got dynamic");
  }
}

}  // namespace statickv::apps
