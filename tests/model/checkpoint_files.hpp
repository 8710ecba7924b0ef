#pragma once
// What the checkpoint tests share (test_checkpoint.cpp, test_config_json.cpp,
// test_safetensors.cpp, test_named_shapes.cpp, test_prompt_cache.cpp): a
// temporary directory, file helpers, the tiny config in both layouts and
// the tiny checkpoint, single file and sharded.

#include "support.hpp"
#include "support/temp_dir.hpp"

#include <statickv/model/checkpoint.hpp>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

namespace statickv::test::checkpoint {

using statickv::test::TempDir;
using namespace statickv;
using namespace statickv::reference;

namespace fs = std::filesystem;

inline void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Replaces the first occurrence of `from` in a file by `to` (same length, so
/// every data offset stays right).
inline void patch_file(const std::string& path, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  std::string bytes = read_bytes(path);
  const size_t at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  bytes.replace(at, from.size(), to);
  write_text(path, bytes);
}

/// A safetensors file from a raw header and data buffer.
inline void write_raw_safetensors(const std::string& path, const std::string& header,
                                  const std::string& data) {
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) bytes[i] = static_cast<char>(n & 0xff);
  write_text(path, bytes + header + data);
}

// "tiny" as transformers 5 writes it: rope in rope_parameters.
inline const char* kTinyConfigV5 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "attention_dropout": 0.0,
  "bos_token_id": null,
  "dtype": "float32",
  "eos_token_id": null,
  "head_dim": 16,
  "hidden_act": "silu",
  "hidden_size": 64,
  "initializer_range": 0.02,
  "intermediate_size": 128,
  "max_position_embeddings": 256,
  "mlp_bias": false,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "pretraining_tp": 1,
  "rms_norm_eps": 1e-06,
  "rope_parameters": {"rope_theta": 10000.0, "rope_type": "default"},
  "tie_word_embeddings": false,
  "transformers_version": "5.0.0",
  "use_cache": true,
  "vocab_size": 128
})";

// "tiny" as older transformers write it: top-level rope_theta, rope_scaling
// null, no head_dim. (Token ids null as in kTinyConfigV5: absent, they would
// take LlamaConfig's defaults, 1 and 2.)
inline const char* kTinyConfigV4 = R"({
  "architectures": ["LlamaForCausalLM"],
  "attention_bias": false,
  "bos_token_id": null,
  "eos_token_id": null,
  "hidden_act": "silu",
  "hidden_size": 64,
  "intermediate_size": 128,
  "max_position_embeddings": 256,
  "model_type": "llama",
  "num_attention_heads": 4,
  "num_hidden_layers": 2,
  "num_key_value_heads": 2,
  "rms_norm_eps": 1e-06,
  "rope_scaling": null,
  "rope_theta": 10000.0,
  "tie_word_embeddings": false,
  "torch_dtype": "float32",
  "transformers_version": "4.45.0",
  "vocab_size": 128
})";

/// A config.json with the tiny dimensions plus `extra` fields (which must
/// include model_type and must not repeat the fields below).
inline std::string tiny_config_with(const std::string& extra) {
  return R"({
  "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
  )" + extra +
         "}";
}

inline ModelConfig config_from_text(const TempDir& tmp, const std::string& text) {
  write_text(tmp.file("config.json"), text);
  return load_config(tmp.file("config.json"));
}

inline Weights tiny_weights() {
  return random_weights(named_config("tiny"), /*seed=*/1, at::kFloat, at::kCPU);
}

/// config.json (transformers 5 layout) and model.safetensors of `weights`.
inline void write_tiny_checkpoint(const TempDir& tmp, const Weights& weights) {
  write_text(tmp.file("config.json"), kTinyConfigV5);
  write_safetensors(tmp.file("model.safetensors"), weights);
}

inline const char* kShard1 = "model-00001-of-00002.safetensors";
inline const char* kShard2 = "model-00002-of-00002.safetensors";

/// The tiny checkpoint split in two shards (layer 0 and the embedding in the
/// first, the rest in the second) with model.safetensors.index.json.
inline void write_sharded_tiny_checkpoint(const TempDir& tmp, const Weights& weights) {
  write_text(tmp.file("config.json"), kTinyConfigV5);
  Weights first, second;
  std::string map;
  for (const auto& [name, tensor] : weights) {
    const bool in_first =
        name == "model.embed_tokens.weight" || name.rfind("model.layers.0.", 0) == 0;
    (in_first ? first : second)[name] = tensor;
    if (!map.empty()) map += ",\n    ";
    map += "\"" + name + "\": \"" + (in_first ? kShard1 : kShard2) + "\"";
  }
  write_safetensors(tmp.file(kShard1), first);
  write_safetensors(tmp.file(kShard2), second);
  write_text(
      tmp.file("model.safetensors.index.json"),
      "{\n  \"metadata\": {\"total_size\": 0},\n  \"weight_map\": {\n    " + map + "\n  }\n}");
}

inline void check_same_config(const ModelConfig& a, const ModelConfig& b) {
  CHECK(a.model_type == b.model_type);
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.hidden_size == b.hidden_size);
  CHECK(a.intermediate_size == b.intermediate_size);
  CHECK(a.num_hidden_layers == b.num_hidden_layers);
  CHECK(a.num_attention_heads == b.num_attention_heads);
  CHECK(a.num_key_value_heads == b.num_key_value_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.max_position_embeddings == b.max_position_embeddings);
  CHECK(a.rms_norm_eps == b.rms_norm_eps);
  CHECK(a.rope.type == b.rope.type);
  CHECK(a.rope.theta == b.rope.theta);
  CHECK(a.rope.factor == b.rope.factor);
  CHECK(a.rope.low_freq_factor == b.rope.low_freq_factor);
  CHECK(a.rope.high_freq_factor == b.rope.high_freq_factor);
  CHECK(a.rope.original_max_position_embeddings == b.rope.original_max_position_embeddings);
  CHECK(a.tie_word_embeddings == b.tie_word_embeddings);
  CHECK(a.attention_bias == b.attention_bias);
  CHECK(a.layer_types == b.layer_types);
  CHECK(a.sliding_window == b.sliding_window);
  CHECK(a.eos_token_ids == b.eos_token_ids);
  CHECK(a.bos_token_id == b.bos_token_id);
}

inline void check_same_weights(const Weights& actual, const Weights& expected) {
  REQUIRE(actual.size() == expected.size());
  for (const auto& [name, tensor] : expected) {
    INFO(name);
    REQUIRE(actual.count(name) == 1);
    CHECK(actual.at(name).scalar_type() == tensor.scalar_type());
    CHECK(actual.at(name).sizes() == tensor.sizes());
    CHECK(at::equal(actual.at(name), tensor));
  }
}

inline bool within(const at::Tensor& a, const at::Tensor& b, uintmax_t bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a.data_ptr());
  const auto pb = reinterpret_cast<uintptr_t>(b.data_ptr());
  return (pa > pb ? pa - pb : pb - pa) < bytes;
}

}  // namespace statickv::test::checkpoint
