#pragma once
// LlamaModel: a small, clean decoder of the Llama family and its relatives
// (Llama, Mistral, Qwen2, Qwen3, Gemma 2, Gemma 3, Phi-3) in LibTorch, driving the
// caches end to end.
//
// Token embedding, RMSNorm, rotary embeddings in Hugging Face's rotate_half
// convention, grouped-query attention, a gated MLP, final norm, LM head (tied
// or not); what a family changes (q/k norms, Gemma's norms, scaled
// embeddings, attention scale, soft-capping, a rope per layer type) is read
// from ModelConfig. Attention goes through an AttentionBackend (backends.hpp), so one
// forward serves StaticCache/HybridCache, the DynamicCache baseline and the
// no-cache full forward alike.

#include <statickv/cache.hpp>
#include <statickv/model/backends.hpp>
#include <statickv/model/model_config.hpp>
#include <statickv/model/tensor_parallel.hpp>

#include <ATen/ATen.h>

#include <memory>
#include <vector>

namespace statickv::reference {

/// Which tokens a forward pass computes logits for.
enum class Logits {
  kAll,   ///< every token: [b, q, vocab]
  kLast,  ///< each row's token at its highest position: [b, vocab]
  kNone,  ///< none: the pass only fills the cache (a prefill chunk no prompt
          ///< ends in); no final norm or LM head, an undefined tensor back
};

/// A model that is one rank of a tensor-parallel group (docs/tensor_parallel.md).
struct TpShard {
  std::shared_ptr<Communicator> comm;  ///< null: a single process
  bool vocab_parallel = false;         ///< TensorParallel::vocab_parallel
  /// Compare a fingerprint of every forward pass across ranks (Note [ranks
  /// issue identical steps], docs/design.md): one small all-reduce per pass.
#ifdef NDEBUG
  bool check_divergence = false;
#else
  bool check_divergence = true;
#endif
};

/// The user scope forward() opens around each layer: OpCounter's region
/// for the launches inside the layers (Note [counted step]).
inline constexpr const char* kLayerRegion = "statickv::layer";

/// Most positions the rotary table holds (Note [rope table]): a pass past
/// them computes its cos and sin instead. 8192 rows of 2 * head_dim.
inline constexpr int64_t kRopeTableRows = 8192;

class LlamaModel {
 public:
  /// Checks every expected parameter is present with its shape and dtype.
  /// With `tp.comm`, `weights` are this rank's slices (shard_slices of
  /// plan_tensor_parallel(config, {comm->rank(), comm->world(),
  /// vocab_parallel}); load_checkpoint reads them with LoadOptions::tp).
  LlamaModel(ModelConfig config, Weights weights, TpShard tp = {});

  /// Logits (float32) for token ids [b, q] at positions [b, q] (negative =
  /// padding). attend_len: passed to the backend (-1 = all). The backend's
  /// path() picks the plain or the fused layer (Note [fused decode path]).
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
  /// The cache geometry this model needs (layer types, heads, dims): with
  /// tensor parallelism, this rank's kv heads only (shard_cache_config).
  CacheConfig cache_config(int64_t max_batch, int64_t max_len) const;
  /// This rank's plan (rank 0 of 1 in a single process).
  const TpPlan& tp_plan() const { return plan_; }
  /// Throws c10::Error naming `path` when this model cannot run on it: the
  /// fused layer does not all-reduce (tensor parallelism).
  void check_path(DecodePath path) const;
  /// `path`, with auto made fused where the fused layer applies (a single
  /// process, a cache of plain storage in device memory: `cache`) and plain
  /// elsewhere (Note [fused decode path]).
  DecodePath resolve_path(DecodePath path, const CacheConfig& cache) const;
  /// The tensor-parallel step check of one pass (Note [ranks issue
  /// identical steps]): with `TpShard::check_divergence` on a rank, compares
  /// a fingerprint of the pass number, `ids`' shape, `attend_len`,
  /// `logits` and a checksum of `ids` across ranks; elsewhere a no-op.
  /// `ids` [b, q] int64 in host memory: the check reads only what the host
  /// packed, never the device. run_pass calls it for every pass, eager or
  /// replayed; forward() does not (it may be captured).
  void check_same_step(const at::Tensor& ids, int64_t attend_len, Logits logits) const;

