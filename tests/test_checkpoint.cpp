// Checkpoints: config.json parsing, safetensors reading and writing, whole
// checkpoint directories (single file and sharded), the errors for each kind
// of broken checkpoint, named shapes and seeded random weights.

#include "support.hpp"

#include <statickv/reference/checkpoint.hpp>
#include <statickv/reference/prompt_cache.hpp>

#include <unistd.h>

#include <atomic>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

namespace fs = std::filesystem;

/// A fresh directory under the system temp directory, removed with its
/// contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device random;
    path_ = fs::temp_directory_path() /
            ("statickv-test-checkpoint-" + std::to_string(::getpid()) + "-" +
             std::to_string(counter++) + "-" + std::to_string(random()));
    fs::create_directories(path_);
  }
  // Not fs::remove_all: the PyPI libtorch.so exports its own copy of
  // std::filesystem, and its remove_all crashes on a non-empty directory.
  // The directory is flat, so removing each entry then the directory is enough.
  ~TempDir() {
    std::error_code ignored;
    std::vector<fs::path> entries;
    for (const auto& entry : fs::directory_iterator(path_, ignored))
      entries.push_back(entry.path());
    for (const fs::path& entry : entries) fs::remove(entry, ignored);
    fs::remove(path_, ignored);
  }
  // Owns the directory on disk.
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string dir() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }

 private:
  fs::path path_;
};

void write_text(const std::string& path, const std::string& text) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out << text;
  REQUIRE(out.good());
}

std::string read_bytes(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
}

/// Replaces the first occurrence of `from` in a file by `to` (same length, so
/// every data offset stays right).
void patch_file(const std::string& path, const std::string& from, const std::string& to) {
  REQUIRE(from.size() == to.size());
  std::string bytes = read_bytes(path);
  const size_t at = bytes.find(from);
  REQUIRE(at != std::string::npos);
  bytes.replace(at, from.size(), to);
  write_text(path, bytes);
}

/// A safetensors file from a raw header and data buffer.
void write_raw_safetensors(const std::string& path, const std::string& header,
                           const std::string& data) {
  std::string bytes(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i, n >>= 8) bytes[i] = static_cast<char>(n & 0xff);
  write_text(path, bytes + header + data);
}

// "tiny" as transformers 5 writes it: rope in rope_parameters.
const char* kTinyConfigV5 = R"({
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
const char* kTinyConfigV4 = R"({
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
std::string tiny_config_with(const std::string& extra) {
  return R"({
  "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 4, "num_attention_heads": 4, "num_key_value_heads": 2,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-06, "rope_theta": 10000.0,
  )" + extra +
         "}";
}

ModelConfig config_from_text(const TempDir& tmp, const std::string& text) {
  write_text(tmp.file("config.json"), text);
  return load_config(tmp.file("config.json"));
}

Weights tiny_weights() {
  return random_weights(named_config("tiny"), /*seed=*/1, at::kFloat, at::kCPU);
}

/// config.json (transformers 5 layout) and model.safetensors of `weights`.
void write_tiny_checkpoint(const TempDir& tmp, const Weights& weights) {
  write_text(tmp.file("config.json"), kTinyConfigV5);
  write_safetensors(tmp.file("model.safetensors"), weights);
}

const char* kShard1 = "model-00001-of-00002.safetensors";
const char* kShard2 = "model-00002-of-00002.safetensors";

