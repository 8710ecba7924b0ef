// Uses the public API the way a downstream project would; exits non-zero on
// any mismatch.
#include <statickv/statickv.hpp>

#include <cstdio>
#include <string>

// The standard CMake was asked for is the one this file compiled at: C++17
// proves the public headers need no more (with a LibTorch that allows it).
#if defined(STATICKV_CONSUMER_CXX_STANDARD)
#if STATICKV_CONSUMER_CXX_STANDARD == 17
static_assert(__cplusplus == 201703L, "the consumer was to compile at exactly C++17");
#elif STATICKV_CONSUMER_CXX_STANDARD == 20
static_assert(__cplusplus == 202002L, "the consumer was to compile at exactly C++20");
#else
#error "STATICKV_CONSUMER_CXX_STANDARD: expected 17 or 20"
#endif
#endif

int main() {
  // The headers' version (macros and string) equals the package's
  // (STATICKV_PACKAGE_VERSION, from CMake).
  const std::string macros = std::to_string(STATICKV_VERSION_MAJOR) + "." +
                             std::to_string(STATICKV_VERSION_MINOR) + "." +
                             std::to_string(STATICKV_VERSION_PATCH);
  if (macros != STATICKV_PACKAGE_VERSION || std::string(statickv::kVersion) != macros) {
    std::printf("statickv consumer: headers say %s (kVersion %s) but the package says %s\n",
                macros.c_str(), statickv::kVersion, STATICKV_PACKAGE_VERSION);
    return 1;
  }

  statickv::CacheConfig config;
  config.num_layers = 2;
  config.num_kv_heads = 2;
  config.head_dim = 4;
  config.max_batch = 4;
  config.max_len = 8;
  statickv::StaticCache cache(config);
  const at::Tensor key = at::ones({2, 2, 3, 4});
  statickv::StepPlan step = cache.prepare(at::arange(3), /*live_batch=*/2);
  statickv::KV kv = cache.update(/*layer=*/0, key, key, step);
  statickv::StepPlan again = cache.prepare(at::arange(3, 4), /*live_batch=*/2);
  const bool ok = kv.keys.data_ptr() == cache.keys(0).data_ptr() &&
                  at::equal(kv.keys.narrow(2, 0, 3), key) &&
                  step.mask(0).sizes() == at::IntArrayRef({2, 1, 3, 8}) && again.query_len() == 1;
  std::printf("statickv %s consumer (C++ %ld): %s\n", statickv::kVersion,
              static_cast<long>(__cplusplus), ok ? "ok" : "MISMATCH");
  return ok ? 0 : 1;
}