 private:
  /// The fused path's norm weights, each what rms_norm() multiplies by:
  /// the weights themselves (Llama) or 1 + weight (Gemma), the query scale
  /// folded into q_norm; undefined where the plain weight is undefined.
  struct FusedNorms {
    at::Tensor input_norm, post_norm, pre_ffn_norm, post_ffn_norm, q_norm, k_norm;
  };
  struct Layer {
    at::Tensor input_norm, post_norm;           // [hidden]
    at::Tensor q_proj, k_proj, v_proj, o_proj;  // [out, in]
    at::Tensor q_bias, k_bias, v_bias, o_bias;  // [out] or undefined
    at::Tensor gate_proj, up_proj, down_proj;
    at::Tensor q_norm, k_norm;               // [head_dim] or undefined
    at::Tensor pre_ffn_norm, post_ffn_norm;  // [hidden] or undefined
    // Note [fused decode path]: the weights above are row views of these.
    at::Tensor qkv, qkv_bias;  // [(heads + 2 kv_heads) * head_dim, in]; bias or undefined
    at::Tensor gate_up;        // [2 * intermediate, in]
    FusedNorms fused;
  };
  /// cos/sin of every layer type for one pass: [0] full (or every) layer,
  /// [1] sliding layers where their rope differs.
  struct Rotary {
    at::Tensor cos, sin, sliding_cos, sliding_sin;
  };
  void check_weights();
  Layer load_layer(int64_t i);
  void load_rope();
  at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight) const;
  at::Tensor fused_rms_norm(const at::Tensor& x, const at::Tensor& weight) const;
  at::Tensor plain_layer(int64_t l, const at::Tensor& x, const Rotary& rotary,
                         AttentionBackend& backend) const;
  void fused_layer(int64_t l, at::Tensor& x, const Rotary& rotary, AttentionBackend& backend) const;
  at::Tensor fused_attention(const Layer& layer, int64_t l, const at::Tensor& x,
                             const at::Tensor& cos, const at::Tensor& sin,
                             AttentionBackend& backend) const;
  at::Tensor fused_mlp(const Layer& layer, const at::Tensor& h) const;
  at::Tensor fused_norm_weight(const at::Tensor& weight, double scale = 1.0) const;
  double query_factor() const;
  std::pair<at::Tensor, at::Tensor> rope(const at::Tensor& positions,
                                         const at::Tensor& inv_freq) const;
  Rotary rotary(const at::Tensor& positions, int64_t attend_len) const;
  at::Tensor rope_table(const at::Tensor& inv_freq) const;
  std::pair<at::Tensor, at::Tensor> from_table(const at::Tensor& table,
                                               const at::Tensor& clamped) const;
  at::Tensor embed(const at::Tensor& ids) const;
  at::Tensor scale_query(const at::Tensor& query) const;
  at::Tensor attention(const Layer& layer, int64_t l, const at::Tensor& h, const at::Tensor& cos,
                       const at::Tensor& sin, AttentionBackend& backend) const;
  at::Tensor mlp(const Layer& layer, const at::Tensor& g) const;
  at::Tensor lm_head(const at::Tensor& x, bool fused) const;
  /// Sums a row-parallel projection's partial outputs over the ranks.
  at::Tensor reduce(at::Tensor partial) const;

  ModelConfig config_;
  Weights weights_;  // owns the tensors referenced below
  at::Tensor embed_, final_norm_, fused_final_norm_, lm_head_;
  std::vector<Layer> layers_;
  at::Tensor inv_freq_;          // [head_dim], float32: each frequency for both halves
  at::Tensor sliding_inv_freq_;  // the sliding layers' where ModelConfig::sliding_rope is set
  // Note [rope table]: [rows, 2 * head_dim] in the model dtype, cos then
  // sin of positions 0..rows-1 (rows: max_position_embeddings, at most
  // kRopeTableRows), and the sliding layers' where their rope differs.
  at::Tensor rope_table_, sliding_rope_table_;
  at::ScalarType dtype_;
  at::Device device_;
  TpShard tp_;
  TpPlan plan_;
  mutable int64_t steps_ = 0;  // passes checked, for the divergence check
};

}  // namespace statickv::reference
