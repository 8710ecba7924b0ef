#pragma once
// Row arguments of the cache's row operations, checked on the host, and the
// process-wide step generations. Internal (Cache's bodies, detail/cache_impl.hpp).

#include <statickv/detail/checks.hpp>

#include <ATen/ATen.h>

#include <atomic>
#include <cstdint>
#include <vector>

namespace statickv::detail {

// Reads a 1-D int64 row-index tensor (any device) to host memory and checks
// every value is a row of the cache. Row operations are not step operations, so
// this host read is allowed (Invariant [graph-safe step] covers steps only).
inline at::Tensor host_rows(const char* name, const at::Tensor& rows, int64_t max_batch,
                            bool allow_duplicates) {
  check_defined(name, rows);
  check_dtype(name, rows, at::kLong);
  check_dense(name, rows);
  TORCH_CHECK(!rows.is_meta(), name, ": expected a tensor with data (any device but meta) but got ",
              rows.device());
  TORCH_CHECK(rows.dim() == 1, name, ": expected a 1-D tensor but got shape ", rows.sizes());
  TORCH_CHECK(rows.numel() >= 1 && rows.numel() <= max_batch, name,
              ": expected between 1 and max_batch=", max_batch, " entries but got ", rows.numel());
  at::Tensor host = rows.to(at::kCPU).contiguous();
  const int64_t* data = host.data_ptr<int64_t>();
  std::vector<bool> seen(static_cast<size_t>(max_batch), false);
  for (int64_t i = 0; i < host.numel(); ++i) {
    TORCH_CHECK(data[i] >= 0 && data[i] < max_batch, name, "[", i,
                "]: expected a row in [0, max_batch=", max_batch, ") but got ", data[i]);
    TORCH_CHECK(allow_duplicates || !seen[static_cast<size_t>(data[i])], name, "[", i,
                "]: expected distinct rows but got ", data[i], " twice");
    seen[static_cast<size_t>(data[i])] = true;
  }
  return host;
}

// Generations are unique across every cache of the process, so a StepPlan of a
// destroyed cache is never taken for a current StepPlan of a new cache built at
// the same address (its slots would index another config's buffers).
inline uint64_t next_generation() {
  static std::atomic<uint64_t> counter{0};
  return ++counter;
}

}  // namespace statickv::detail