/// The tiny checkpoint split in two shards (layer 0 and the embedding in the
/// first, the rest in the second) with model.safetensors.index.json.
void write_sharded_tiny_checkpoint(const TempDir& tmp, const Weights& weights) {
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

void check_same_config(const ModelConfig& a, const ModelConfig& b) {
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

void check_same_weights(const Weights& actual, const Weights& expected) {
  REQUIRE(actual.size() == expected.size());
  for (const auto& [name, tensor] : expected) {
    INFO(name);
    REQUIRE(actual.count(name) == 1);
    CHECK(actual.at(name).scalar_type() == tensor.scalar_type());
    CHECK(actual.at(name).sizes() == tensor.sizes());
    CHECK(at::equal(actual.at(name), tensor));
  }
}

bool within(const at::Tensor& a, const at::Tensor& b, uintmax_t bytes) {
  const auto pa = reinterpret_cast<uintptr_t>(a.data_ptr());
  const auto pb = reinterpret_cast<uintptr_t>(b.data_ptr());
  return (pa > pb ? pa - pb : pb - pa) < bytes;
}

}  // namespace

// ---------------------------------------------------------------------------
// safetensors

TEST_CASE("write_safetensors then read_safetensors gives back names, dtypes, shapes and bytes",
          "[checkpoint]") {
  TempDir tmp;
  Weights tensors;
  tensors["f32"] = at::randn({2, 3});
  tensors["f16"] = at::randn({4}).to(at::kHalf);
  tensors["bf16"] = at::randn({3, 2}).to(at::kBFloat16);
  tensors["i64"] = at::arange(5, i64()).mul(1'000'000'007);
  tensors["i32"] = at::arange(-3, 3, at::kInt);
  tensors["transposed"] = at::randn({3, 4}).t();  // written contiguous
  tensors["empty"] = at::empty({0, 7});
  write_safetensors(tmp.file("t.safetensors"), tensors);

  const Weights back = read_safetensors(tmp.file("t.safetensors"));
  check_same_weights(back, tensors);
  CHECK(back.at("bf16").scalar_type() == at::kBFloat16);
  CHECK(back.at("i64").scalar_type() == at::kLong);
  CHECK(back.at("transposed").sizes() == at::IntArrayRef{4, 3});
  CHECK(back.at("empty").sizes() == at::IntArrayRef{0, 7});
}

TEST_CASE("read_safetensors returns tensors that point into the file's mapping, aligned",
          "[checkpoint]") {
  TempDir tmp;
  Weights tensors;
  tensors["a_u8"] = at::arange(3, at::kByte);  // narrowest first by name
  tensors["b_f16"] = at::ones({3}, at::kHalf);
  tensors["c_f32"] = at::ones({5});
  tensors["d_i64"] = at::ones({1}, i64());
  write_safetensors(tmp.file("t.safetensors"), tensors);
  const uintmax_t size = fs::file_size(tmp.file("t.safetensors"));

  const Weights back = read_safetensors(tmp.file("t.safetensors"));
  for (const auto& [name, tensor] : back) {
    INFO(name);
    CHECK(within(tensor, back.at("a_u8"), size));
    CHECK(reinterpret_cast<uintptr_t>(tensor.data_ptr()) % tensor.element_size() == 0);
  }
}

TEST_CASE("a tensor stored misaligned for its dtype is read with its values", "[checkpoint]") {
  TempDir tmp;
  const std::string path = tmp.file("t.safetensors");
  // A 63-byte header puts the data at file offset 71: misaligned for F32.
  std::string header = R"({"w": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]}})";
  header.append(63 - header.size(), ' ');
  const float values[2] = {1.5f, -2.25f};
  write_raw_safetensors(path, header, std::string(reinterpret_cast<const char*>(values), 8));

  const at::Tensor w = read_safetensors(path).at("w");
  CHECK(reinterpret_cast<uintptr_t>(w.data_ptr()) % 4 == 0);
  CHECK(at::equal(w, at::tensor({1.5f, -2.25f})));
}

TEST_CASE("writing to a tensor read from a file leaves the file unchanged", "[checkpoint]") {
  TempDir tmp;
  write_safetensors(tmp.file("t.safetensors"), {{"w", at::zeros({16})}});
  const std::string before = read_bytes(tmp.file("t.safetensors"));

  Weights back = read_safetensors(tmp.file("t.safetensors"));
  back.at("w").fill_(7.0);
  CHECK(back.at("w").sum().item<float>() == 16 * 7.0f);
  CHECK(read_bytes(tmp.file("t.safetensors")) == before);
  CHECK(at::equal(read_safetensors(tmp.file("t.safetensors")).at("w"), at::zeros({16})));
}

TEST_CASE("a tensor read from a file stays valid after everything else is released",
          "[checkpoint]") {
  TempDir tmp;
  const at::Tensor w = at::arange(32, f32());
  write_safetensors(tmp.file("t.safetensors"), {{"w", w}, {"other", at::ones({8})}});
  at::Tensor kept;
  {
    Weights back = read_safetensors(tmp.file("t.safetensors"));
    kept = back.at("w");
  }
  fs::remove(tmp.file("t.safetensors"));
  CHECK(at::equal(kept, w));
}

TEST_CASE("write_safetensors rejects a dtype safetensors cannot name, before writing",
          "[checkpoint]") {
  TempDir tmp;
  const std::string path = tmp.file("t.safetensors");
  require_error(
      [&] {
        write_safetensors(path, {{"z", at::ones({2}, at::kComplexFloat)}});
      },
      {path, "\"z\"", "expected a dtype among"});
  CHECK_FALSE(fs::exists(path));
}

// ---------------------------------------------------------------------------
// Checkpoint directories

TEST_CASE("a checkpoint in the transformers 5 layout loads back its config and exact weights",
          "[checkpoint]") {
  TempDir tmp;
  const Weights weights = tiny_weights();
  write_tiny_checkpoint(tmp, weights);

  const Checkpoint loaded = load_checkpoint(tmp.dir(), at::kFloat, at::kCPU);
  check_same_config(loaded.config, named_config("tiny"));
  check_same_weights(loaded.weights, weights);
}

TEST_CASE("a config in the older rope_theta layout loads the same config", "[checkpoint]") {
  TempDir tmp;
  const Weights weights = tiny_weights();
  write_safetensors(tmp.file("model.safetensors"), weights);
  write_text(tmp.file("config.json"), kTinyConfigV4);

  const Checkpoint loaded = load_checkpoint(tmp.dir(), at::kFloat, at::kCPU);
  check_same_config(loaded.config, named_config("tiny"));
  check_same_weights(loaded.weights, weights);
}

TEST_CASE("a sharded checkpoint loads the same weights as a single file", "[checkpoint]") {
  TempDir tmp;
  const Weights weights = tiny_weights();
  write_sharded_tiny_checkpoint(tmp, weights);
  REQUIRE_FALSE(fs::exists(tmp.file("model.safetensors")));

  const Checkpoint loaded = load_checkpoint(tmp.dir(), at::kFloat, at::kCPU);
  check_same_config(loaded.config, named_config("tiny"));
  check_same_weights(loaded.weights, weights);
}

TEST_CASE("loading on the CPU in the file's dtype uses the mapped tensors in place",
          "[checkpoint]") {
  TempDir tmp;
  write_tiny_checkpoint(tmp, tiny_weights());
  const uintmax_t size = fs::file_size(tmp.file("model.safetensors"));

  const Checkpoint loaded = load_checkpoint(tmp.dir(), at::kFloat, at::kCPU);
  const at::Tensor& first = loaded.weights.at("model.embed_tokens.weight");
  for (const auto& [name, tensor] : loaded.weights) {
    INFO(name);
    CHECK(within(tensor, first, size));
  }
}

TEST_CASE("loading in another dtype converts every weight", "[checkpoint]") {
  TempDir tmp;
  const Weights weights = tiny_weights();
  write_tiny_checkpoint(tmp, weights);

  const Checkpoint loaded = load_checkpoint(tmp.dir(), at::kBFloat16, at::kCPU);
  REQUIRE(loaded.weights.size() == weights.size());
  for (const auto& [name, tensor] : weights) {
    INFO(name);
    CHECK(loaded.weights.at(name).scalar_type() == at::kBFloat16);
    CHECK(at::equal(loaded.weights.at(name), tensor.to(at::kBFloat16)));
  }
}

TEST_CASE("rotary inv_freq buffers in a checkpoint are derived, not weights: skipped, not refused",
          "[checkpoint]") {
  TempDir tmp;
  Weights weights = tiny_weights();
  weights["model.layers.0.self_attn.rotary_emb.inv_freq"] = at::ones({8});
  weights["model.rotary_emb.inv_freq"] = at::ones({8});
  write_tiny_checkpoint(tmp, weights);

  const Checkpoint loaded = load_checkpoint(tmp.dir(), at::kFloat, at::kCPU);
  CHECK(loaded.weights.count("model.layers.0.self_attn.rotary_emb.inv_freq") == 0);
  CHECK(loaded.weights.size() == weights.size() - 2);
}

TEST_CASE("a tied checkpoint needs no lm_head.weight", "[checkpoint]") {
  TempDir tmp;
  ModelConfig config = named_config("tiny");
  config.tie_word_embeddings = true;
  const Weights weights = random_weights(config, /*seed=*/3, at::kFloat, at::kCPU);
  CHECK(weights.count("lm_head.weight") == 0);
  write_safetensors(tmp.file("model.safetensors"), weights);
  std::string text = kTinyConfigV5;
  const std::string untied = "\"tie_word_embeddings\": false";
  text.replace(text.find(untied), untied.size(), "\"tie_word_embeddings\": true");
  write_text(tmp.file("config.json"), text);

  const Checkpoint loaded = load_checkpoint(tmp.dir(), at::kFloat, at::kCPU);
  CHECK(loaded.config.tie_word_embeddings);
  check_same_weights(loaded.weights, weights);
}

// ---------------------------------------------------------------------------
// config.json

TEST_CASE("llama3 rope is read from rope_parameters and from rope_scaling alike", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig v5 = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "llama",
    "rope_parameters": {"rope_type": "llama3", "rope_theta": 500000.0, "factor": 32.0,
                        "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                        "original_max_position_embeddings": 8192})"));
  const ModelConfig v4 = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "llama",
    "rope_scaling": {"type": "llama3", "factor": 32.0, "low_freq_factor": 1.0,
                     "high_freq_factor": 4.0, "original_max_position_embeddings": 8192})"));
  for (const ModelConfig& c : {v5, v4}) {
    CHECK(c.rope.type == "llama3");
    CHECK(c.rope.factor == 32.0);
    CHECK(c.rope.low_freq_factor == 1.0);
    CHECK(c.rope.high_freq_factor == 4.0);
    CHECK(c.rope.original_max_position_embeddings == 8192);
  }
  CHECK(v5.rope.theta == 500000.0);
  CHECK(v4.rope.theta == 10000.0);  // the top-level rope_theta
}

