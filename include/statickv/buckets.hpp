#pragma once
// ShapeBuckets: a small ordered set of sizes that serve every size up to a
// maximum by padding, so a handful of captured shapes replace one capture per
// batch size or prompt length (Hugging Face transformers issue 29151).
//
// Padding is safe by construction: the helpers here give padded tokens and
// padded rows position -1, which the caches write to the scratch slot and
// never attend (Invariant [scratch slot], docs/design.md). The slice that
// recovers the real outputs is the inverse of the padding.

#include <statickv/detail/checks.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

namespace statickv {

class ShapeBuckets {
 public:
  /// Most sizes one ShapeBuckets may hold. Each may become a captured graph,
  /// so far fewer are useful; the limit turns a mistaken policy (multiples of
  /// 1 up to 2^40) into an error instead of a loop that exhausts memory.
  static constexpr int64_t kMaxCount = int64_t{1} << 16;

  /// 1, 2, 4, ... up to `max` (always included, even when not a power of two).
  static ShapeBuckets powers_of_two(int64_t max, int64_t min = 1) {
    check_range(min, max);
    std::vector<int64_t> sizes;
    for (int64_t s = 1; s < max; s *= 2) {
      if (s >= min) sizes.push_back(s);
      if (s > max / 2) break;  // s * 2 >= max (and may not fit int64)
    }
    sizes.push_back(max);
    return ShapeBuckets(std::move(sizes));
  }

  /// step, 2*step, ... up to `max` (always included).
  static ShapeBuckets multiples_of(int64_t step, int64_t max) {
    TORCH_CHECK(step >= 1, "ShapeBuckets.step: expected >= 1 but got ", step);
    check_range(1, max);
    const int64_t count = (max - 1) / step + 1;
    TORCH_CHECK(count <= kMaxCount, "ShapeBuckets.step: expected at most ", kMaxCount,
                " buckets but multiples_of(step=", step, ", max=", max, ") makes ", count);
    std::vector<int64_t> sizes;
    for (int64_t s = step; s < max; s += step) {
      sizes.push_back(s);
      if (s > max - step) break;  // s + step >= max (and may not fit int64)
    }
    sizes.push_back(max);
    return ShapeBuckets(std::move(sizes));
  }

  /// min, then each size ceil(previous * ratio) (at least previous + 1), up
  /// to `max` (always included). Padding waste stays below ratio - 1.
  static ShapeBuckets geometric(double ratio, int64_t max, int64_t min = 1) {
    TORCH_CHECK(std::isfinite(ratio) && ratio > 1.0,
                "ShapeBuckets.ratio: expected a finite value > 1 but got ", ratio);
    check_range(min, max);
    std::vector<int64_t> sizes;
    for (int64_t s = min; s < max;) {
      TORCH_CHECK(static_cast<int64_t>(sizes.size()) < kMaxCount,
                  "ShapeBuckets.ratio: expected at most ", kMaxCount,
                  " buckets but geometric(ratio=", ratio, ", max=", max, ", min=", min,
                  ") makes more");
      sizes.push_back(s);
      // Compared in double first: the product may not fit int64 (or be
      // exactly representable), and then the next size is max itself.
      const double next = std::ceil(static_cast<double>(s) * ratio);
      if (next >= static_cast<double>(max)) break;
      s = std::max(s + 1, static_cast<int64_t>(next));
    }
    sizes.push_back(max);
    return ShapeBuckets(std::move(sizes));
  }

  /// Exactly these sizes (any order, duplicates removed); the largest is the max.
  static ShapeBuckets of(std::vector<int64_t> sizes) {
    TORCH_CHECK(!sizes.empty(), "ShapeBuckets.sizes: expected at least one size but got none");
    for (int64_t s : sizes) {
      TORCH_CHECK(s >= 1, "ShapeBuckets.sizes: expected sizes >= 1 but got ", s);
    }
    std::sort(sizes.begin(), sizes.end());
    sizes.erase(std::unique(sizes.begin(), sizes.end()), sizes.end());
    return ShapeBuckets(std::move(sizes));
  }

  /// The smallest bucket >= n. `name` is the argument errors name.
  int64_t round_up(int64_t n, const char* name = "size") const {
    return sizes_[static_cast<size_t>(index_of(n, name))];
  }

  /// Index (ascending order) of round_up(n).
  int64_t index_of(int64_t n, const char* name = "size") const {
    TORCH_CHECK(n >= 1 && n <= max(), name, ": expected a value in [1, ", max(),
                "] (the largest bucket) but got ", n);
    return static_cast<int64_t>(std::lower_bound(sizes_.begin(), sizes_.end(), n) - sizes_.begin());
  }

  /// Ascending sizes.
  const std::vector<int64_t>& sizes() const { return sizes_; }
  /// Largest first: the order in which to capture, so later (smaller)
  /// captures reuse the memory pool the first one grew.
  std::vector<int64_t> capture_order() const { return {sizes_.rbegin(), sizes_.rend()}; }
  int64_t max() const { return sizes_.back(); }
  int64_t count() const { return static_cast<int64_t>(sizes_.size()); }

 private:
  explicit ShapeBuckets(std::vector<int64_t> sizes) : sizes_(std::move(sizes)) {}

  static void check_range(int64_t min, int64_t max) {
    TORCH_CHECK(max >= 1, "ShapeBuckets.max: expected >= 1 but got ", max);
    TORCH_CHECK(min >= 1 && min <= max, "ShapeBuckets.min: expected a value in [1, max=", max,
                "] but got ", min);
  }

  std::vector<int64_t> sizes_;
};

/// Copies `real` [b, q, ...] into the leading corner of `padded`
/// [B, Q, ...] and fills the rest with `pad_value`. For positions use -1:
/// padded tokens and rows then go to the scratch slot.
inline void pad_into(at::Tensor& padded, const at::Tensor& real, const at::Scalar& pad_value) {
  detail::check_defined("padded", padded);
  detail::check_defined("input", real);
  TORCH_CHECK(real.dim() == padded.dim() && real.dim() >= 2, "input: expected rank ", padded.dim(),
              " [batch, q, ...] but got shape ", real.sizes());
  TORCH_CHECK(real.size(0) <= padded.size(0) && real.size(1) <= padded.size(1) &&
                  real.sizes().slice(2) == padded.sizes().slice(2),
              "input: expected a shape that fits in ", padded.sizes(), " but got ", real.sizes());
  detail::check_dtype("input", real, padded.scalar_type(), " (padded's)");
  padded.fill_(pad_value);
  padded.narrow(0, 0, real.size(0)).narrow(1, 0, real.size(1)).copy_(real);
}

/// The real outputs of a padded step: out[:b, :q, ...].
inline at::Tensor unpad(const at::Tensor& out, int64_t batch, int64_t query_len) {
  TORCH_CHECK(batch >= 0 && query_len >= 0,
              "unpad: expected batch >= 0 and query_len >= 0 but got ", batch, " and ", query_len);
  TORCH_CHECK(out.defined() && out.dim() >= 2 && batch <= out.size(0) && query_len <= out.size(1),
              "output: expected at least [", batch, ", ", query_len, ", ...] but got ",
              detail::shape_of(out));
  return out.narrow(0, 0, batch).narrow(1, 0, query_len);
}

}  // namespace statickv
