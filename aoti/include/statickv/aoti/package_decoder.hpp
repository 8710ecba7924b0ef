#pragma once
// A decoder compiled ahead of time with AOTInductor (examples/aoti/export.py)
// run on a statickv cache from C++: the host plans each step with
// Cache::prepare, the package writes the cache in place through
// torch.ops.statickv.cache_write and attends to the views (docs/aoti.md).

#include <statickv/buckets.hpp>
#include <statickv/cache.hpp>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace torch::inductor {
class AOTIModelPackageLoader;
}

namespace statickv::aoti {

class PackageDecoder {
 public:
  /// Loads `package` (its model "model") and checks its statickv fingerprint
  /// against cache.config() (check_fingerprint): a package built for other
  /// shapes, another dtype or another layer layout is refused here, before
  /// it ever runs. The cache must hold plain buffers on its device (compute
  /// kv_storage, no host_offload): the package writes them itself. `cache`
  /// must outlive the decoder.
  PackageDecoder(const std::string& package, Cache& cache);
  ~PackageDecoder();
  PackageDecoder(const PackageDecoder&) = delete;
  PackageDecoder& operator=(const PackageDecoder&) = delete;

  /// One forward pass over rows 0..b-1: ids and positions int64 [b, q] on
  /// the cache's device, b <= max_batch, 1 <= q <= max_query(), positions < 0
  /// for padded tokens. Plans the step (cache.prepare(positions, b,
  /// attend_len), which advances the rows' lengths), runs the package and
  /// returns its logits [b, q, vocab]. Checked before anything is written.
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& positions, int64_t attend_len);

  int64_t max_query() const { return max_query_; }
  int64_t vocab_size() const { return vocab_; }
  Cache& cache() { return *cache_; }
  const std::string& path() const { return path_; }

 private:
  void check_step(const at::Tensor& ids, const at::Tensor& positions) const;

  std::string path_;
  Cache* cache_;
  std::unique_ptr<torch::inductor::AOTIModelPackageLoader> loader_;
  std::vector<int64_t> group_layers_;  ///< the first layer of each type present: full, sliding
  int64_t max_query_ = 0;
  int64_t vocab_ = 0;
};

/// What greedy_generate produced for each prompt.
struct GreedyResult {
  std::vector<std::vector<int64_t>> tokens;  ///< [max_new_tokens] per prompt
  std::vector<at::Tensor> logits;            ///< [max_new_tokens, vocab] float32 per prompt
};

/// Greedy decoding of ragged `prompts` (one row each, rows 0..n-1, reset
/// first) through `decoder`: prefill in chunks of up to max_query() tokens,
/// each row at its own positions (a shorter row is padded with position -1),
/// then one token per row per step. Each step attends to
/// attend_buckets.round_up(longest row), capped at max_len (the package's
/// attended length is dynamic, so buckets only bound the work, never
/// recompile). Call it as the cache was built: under c10::InferenceMode or not.
GreedyResult greedy_generate(PackageDecoder& decoder,
                             const std::vector<std::vector<int64_t>>& prompts,
                             int64_t max_new_tokens, const ShapeBuckets& attend_buckets);

}  // namespace statickv::aoti