TEST_CASE("mistral with a sliding_window makes every layer sliding", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c =
      config_from_text(tmp, tiny_config_with(R"("model_type": "mistral", "sliding_window": 8)"));
  CHECK(c.model_type == "mistral");
  CHECK(c.layer_types == all_sliding(4));
  CHECK(c.sliding_window == 8);
  CHECK_FALSE(c.attention_bias);
}

TEST_CASE("mistral with sliding_window null has only full layers", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c =
      config_from_text(tmp, tiny_config_with(R"("model_type": "mistral", "sliding_window": null)"));
  CHECK_FALSE(c.has_sliding());
  CHECK(c.sliding_window == 0);
}

TEST_CASE("qwen2 with use_sliding_window false ignores its sliding_window and has q/k/v biases",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "qwen2", "use_sliding_window": false, "sliding_window": 4096,
    "max_window_layers": 2, "attention_bias": false)"));
  CHECK_FALSE(c.has_sliding());
  CHECK(c.sliding_window == 0);
  CHECK(c.attention_bias);
}

TEST_CASE("qwen2 with use_sliding_window true slides the layers from max_window_layers on",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "qwen2", "use_sliding_window": true, "sliding_window": 8,
    "max_window_layers": 3)"));
  using T = LayerType;
  CHECK(c.layer_types == std::vector<T>{T::kFull, T::kFull, T::kFull, T::kSliding});
  CHECK(c.sliding_window == 8);
}

TEST_CASE("layer_types lists each layer's attention", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"(
    "model_type": "qwen2", "use_sliding_window": true, "sliding_window": 8,
    "max_window_layers": 0,
    "layer_types": ["full_attention", "full_attention", "sliding_attention",
                    "sliding_attention"])"));
  check_same_config(c, named_config("tiny-qwen2"));
}

TEST_CASE("eos_token_id may be an int, a list or null", "[checkpoint]") {
  TempDir tmp;
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "eos_token_id": 2)"))
            .eos_token_ids == std::vector<int64_t>{2});
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama",
                                                  "eos_token_id": [128001, 128009])"))
            .eos_token_ids == std::vector<int64_t>{128001, 128009});
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "eos_token_id": null)"))
            .eos_token_ids.empty());
}

