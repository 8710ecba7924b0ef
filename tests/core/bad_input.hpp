#pragma once
// What the bad-input tests share (test_bad_input*.cpp): one cache shape, a
// cache with content, and the tables of bad calls with the fragments each
// error must name.

#include "support.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <new>

namespace statickv::test::bad_input {

using namespace statickv;

// The shape of every cache here: 2 kv heads of 4, 3 rows, 16 positions, window 4.
inline ConfigBuilder config_for(std::vector<LayerType> types) {
  return ConfigBuilder()
      .layer_types(std::move(types))
      .head_dim(4)
      .max_batch(3)
      .max_len(16)
      .sliding_window(4);
}

// A cache with some real content, so "nothing changed" is a strong claim.
inline void fill(Cache& cache) {
  at::manual_seed(9);
  StepPlan step = cache.prepare(arange_positions(0, 3), 3);
  for (int64_t l = 0; l < cache.num_layers(); ++l) {
    cache.update(l, at::randn({3, 2, 3, 4}), at::randn({3, 2, 3, 4}), step);
  }
}

struct BadCall {
  std::string what;
  std::function<void(Cache&, const StepPlan&)> call;
  std::vector<std::string> fragments;
};

// A bad call of an entry point that owns no cache.
struct Bad {
  std::string what;
  std::function<void()> call;
  std::vector<std::string> fragments;
};

inline void expect_errors(const std::vector<Bad>& cases) {
  for (const Bad& bad : cases) {
    INFO(bad.what);
    require_error(bad.call, bad.fragments);
  }
}

inline at::TensorOptions on_meta(at::ScalarType dtype) {
  return at::TensorOptions().dtype(dtype).device(at::kMeta);
}

inline constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
inline constexpr int64_t kMin = std::numeric_limits<int64_t>::min();

}  // namespace statickv::test::bad_input
