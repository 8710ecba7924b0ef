#pragma once
// LlamaModel: a small, clean Llama-family decoder (Llama, Mistral, Qwen2)
// in LibTorch, driving the caches end to end.
//
// Token embedding, RMSNorm, rotary embeddings in Hugging Face's rotate_half
// convention, grouped-query attention, SwiGLU MLP, final norm, LM head (tied
// or not). Attention goes through an AttentionBackend, so one forward serves
// StaticCache/HybridCache, the DynamicCache baseline and the no-cache full
// forward alike.

#include <statickv/cache.hpp>
#include <statickv/reference/checkpoint.hpp>
#include <statickv/reference/model_config.hpp>

#include <ATen/ATen.h>

#include <memory>
#include <vector>

namespace statickv::reference {

/// Where a forward pass keeps and reads keys and values.
class AttentionBackend {
 public:
  virtual ~AttentionBackend() = default;
  /// Starts a forward pass over positions [b, q] (negative = padding) of
  /// rows 0..b-1. `attend_len`: one past the highest position any row may
  /// attend to in this pass (a hint; backends may ignore it).
  virtual void begin(const at::Tensor& positions, int64_t attend_len) = 0;
  /// Stores this pass's keys/values of `layer` and returns attention output
  /// [b, heads, q, head_dim] for queries [b, heads, q, head_dim].
  virtual at::Tensor attend(int64_t layer, const at::Tensor& query, const at::Tensor& key,
                            const at::Tensor& value) = 0;
};

/// Which attention kernel a backend uses.
enum class AttentionKernel { kSdpa, kReference };

/// Which tokens a forward pass computes logits for.
enum class Logits {
  kAll,   ///< every token: [b, q, vocab]
  kLast,  ///< each row's token at its highest position: [b, vocab]
};

class LlamaModel {
 public:
  /// Checks every expected parameter is present with its shape and dtype.
  LlamaModel(ModelConfig config, Weights weights);

  /// Logits (float32) for token ids [b, q] at positions [b, q] (negative =
  /// padding). attend_len: passed to the backend (-1 = all).
  /// Logits::kAll gives [b, q, vocab]. Logits::kLast gives [b, vocab] for
  /// the token of each row at its highest position (the prompt's last token
  /// in a prefill pass; a row of padding only gets meaningless values): the
  /// final norm and LM head then run on b tokens, not b * q, and the token is
  /// picked on the device (no host sync, so it can be captured).
  at::Tensor forward(const at::Tensor& ids, const at::Tensor& positions, AttentionBackend& backend,
                     int64_t attend_len = -1, Logits logits = Logits::kAll) const;

  const ModelConfig& config() const { return config_; }
  at::ScalarType dtype() const { return dtype_; }
  at::Device device() const { return device_; }
  /// The cache geometry this model needs (layer types, heads, dims).
  CacheConfig cache_config(int64_t max_batch, int64_t max_len) const;

 private:
  struct Layer {
    at::Tensor input_norm, post_norm;           // [hidden]
    at::Tensor q_proj, k_proj, v_proj, o_proj;  // [out, in]
    at::Tensor q_bias, k_bias, v_bias, o_bias;  // [out] or undefined
    at::Tensor gate_proj, up_proj, down_proj;
  };
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) const;
  std::pair<at::Tensor, at::Tensor> rope(const at::Tensor& positions) const;

  ModelConfig config_;
  Weights weights_;  // owns the tensors referenced below
  at::Tensor embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
  at::Tensor inv_freq_;  // [head_dim / 2], float32
  at::ScalarType dtype_;
  at::Device device_;
};

/// Attention through a StaticCache or HybridCache: one prepare() per pass.
class CacheBackend final : public AttentionBackend {
 public:
  CacheBackend(Cache& cache, AttentionKernel kernel = AttentionKernel::kSdpa)
      : cache_(cache), kernel_(kernel) {}
  void begin(const at::Tensor& positions, int64_t attend_len) override;
  at::Tensor attend(int64_t layer, const at::Tensor& query, const at::Tensor& key,
                    const at::Tensor& value) override;

 private:
  Cache& cache_;
  AttentionKernel kernel_;
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