TEST_CASE("generation_config.json's eos ids replace config.json's, as generate() stops",
          "[checkpoint]") {
  TempDir tmp;
  write_tiny_checkpoint(tmp, tiny_weights());
  const std::vector<int64_t> from_config =
      load_checkpoint(tmp.dir(), at::kFloat, at::kCPU).config.eos_token_ids;
  write_text(tmp.file("generation_config.json"), R"({"eos_token_id": [7, 9]})");
  CHECK(load_checkpoint(tmp.dir(), at::kFloat, at::kCPU).config.eos_token_ids ==
        std::vector<int64_t>{7, 9});
  write_text(tmp.file("generation_config.json"), R"({"eos_token_id": 5})");
  CHECK(load_checkpoint(tmp.dir(), at::kFloat, at::kCPU).config.eos_token_ids ==
        std::vector<int64_t>{5});
  // No eos_token_id there: config.json's ids stand.
  write_text(tmp.file("generation_config.json"), R"({"bos_token_id": 1})");
  CHECK(load_checkpoint(tmp.dir(), at::kFloat, at::kCPU).config.eos_token_ids == from_config);
  write_text(tmp.file("generation_config.json"), R"({"eos_token_id": "two"})");
  CHECK_THROWS_WITH(load_checkpoint(tmp.dir(), at::kFloat, at::kCPU),
                    Catch::Contains("generation_config.json") && Catch::Contains("eos_token_id"));
}

TEST_CASE("head_dim null or absent is hidden_size / num_attention_heads, else read",
          "[checkpoint]") {
  TempDir tmp;
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "head_dim": null)"))
            .head_dim == 16);
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama")")).head_dim == 16);
  CHECK(config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "head_dim": 32)"))
            .head_dim == 32);
}

TEST_CASE("llama's attention_bias puts biases on q, k, v and o; false when absent",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig plain = config_from_text(tmp, tiny_config_with(R"("model_type": "llama")"));
  CHECK_FALSE(plain.attention_bias);
  CHECK_FALSE(plain.o_proj_bias);
  const ModelConfig biased =
      config_from_text(tmp, tiny_config_with(R"("model_type": "llama", "attention_bias": true)"));
  CHECK(biased.attention_bias);
  CHECK(biased.o_proj_bias);
  const auto params = expected_parameters(biased);
  const std::map<std::string, std::vector<int64_t>> shapes(params.begin(), params.end());
  CHECK(shapes.at("model.layers.3.self_attn.o_proj.bias") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.layers.3.self_attn.q_proj.bias") == std::vector<int64_t>{64});
}

TEST_CASE("mistral ignores attention_bias: its projections have no biases", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c =
      config_from_text(tmp, tiny_config_with(R"("model_type": "mistral", "attention_bias": true)"));
  CHECK_FALSE(c.attention_bias);
  CHECK_FALSE(c.o_proj_bias);
}

// Note [layer types per model type] (reference/src/checkpoint.cpp): each
// model type reads layer_types and sliding_window as transformers 5.24 does.
TEST_CASE("llama ignores layer_types and sliding_window: every layer is full", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"("model_type": "llama",
    "sliding_window": 8, "layer_types": ["sliding_attention", "full_attention"])"));
  CHECK_FALSE(c.has_sliding());
  CHECK(c.sliding_window == 0);
}

TEST_CASE("mistral ignores layer_types and slides every layer, by 4096 when the window is absent",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig listed = config_from_text(tmp, tiny_config_with(R"("model_type": "mistral",
    "sliding_window": 8, "layer_types": ["full_attention", "full_attention",
                                         "full_attention", "full_attention"])"));
  CHECK(listed.layer_types == all_sliding(4));
  CHECK(listed.sliding_window == 8);
  const ModelConfig absent = config_from_text(tmp, tiny_config_with(R"("model_type": "mistral")"));
  CHECK(absent.layer_types == all_sliding(4));
  CHECK(absent.sliding_window == 4096);
}

TEST_CASE("qwen2 with use_sliding_window and no max_window_layers slides from layer 28 on",
          "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, R"({"model_type": "qwen2",
    "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 30,
    "num_attention_heads": 4, "num_key_value_heads": 2, "use_sliding_window": true,
    "sliding_window": 8})");
  std::vector<LayerType> expected(28, LayerType::kFull);
  expected.push_back(LayerType::kSliding);
  expected.push_back(LayerType::kSliding);
  CHECK(c.layer_types == expected);
  CHECK(c.sliding_window == 8);
}

TEST_CASE("qwen2 applies layer_types as written when it has a window", "[checkpoint]") {
  TempDir tmp;
  const ModelConfig c = config_from_text(tmp, tiny_config_with(R"("model_type": "qwen2",
    "use_sliding_window": true, "sliding_window": 8, "max_window_layers": 3,
    "layer_types": ["sliding_attention", "full_attention", "sliding_attention",
                    "full_attention"])"));
  using T = LayerType;
  CHECK(c.layer_types == std::vector<T>{T::kSliding, T::kFull, T::kSliding, T::kFull});
}

TEST_CASE("a field config.json leaves out takes its model type's config class default",
          "[checkpoint]") {
  TempDir tmp;
  struct Case {
    const char* type;
    int64_t vocab, intermediate, kv_heads, max_positions;
    std::vector<int64_t> eos;
    int64_t bos;
  };
  for (const Case& k : {Case{"llama", 32000, 11008, 32, 2048, {2}, 1},
                        Case{"mistral", 32000, 14336, 8, 131072, {2}, 1},
                        Case{"qwen2", 151936, 22016, 32, 32768, {}, -1}}) {
    INFO(k.type);
    const ModelConfig c =
        config_from_text(tmp, std::string(R"({"model_type": ")") + k.type + R"("})");
    CHECK(c.vocab_size == k.vocab);
    CHECK(c.hidden_size == 4096);
    CHECK(c.intermediate_size == k.intermediate);
    CHECK(c.num_hidden_layers == 32);
    CHECK(c.num_attention_heads == 32);
    CHECK(c.num_key_value_heads == k.kv_heads);
    CHECK(c.head_dim == 128);
    CHECK(c.max_position_embeddings == k.max_positions);
    CHECK(c.rms_norm_eps == 1e-6);
    CHECK(c.rope.theta == 10000.0);
    CHECK_FALSE(c.tie_word_embeddings);
    CHECK(c.eos_token_ids == k.eos);
    CHECK(c.bos_token_id == k.bos);
  }
  // null num_key_value_heads means no grouping in every class.
  CHECK(config_from_text(tmp, R"({"model_type": "mistral", "num_key_value_heads": null})")
            .num_key_value_heads == 32);
}

// ---------------------------------------------------------------------------
// Tensors the model does not read.

TEST_CASE("a checkpoint with tensors the model ignores is refused, naming every one",
          "[checkpoint]") {
  TempDir tmp;
  Weights weights = tiny_weights();
  weights["model.layers.0.self_attn.o_proj.bias"] = at::zeros({64});
  weights["model.layers.1.mlp.gate_proj.bias"] = at::zeros({128});
  write_tiny_checkpoint(tmp, weights);
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {tmp.dir(), "2 it would ignore", "model.layers.0.self_attn.o_proj.bias",
                 "model.layers.1.mlp.gate_proj.bias", "allow_unused_tensors"});
  LoadOptions options;
  options.allow_unused_tensors = true;
  const Checkpoint ckpt = load_checkpoint(tmp.dir(), at::kFloat, at::kCPU, options);
  CHECK(ckpt.weights.count("model.layers.0.self_attn.o_proj.bias") == 0);
  check_same_weights(ckpt.weights, tiny_weights());
}

TEST_CASE("a tied checkpoint may also hold lm_head.weight when it equals the embedding",
          "[checkpoint]") {
  TempDir tmp;
  ModelConfig config = named_config("tiny");
  config.tie_word_embeddings = true;
  Weights weights = random_weights(config, /*seed=*/1, at::kFloat, at::kCPU);
  weights["lm_head.weight"] = weights.at("model.embed_tokens.weight").clone();
  std::string text = kTinyConfigV5;
  const std::string untied = "\"tie_word_embeddings\": false";
  text.replace(text.find(untied), untied.size(), "\"tie_word_embeddings\": true");
  write_text(tmp.file("config.json"), text);
  write_safetensors(tmp.file("model.safetensors"), weights);
  CHECK(load_checkpoint(tmp.dir(), at::kFloat, at::kCPU).config.tie_word_embeddings);

  weights["lm_head.weight"] = weights.at("lm_head.weight").add(1.0);
  write_safetensors(tmp.file("model.safetensors"), weights);
  LoadOptions options;
  options.allow_unused_tensors = true;  // a contradiction is refused even so
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU, options); },
                {"lm_head.weight", "tie_word_embeddings", "different"});
}

