#pragma once
// Checkpoints in Hugging Face's layout: config.json plus model.safetensors,
// or shards model-0000N-of-0000M.safetensors listed by
// model.safetensors.index.json. Parameter names are Hugging Face Llama's
// (model.embed_tokens.weight, model.layers.N.self_attn.q_proj.weight, ...,
// lm_head.weight). Also: named random-weight shapes for tests and benchmarks.
//
// Errors (missing file or tensor, wrong shape, unknown dtype, truncated file,
// bad JSON) are c10::Error naming the file and, where there is one, the tensor.

#include <statickv/model/model_config.hpp>
#include <statickv/model/tensor_parallel.hpp>

#include <ATen/ATen.h>

#include <map>
#include <string>
#include <vector>

namespace statickv::reference {

/// Reads a Hugging Face config.json (llama, mistral, qwen2, qwen3, gemma2,
/// gemma3_text and phi3 model types: the families table, families.hpp,
/// docs/checkpoints.md;
/// rope_parameters or the older rope_theta/rope_scaling fields). Fields are
/// read as transformers' config class of that model type reads them: an
/// absent field takes that class's default, and layer types follow Note
/// [layer types per model type] (checkpoint.cpp; table in docs/checkpoints.md).
ModelConfig load_config(const std::string& config_json_path);

/// The ids that end generation according to a generation_config.json: its
/// eos_token_id (an id or a list; null: none), or `fallback` (config.json's)
/// when the file has no such field. This is what transformers' generate()
/// stops at: generation_config's ids replace the model config's.
std::vector<int64_t> load_generation_eos(const std::string& generation_config_path,
                                         const std::vector<int64_t>& fallback);

/// The parameter-name table (reference/model/src/checkpoint/parameters.cpp): the one
/// place Hugging Face's decoder-layer parameter names are spelled; the
/// loader and the model both read names from here.
enum class LayerParam {
  kInputNorm,
  kQProj,
  kKProj,
  kVProj,
  kQBias,
  kKBias,
  kVBias,
  kOProj,
  kOBias,
  kPostNorm,  ///< post_attention_layernorm: before the MLP (Llama), on the attention output (Gemma)
  kGateProj,
  kUpProj,
  kDownProj,
  kQNorm,        ///< self_attn.q_norm [head_dim] (Qwen3, Gemma 3)
  kKNorm,        ///< self_attn.k_norm [head_dim]
  kPreFfnNorm,   ///< pre_feedforward_layernorm (Gemma)
  kPostFfnNorm,  ///< post_feedforward_layernorm (Gemma)
};
inline constexpr const char* kEmbedTokens = "model.embed_tokens.weight";
inline constexpr const char* kFinalNorm = "model.norm.weight";
inline constexpr const char* kLmHead = "lm_head.weight";
/// "model.layers.<layer>.self_attn.q_proj.weight" and so on.
std::string parameter_name(int64_t layer, LayerParam param);
/// The parameters of one decoder layer of `config`, with their shapes.
std::vector<std::pair<LayerParam, std::vector<int64_t>>> layer_parameters(
    const ModelConfig& config);

/// Every parameter the model needs, with its shape, in a stable order.
std::vector<std::pair<std::string, std::vector<int64_t>>> expected_parameters(
    const ModelConfig& config);

/// One tensor as a checkpoint stores it: its name and shape and, when it
/// holds several of the model's parameters stacked along dimension 0 (a
/// projection fused on disk), each one's name and row count in order
/// (empty: the tensor is the parameter `name` itself).
struct DiskTensor {
  std::string name;
  std::vector<int64_t> shape;
  std::vector<std::pair<std::string, int64_t>> parts;
};

/// The disk-name map: the tensors a checkpoint of `config` holds, as its
/// family's DiskLayout (families.hpp) names them. expected_parameters(config)
/// where the layout is kSeparate; with kFusedQkvGateUp each layer's q, k and
/// v projections are one self_attn.qkv_proj and its gate and up one
/// mlp.gate_up_proj.
std::vector<DiskTensor> disk_tensors(const ModelConfig& config);

/// Loads config.json and the safetensors weights of `dir`, checks every
/// expected parameter is present with its shape, and returns the weights in
/// `dtype` on `device`. Tensors are read through a memory map; on the CPU in
/// the file's own dtype they are used in place (no copy). The config's eos
/// ids are generation_config.json's when that file names them
/// (load_generation_eos), as transformers' generate() stops.
///
/// A checkpoint holding tensors the model does not use is refused, naming
/// every one, unless `allow_unused_tensors` is set: a tensor the decoder
/// ignores (an o_proj bias, say) would otherwise change nothing but the
/// answers. Not counted as unused: `lm_head.weight` beside
/// `tie_word_embeddings: true` when it equals the embedding (some real
/// checkpoints save both; a different one is refused even with the option),
/// and non-persistent buffers (`*.rotary_emb.inv_freq`).
struct Checkpoint {
  ModelConfig config;
  Weights weights;
};
/// With `tp.world > 1` only this rank's slices (shard_slices) are read and
/// converted: every parameter is still checked at its full shape, then cut
/// (a view of the memory map; a copy only where dtype, device or a column
/// slice need one), so the pages of other ranks' rows are never touched.
struct LoadOptions {
  bool allow_unused_tensors = false;
  TensorParallel tp;
};
Checkpoint load_checkpoint(const std::string& dir, at::ScalarType dtype, at::Device device,
                           const LoadOptions& options = {});

/// Reads every tensor of one .safetensors file (F32, F16, BF16; also I64/I32
/// for tools), as CPU tensors backed by the file's memory map.
Weights read_safetensors(const std::string& path);

/// Writes tensors to one .safetensors file (used by tests and tools).
void write_safetensors(const std::string& path, const Weights& tensors);

/// Named shapes (named_config_names()): "tiny" (tests), "tiny-mistral",
/// "tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3", "tiny-phi3",
/// and the real layer counts, heads and dims of "smollm2-135m",
/// "gemma3-270m", "llama-3.2-1b", "llama-3.1-8b".
ModelConfig named_config(const std::string& name);
std::vector<std::string> named_config_names();

/// Seeded random weights for `config`: normal(0, 0.02) matrices, identity
/// norms (weights 1, or 0 for Gemma's (1 + weight) norms).
Weights random_weights(const ModelConfig& config, uint64_t seed, at::ScalarType dtype,
                       at::Device device);

}  // namespace statickv::reference
