// kernel_threads() (parallel.hpp; Note [CPU kernels' threads]): a loop
// through at::parallel_for, compiled as the library's kernels are, that
// counts the distinct threads it ran on.

#include <statickv/parallel.hpp>

#include <ATen/Parallel.h>

#include <mutex>
#include <set>

namespace statickv {

int64_t kernel_threads() {
  const int64_t items = at::get_num_threads();
  std::mutex mutex;
  std::set<int> seen;
  at::parallel_for(0, items, 1, [&](int64_t, int64_t) {
    const std::lock_guard<std::mutex> lock(mutex);
    seen.insert(at::get_thread_num());
  });
  return static_cast<int64_t>(seen.size());
}

}  // namespace statickv