TEST_CASE("load_config names the file and the field of an unusable config", "[checkpoint]") {
  TempDir tmp;
  const std::string path = tmp.file("config.json");
  struct Bad {
    std::string text;
    std::vector<std::string> fragments;
  };
  const std::vector<Bad> cases = {
      {tiny_config_with(R"("model_type": "gpt2")"), {"model_type", "\"gpt2\""}},
      {R"({"model_type": "llama", "vocab_size": null})", {"vocab_size", "integer", "null"}},
      {tiny_config_with(R"("model_type": "llama", "vocab_size": "big")"), {"vocab_size"}},
      {tiny_config_with(R"("model_type": "llama", "rope_scaling": {"rope_type": "yarn"})"),
       {"rope_scaling.rope_type", "yarn"}},
      {tiny_config_with(R"("model_type": "llama", "rope_scaling": {"rope_type": "llama3"})"),
       {"rope_scaling.factor"}},
      {tiny_config_with(R"("model_type": "qwen2", "use_sliding_window": true,
          "sliding_window": 8, "layer_types": ["full_attention"])"),
       {"layer_types", "num_hidden_layers (4)"}},
      {tiny_config_with(R"("model_type": "qwen2", "layer_types": ["sliding_attention",
          "full_attention", "full_attention", "full_attention"])"),
       {"layer_types", "use_sliding_window", "no window"}},
      {tiny_config_with(R"("model_type": "llama", "num_key_value_heads": 3)"),
       {"ModelConfig.num_key_value_heads"}},
      {tiny_config_with(R"("model_type": "llama", "hidden_act": "gelu")"), {"hidden_act"}},
      {tiny_config_with(R"("model_type": "llama", "mlp_bias": true)"), {"mlp_bias"}},
  };
  for (const Bad& bad : cases) {
    INFO(bad.text);
    write_text(path, bad.text);
    std::vector<std::string> fragments = bad.fragments;
    fragments.push_back(path);
    require_error([&] { load_config(path); }, fragments);
  }
}

// ---------------------------------------------------------------------------
// Broken checkpoints: each error names the file and, where there is one, the
// tensor.

TEST_CASE("a missing tensor is named with the file searched", "[checkpoint]") {
  TempDir tmp;
  Weights weights = tiny_weights();
  weights.erase("model.layers.1.mlp.up_proj.weight");
  write_tiny_checkpoint(tmp, weights);
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {tmp.file("model.safetensors"), "model.layers.1.mlp.up_proj.weight"});
}

TEST_CASE("a tensor missing from a sharded index is named with the shards searched",
          "[checkpoint]") {
  TempDir tmp;
  Weights weights = tiny_weights();
  weights.erase("model.norm.weight");
  write_sharded_tiny_checkpoint(tmp, weights);
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {"model.safetensors.index.json", "model.norm.weight", kShard1, kShard2});
}

