#pragma once
// Where a forward pass of the reference decoder keeps and reads keys and
// values: an AttentionBackend. CacheBackend drives a statickv cache (one
// prepare() per pass, update() per layer); DynamicCache is the torch::cat
// baseline, Hugging Face's DynamicCache in C++.

#include <statickv/cache.hpp>
#include <statickv/model/model_config.hpp>

#include <ATen/ATen.h>

#include <memory>
#include <string>
#include <vector>

namespace statickv::reference {

/// How the decoder runs a layer (Note [fused decode path], docs/design.md).
enum class DecodePath {
  kPlain,  ///< one op per step of the math, as Hugging Face writes it
  kFused,  ///< one-kernel RMSNorm, one q/k/v GEMM, one gate/up GEMM, residuals
           ///< folded into the output GEMMs, rotary + cache write in one kernel
  kAuto,   ///< fused wherever it applies (LlamaModel::resolve_path), else plain
};

const char* to_string(DecodePath path);
/// "auto", "plain" or "fused"; throws c10::Error naming `flag` otherwise.
DecodePath parse_decode_path(const std::string& name, const char* flag = "path");

/// Where a forward pass keeps and reads keys and values.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  /// The path LlamaModel::forward takes with this backend.
  virtual DecodePath path() const { return DecodePath::kPlain; }
  /// Starts a forward pass over positions [b, q] (negative = padding) of
  /// rows 0..b-1. `attend_len`: one past the highest position any row may
  /// attend to in this pass (a hint; backends may ignore it).
  virtual void begin(const at::Tensor& positions, int64_t attend_len) = 0;
  /// Stores this pass's keys/values of `layer` and returns attention output
  /// [b, heads, q, head_dim] for queries [b, heads, q, head_dim].
  virtual at::Tensor attend(int64_t layer, const at::Tensor& query, const at::Tensor& key,
                            const at::Tensor& value) = 0;
  /// attend() of queries and keys not yet rotated: rotates them by cos/sin
  /// ([b, 1, q, head_dim], apply_rotary()) first. The fused path calls it;
  /// a backend may fuse the rotation into its cache write.
  virtual at::Tensor attend_rotary(int64_t layer, const at::Tensor& query, const at::Tensor& key,
                                   const at::Tensor& value, const at::Tensor& cos,
                                   const at::Tensor& sin);
  /// Attention-logit soft-cap of the coming passes (Gemma 2's
  /// attn_logit_softcapping; 0 = none); LlamaModel::forward sets it from its
  /// config. Soft-capped layers run on softcapped_attention whatever kernel
  /// was chosen: sdpa and the cache's varlen path cannot cap.
  void set_logit_softcap(double cap) { softcap_ = cap; }

 protected:
  double softcap_ = 0;
};

/// Which attention kernel a backend uses.
enum class AttentionKernel { kSdpa, kReference };

/// Checks ids or positions: int64 [b, q] (the form every backend takes).
void check_tokens(const char* name, const at::Tensor& t);

/// Attention through a StaticCache or HybridCache: one prepare() per pass.
/// With DecodePath::kFused, attend_rotary() writes through rotary_update()
/// (one kernel for the rotation and the cache write); the constructor
/// refuses a cache that path cannot serve (detail::check_rotary_config),
/// and auto (resolve it with LlamaModel::resolve_path).
class CacheBackend final : public AttentionBackend {
 public:
  CacheBackend(Cache& cache, AttentionKernel kernel = AttentionKernel::kSdpa,
               DecodePath path = DecodePath::kPlain);
  DecodePath path() const override { return path_; }
  void begin(const at::Tensor& positions, int64_t attend_len) override;
  at::Tensor attend(int64_t layer, const at::Tensor& query, const at::Tensor& key,
                    const at::Tensor& value) override;
  at::Tensor attend_rotary(int64_t layer, const at::Tensor& query, const at::Tensor& key,
                           const at::Tensor& value, const at::Tensor& cos,
                           const at::Tensor& sin) override;

 private:
  at::Tensor attend_views(int64_t layer, const at::Tensor& query, const KV& kv) const;

  Cache& cache_;
  AttentionKernel kernel_;
  DecodePath path_;
  std::unique_ptr<StepPlan> step_;
};

/// The DynamicCache baseline: every pass concatenates its keys, values and
/// positions onto the past (torch::cat, like Hugging Face's DynamicCache),
/// so memory and addresses change every step. A fresh one fed a whole
/// sequence in one pass is the no-cache full forward.
class DynamicCache final : public AttentionBackend {
 public:
  DynamicCache(const ModelConfig& config, AttentionKernel kernel = AttentionKernel::kSdpa);
  void begin(const at::Tensor& positions, int64_t attend_len) override;
  at::Tensor attend(int64_t layer, const at::Tensor& query, const at::Tensor& key,
                    const at::Tensor& value) override;
  /// Bytes currently held.
  int64_t memory_bytes() const;
  void reset();

 private:
  std::vector<int64_t> windows_;  // per layer, 0 = full
  int64_t sliding_window_ = 0;
  AttentionKernel kernel_;
  at::Tensor full_mask_, sliding_mask_;    // [b, 1, q, T] of the current pass
  std::vector<at::Tensor> keys_, values_;  // per layer [b, kv_heads, T, head_dim]
  at::Tensor positions_;                   // [b, T], -1 = padding
  at::Tensor step_positions_;              // [b, q] of the current pass
};

}  // namespace statickv::reference
