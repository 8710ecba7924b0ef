#pragma once
// What DecodeStep (step_count.cpp) and ChainedDecode (chained_decode.cpp)
// both set up before their steps: a cache for the model's layer types and
// a prompt prefilled through it. Not installed.

#include <statickv/cache.hpp>
#include <statickv/model/backends.hpp>
#include <statickv/model/model.hpp>

#include <algorithm>
#include <memory>

namespace statickv::reference {

/// A cache of `batch` rows and `max_len` positions for `model`: hybrid
/// where it has sliding layers, else static.
inline std::unique_ptr<Cache> decode_cache(const LlamaModel& model, int64_t batch,
                                           int64_t max_len) {
  const CacheConfig config = model.cache_config(batch, max_len);
  if (model.config().has_sliding()) return std::make_unique<HybridCache>(config);
  return std::make_unique<StaticCache>(config);
}

/// Prefills ids and positions [b, p] (on the model's device) through
/// `backend` in passes of at most the cache's max_chunk (a ring's largest
/// pass); returns the last pass's `last` logits.
inline at::Tensor prefill_chunks(const LlamaModel& model, const Cache& cache, CacheBackend& backend,
                                 const at::Tensor& ids, const at::Tensor& positions, Logits last) {
  const int64_t p = ids.size(1), chunk = cache.config().effective_max_chunk();
  at::Tensor out;
  for (int64_t first = 0; first < p; first += chunk) {
    const int64_t len = std::min(chunk, p - first);
    out = model.forward(ids.narrow(1, first, len), positions.narrow(1, first, len), backend, -1,
                        first + len == p ? last : Logits::kNone);
  }
  return out;
}

}  // namespace statickv::reference