TEST_CASE("a tensor of the wrong shape is named with both shapes", "[checkpoint]") {
  TempDir tmp;
  Weights weights = tiny_weights();
  weights["model.layers.0.self_attn.k_proj.weight"] = at::zeros({16, 64});
  write_tiny_checkpoint(tmp, weights);
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {tmp.file("model.safetensors"), "model.layers.0.self_attn.k_proj.weight",
                 "expected shape [32, 64]", "got [16, 64]"});
}

TEST_CASE("an integer tensor where a weight belongs is named with its dtype", "[checkpoint]") {
  TempDir tmp;
  Weights weights = tiny_weights();
  weights["model.norm.weight"] = at::ones({64}, i64());
  write_tiny_checkpoint(tmp, weights);
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {tmp.file("model.safetensors"), "model.norm.weight", "floating", "I64"});
}

TEST_CASE("an unknown dtype is named with the file and tensor", "[checkpoint]") {
  TempDir tmp;
  write_tiny_checkpoint(tmp, tiny_weights());
  // The header lists tensors by name, so the first "F32" is lm_head.weight's.
  patch_file(tmp.file("model.safetensors"), "\"F32\"", "\"C64\"");
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {tmp.file("model.safetensors"), "lm_head.weight", "C64"});
}

TEST_CASE("a truncated file is named with the tensor that runs past its end", "[checkpoint]") {
  TempDir tmp;
  write_tiny_checkpoint(tmp, tiny_weights());
  const std::string path = tmp.file("model.safetensors");
  fs::resize_file(path, fs::file_size(path) - 4);
  // Same-width tensors are written in name order, so model.norm.weight is last.
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {path, "model.norm.weight", "truncated"});
}

TEST_CASE("a tensor whose byte size does not match its shape is named", "[checkpoint]") {
  TempDir tmp;
  const std::string path = tmp.file("t.safetensors");
  write_raw_safetensors(path, R"({"w": {"dtype": "F32", "shape": [4], "data_offsets": [0, 12]}})",
                        std::string(16, '\0'));
  require_error([&] { read_safetensors(path); }, {path, "\"w\"", "expected 16 bytes"});
}

TEST_CASE("a file too short for its header is named", "[checkpoint]") {
  TempDir tmp;
  const std::string path = tmp.file("t.safetensors");
  write_text(path, "abc");
  require_error([&] { read_safetensors(path); }, {path, "at least 8 bytes"});
  write_raw_safetensors(path, "{}", "");
  patch_file(path, std::string("\x02\0\0\0", 4), std::string("\xff\0\0\0", 4));
  require_error([&] { read_safetensors(path); }, {path, "header length"});
}

TEST_CASE("bad JSON in config.json is named with the file", "[checkpoint]") {
  TempDir tmp;
  write_safetensors(tmp.file("model.safetensors"), tiny_weights());
  write_text(tmp.file("config.json"), R"({"model_type": "llama", "vocab_size": 12)");
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {tmp.file("config.json"), "invalid JSON"});
}

TEST_CASE("bad JSON in a safetensors header is named with the file", "[checkpoint]") {
  TempDir tmp;
  write_tiny_checkpoint(tmp, tiny_weights());
  patch_file(tmp.file("model.safetensors"), "{\"__metadata__\"", "[\"__metadata__\"");
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {tmp.file("model.safetensors"), "invalid JSON"});
}

TEST_CASE("a missing config.json is named", "[checkpoint]") {
  TempDir tmp;
  write_safetensors(tmp.file("model.safetensors"), tiny_weights());
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {tmp.file("config.json")});
}

TEST_CASE("a directory without weights names the files it looked for", "[checkpoint]") {
  TempDir tmp;
  write_text(tmp.file("config.json"), kTinyConfigV5);
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {"model.safetensors", "model.safetensors.index.json"});
}

TEST_CASE("a missing shard file named in the index is named", "[checkpoint]") {
  TempDir tmp;
  write_sharded_tiny_checkpoint(tmp, tiny_weights());
  fs::remove(tmp.file(kShard2));
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {"model.safetensors.index.json", tmp.file(kShard2)});
}

// ---------------------------------------------------------------------------
// Model configs, parameter lists, named shapes and random weights

TEST_CASE("ModelConfig::validate names the field of each impossible config", "[checkpoint]") {
  CHECK_NOTHROW(named_config("tiny").validate());
  struct Bad {
    const char* field;
    void (*mutate)(ModelConfig&);
  };
  const std::vector<Bad> cases = {
      {"vocab_size", [](ModelConfig& c) { c.vocab_size = 0; }},
      {"hidden_size", [](ModelConfig& c) { c.hidden_size = -1; }},
      {"intermediate_size", [](ModelConfig& c) { c.intermediate_size = 0; }},
      {"num_hidden_layers", [](ModelConfig& c) { c.num_hidden_layers = 0; }},
      {"num_attention_heads", [](ModelConfig& c) { c.num_attention_heads = 0; }},
      {"num_key_value_heads", [](ModelConfig& c) { c.num_key_value_heads = 0; }},
      {"num_key_value_heads", [](ModelConfig& c) { c.num_key_value_heads = 3; }},
      {"head_dim", [](ModelConfig& c) { c.head_dim = 0; }},
      {"rms_norm_eps", [](ModelConfig& c) { c.rms_norm_eps = 0; }},
      {"rope.type", [](ModelConfig& c) { c.rope.type = "yarn"; }},
      {"layer_types", [](ModelConfig& c) { c.layer_types = {LayerType::kFull}; }},
      {"sliding_window", [](ModelConfig& c) { c.layer_types = all_sliding(2); }},
  };
  for (const Bad& bad : cases) {
    ModelConfig c = named_config("tiny");
    bad.mutate(c);
    INFO(bad.field);
    require_error([&] { c.validate(); }, {std::string("ModelConfig.") + bad.field, "expected"});
  }
}

TEST_CASE("expected_parameters lists Hugging Face Llama names and shapes", "[checkpoint]") {
  const auto params = expected_parameters(named_config("tiny"));
  const std::map<std::string, std::vector<int64_t>> shapes(params.begin(), params.end());
  CHECK(params.size() == 1 + 2 * 9 + 2);
  CHECK(params.front().first == "model.embed_tokens.weight");
  CHECK(shapes.at("model.embed_tokens.weight") == std::vector<int64_t>{128, 64});
  CHECK(shapes.at("model.layers.1.input_layernorm.weight") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.layers.1.self_attn.q_proj.weight") == std::vector<int64_t>{64, 64});
  CHECK(shapes.at("model.layers.1.self_attn.k_proj.weight") == std::vector<int64_t>{32, 64});
  CHECK(shapes.at("model.layers.1.self_attn.v_proj.weight") == std::vector<int64_t>{32, 64});
  CHECK(shapes.at("model.layers.1.self_attn.o_proj.weight") == std::vector<int64_t>{64, 64});
  CHECK(shapes.at("model.layers.1.post_attention_layernorm.weight") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.layers.1.mlp.gate_proj.weight") == std::vector<int64_t>{128, 64});
  CHECK(shapes.at("model.layers.1.mlp.up_proj.weight") == std::vector<int64_t>{128, 64});
  CHECK(shapes.at("model.layers.1.mlp.down_proj.weight") == std::vector<int64_t>{64, 128});
  CHECK(shapes.at("model.norm.weight") == std::vector<int64_t>{64});
  CHECK(shapes.at("lm_head.weight") == std::vector<int64_t>{128, 64});
  CHECK(shapes.count("model.layers.0.self_attn.q_proj.bias") == 0);
}

TEST_CASE("attention_bias adds q/k/v biases and no o bias", "[checkpoint]") {
  const auto params = expected_parameters(named_config("tiny-qwen2"));
  const std::map<std::string, std::vector<int64_t>> shapes(params.begin(), params.end());
  CHECK(shapes.at("model.layers.3.self_attn.q_proj.bias") == std::vector<int64_t>{64});
  CHECK(shapes.at("model.layers.3.self_attn.k_proj.bias") == std::vector<int64_t>{32});
  CHECK(shapes.at("model.layers.3.self_attn.v_proj.bias") == std::vector<int64_t>{32});
  CHECK(shapes.count("model.layers.3.self_attn.o_proj.bias") == 0);
}

TEST_CASE("llama-3.2-1b has the real model's shape", "[checkpoint]") {
  const ModelConfig c = named_config("llama-3.2-1b");
  CHECK(c.num_hidden_layers == 16);
  CHECK(c.num_attention_heads == 32);
  CHECK(c.num_key_value_heads == 8);
  CHECK(c.head_dim == 64);
  CHECK(c.hidden_size == 2048);
  CHECK(c.vocab_size == 128256);
  CHECK(c.tie_word_embeddings);
  CHECK(c.rope.type == "llama3");
  CHECK(c.rope.factor == 32.0);
  CHECK(c.eos_token_ids == std::vector<int64_t>{128001, 128008, 128009});
  int64_t count = 0;
  for (const auto& [name, shape] : expected_parameters(c)) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    count += n;
  }
  CHECK(count == 1'235'814'400);  // Llama 3.2 1B's parameter count
}

TEST_CASE("named_config knows every listed name and lists them for an unknown one",
          "[checkpoint]") {
  for (const std::string& name : named_config_names()) {
    INFO(name);
    CHECK_NOTHROW(named_config(name));
  }
  CHECK(named_config("tiny-mistral").layer_types == all_sliding(2));
  CHECK(named_config("llama-3.1-8b").num_hidden_layers == 32);
  require_error([] { named_config("gpt-5"); }, {"gpt-5", "tiny", "tiny-mistral", "tiny-qwen2",
                                                "smollm2-135m", "llama-3.2-1b", "llama-3.1-8b"});
  // SmolLM2-135M: 30 layers of 9 heads over 3 kv heads, tied embeddings.
  int64_t count = 0;
  for (const auto& [name, shape] : expected_parameters(named_config("smollm2-135m"))) {
    int64_t n = 1;
    for (int64_t d : shape) n *= d;
    count += n;
  }
  CHECK(count == 134'515'008);
}

TEST_CASE("random_weights is deterministic for a seed and differs across seeds", "[checkpoint]") {
  const ModelConfig config = named_config("tiny-qwen2");
  const Weights a = random_weights(config, /*seed=*/5, at::kFloat, at::kCPU);
  const Weights b = random_weights(config, /*seed=*/5, at::kFloat, at::kCPU);
  const Weights c = random_weights(config, /*seed=*/6, at::kFloat, at::kCPU);
  check_same_weights(a, b);
  CHECK_FALSE(at::equal(a.at("model.layers.0.self_attn.q_proj.weight"),
                        c.at("model.layers.0.self_attn.q_proj.weight")));
  CHECK_FALSE(at::equal(a.at("model.layers.0.self_attn.q_proj.bias"),
                        c.at("model.layers.0.self_attn.q_proj.bias")));
  CHECK(a.size() == expected_parameters(config).size());
}

TEST_CASE("random_weights has unit norms and small normal matrices", "[checkpoint]") {
  const Weights w = random_weights(named_config("tiny"), /*seed=*/0, at::kFloat, at::kCPU);
  CHECK(at::equal(w.at("model.norm.weight"), at::ones({64})));
  CHECK(at::equal(w.at("model.layers.1.input_layernorm.weight"), at::ones({64})));
  const at::Tensor m = w.at("model.embed_tokens.weight");
  CHECK(std::abs(m.mean().item<double>()) < 0.002);
  CHECK(std::abs(m.std().item<double>() - 0.02) < 0.001);
}

TEST_CASE("random_weights in another dtype are the float32 weights rounded", "[checkpoint]") {
  const ModelConfig config = named_config("tiny");
  const Weights f32w = random_weights(config, /*seed=*/9, at::kFloat, at::kCPU);
  const Weights bf16 = random_weights(config, /*seed=*/9, at::kBFloat16, at::kCPU);
  for (const auto& [name, tensor] : f32w) {
    INFO(name);
    CHECK(bf16.at(name).scalar_type() == at::kBFloat16);
    CHECK(at::equal(bf16.at(name), tensor.to(at::kBFloat16)));
  }
}

// Prompt-cache files (reference/checkpoint/prompt_cache.cpp).
namespace {

/// Prefills positions 0..len-1 of row 0 with random keys and values.
void prefill_row0(Cache& cache, int64_t len, uint64_t seed) {
  const CacheConfig& c = cache.config();
  at::manual_seed(seed);
  for (int64_t start = 0; start < len; start += c.effective_max_chunk()) {
    const int64_t n = std::min(c.effective_max_chunk(), len - start);
    const StepPlan step = cache.prepare(arange_positions(start, n), 1);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const at::Tensor k = at::randn({1, c.num_kv_heads, n, c.head_dim}, c.dtype);
      cache.update(l, k, at::randn_like(k), step);
    }
  }
}

CacheConfig prompt_config() { return ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4); }

}  // namespace

TEST_CASE("a prompt-cache file restores the saved row and its ids into another cache's row",
          "[checkpoint][prompt_cache]") {
  TempDir dir;
  HybridCache source(prompt_config());
  prefill_row0(source, 11, 3);
  const std::vector<int64_t> ids = {5, 1, 4, 1, 5, 9, 2, 6, 5, 3, 5};
  write_prompt_cache(dir.file("prompt.safetensors"), source, 0, ids, "tiny-seed-1");

  HybridCache target(prompt_config());
  prefill_row0(target, 20, 4);  // row 0 of the target held something else
  CHECK(restore_prompt_cache(dir.file("prompt.safetensors"), target, 1, "tiny-seed-1") == ids);
  for (int64_t l = 0; l < 2; ++l) {
    const int64_t cap = source.capacity(l);
    CHECK(bit_identical(target.keys(l)[1].narrow(1, 0, cap), source.keys(l)[0].narrow(1, 0, cap)));
    CHECK(bit_identical(target.values(l)[1].narrow(1, 0, cap),
                        source.values(l)[0].narrow(1, 0, cap)));
    CHECK(at::equal(target.slot_positions(l)[1], source.slot_positions(l)[0]));
  }
  CHECK(target.seq_lengths()[1].item<int64_t>() == 11);
  require_error(
      [&] {
        write_prompt_cache(dir.file("x.safetensors"), source, 0, {1, 2});
      },
      {"ids", "expected 11 ids", "got 2"});
}

TEST_CASE("a mismatched or damaged prompt-cache file is refused and leaves the cache unchanged",
          "[checkpoint][prompt_cache][errors]") {
  TempDir dir;
  const std::string path = dir.file("prompt.safetensors");
  HybridCache source(prompt_config());
  prefill_row0(source, 9, 3);
  write_prompt_cache(path, source, 0, {1, 2, 3, 4, 5, 6, 7, 8, 9}, "model-a");
  const auto refused = [&](const char* what, const CacheConfig& config, const std::string& file,
                           const std::string& model_id, const std::vector<std::string>& fragments) {
    INFO(what);
    HybridCache cache(config);
    prefill_row0(cache, 6, 5);
    const Snapshot before(cache);
    require_error([&] { restore_prompt_cache(file, cache, 0, model_id); }, fragments);
    CHECK(before.same_as(cache));
  };
  refused("another model id", prompt_config(), path, "model-b",
          {"fingerprint model_id", "\"model-b\"", "\"model-a\""});
  refused("another window, same ring capacity",
          ConfigBuilder().max_batch(2).max_len(32).hybrid(5, 3), path, "model-a",
          {"fingerprint sliding_window", "expected 5", "got 4"});
  refused("another head_dim", ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4).head_dim(4),
          path, "model-a", {"fingerprint head_dim", "expected 4", "got 8"});
  refused("other layer types",
          ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4).layer_types(
              {LayerType::kFull, LayerType::kSliding}),
          path, "model-a", {"fingerprint layer_types[0]", "expected full", "got sliding"});
  refused("another dtype", ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4).dtype(at::kDouble),
          path, "model-a", {"state.keys", "Double", "Float"});
  refused("a file that does not exist", prompt_config(), dir.file("none"), "model-a",
          {"existing file"});

  // Damaged: a truncated file, and a file whose positions were tampered with.
  {
    std::ifstream in(path, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
    std::ofstream out(dir.file("cut.safetensors"), std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size() / 2));
  }
  refused("truncated", prompt_config(), dir.file("cut.safetensors"), "model-a",
          {"cut.safetensors"});
  Weights tampered = read_safetensors(path);
  tampered["layer.1.positions"] = tampered["layer.1.positions"].clone();
  tampered["layer.1.positions"][3] = 7;
  tampered.erase("fingerprint.model_id");
  write_safetensors(dir.file("bad.safetensors"), tampered);
  refused("positions that no saved row holds", prompt_config(), dir.file("bad.safetensors"), "",
          {"layer.1.positions", "[3]", "got 7", "damaged"});
  tampered.erase("ids");
  write_safetensors(dir.file("noids.safetensors"), tampered);
  refused("a missing tensor", prompt_config(), dir.file("noids.safetensors"), "",
          {"\"ids\"", "prompt-cache file", "got none"});
}
