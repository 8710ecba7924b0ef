// Checkpoint directories (load_checkpoint): single file and sharded, dtype
// conversion, tied heads, tensors the model does not read, and the errors for
// each kind of broken checkpoint, naming the file and the tensor; the
// parameter-name table, the disk-name map, generation_config.json's eos ids
// and the list of named shapes.

#include "checkpoint_files.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/prompt_cache.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <map>
#include <set>
#include <string>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;
using namespace statickv::test::checkpoint;

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

namespace {

// tiny-phi3 as transformers' Phi3 writes it: q/k/v and gate/up fused.
constexpr const char* kTinyPhi3Config = R"({
  "model_type": "phi3", "vocab_size": 128, "hidden_size": 64, "intermediate_size": 128,
  "num_hidden_layers": 2, "num_attention_heads": 4, "num_key_value_heads": 2, "head_dim": 16,
  "max_position_embeddings": 256, "rms_norm_eps": 1e-05, "sliding_window": 8,
  "bos_token_id": null, "eos_token_id": null, "tie_word_embeddings": false,
  "rope_parameters": {"partial_rotary_factor": 1.0, "rope_theta": 10000.0, "rope_type": "default"}
})";

// Each layer's q, k, v rows in one qkv_proj and gate, up rows in one
// gate_up_proj, spelled here as Phi-3 checkpoints spell them.
Weights phi3_on_disk(const Weights& weights, int64_t layers) {
  Weights disk = weights;
  for (int64_t l = 0; l < layers; ++l) {
    const std::string p = "model.layers." + std::to_string(l) + ".";
    const auto take = [&](const std::string& name) {
      at::Tensor t = disk.at(p + name);
      disk.erase(p + name);
      return t;
    };
    disk[p + "self_attn.qkv_proj.weight"] =
        at::cat({take("self_attn.q_proj.weight"), take("self_attn.k_proj.weight"),
                 take("self_attn.v_proj.weight")});
    disk[p + "mlp.gate_up_proj.weight"] =
        at::cat({take("mlp.gate_proj.weight"), take("mlp.up_proj.weight")});
  }
  return disk;
}

}  // namespace

TEST_CASE(
    "a phi3 checkpoint's fused qkv_proj and gate_up_proj load as row views of the model's "
    "projections",
    "[checkpoint]") {
  TempDir tmp;
  const ModelConfig config = named_config("tiny-phi3");
  const Weights weights = random_weights(config, /*seed=*/7, at::kFloat, at::kCPU);
  write_text(tmp.file("config.json"), kTinyPhi3Config);
  write_safetensors(tmp.file("model.safetensors"), phi3_on_disk(weights, 2));

  const Checkpoint loaded = load_checkpoint(tmp.dir(), at::kFloat, at::kCPU);
  check_same_config(loaded.config, config);
  check_same_weights(loaded.weights, weights);
  // Row views of the mapped file: k_proj's rows follow q_proj's, no copy.
  const at::Tensor& q = loaded.weights.at("model.layers.1.self_attn.q_proj.weight");
  const at::Tensor& k = loaded.weights.at("model.layers.1.self_attn.k_proj.weight");
  CHECK(k.data_ptr<float>() == q.data_ptr<float>() + q.numel());

  // The model's own names are not Phi-3's: the fused tensor is named missing.
  write_safetensors(tmp.file("model.safetensors"), weights);
  require_error([&] { load_checkpoint(tmp.dir(), at::kFloat, at::kCPU); },
                {"expected tensor \"model.layers.0.self_attn.qkv_proj.weight\""});
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
      {tiny_config_with(R"("model_type": "gemma2", "hidden_activation": "gelu")"),
       {"hidden_activation", "gelu_pytorch_tanh", "\"gelu\""}},
      {tiny_config_with(R"("model_type": "gemma3_text", "use_bidirectional_attention": true)"),
       {"use_bidirectional_attention"}},
      {tiny_config_with(
           R"("model_type": "gemma3_text", "rope_parameters": {"rope_type": "default"})"),
       {"rope_parameters", "full_attention", "sliding_attention"}},
      {tiny_config_with(R"("model_type": "gemma3_text", "rope_parameters": {
          "full_attention": {"rope_type": "yarn", "factor": 8.0}})"),
       {"rope_parameters.full_attention.rope_type", "yarn"}},
      {tiny_config_with(R"("model_type": "phi3", "rope_scaling": {"type": "longrope",
          "short_factor": [1.0], "long_factor": [1.0]})"),
       {"rope_scaling.rope_type", "\"longrope\""}},
      {tiny_config_with(R"("model_type": "phi3", "rope_scaling": {"type": "su"})"),
       {"rope_scaling.rope_type", "\"su\""}},
      {tiny_config_with(R"("model_type": "phi3", "partial_rotary_factor": 0.75)"),
       {"\"partial_rotary_factor\" to be 1", "0.75"}},
      {tiny_config_with(R"("model_type": "llama", "rope_parameters": {"rope_type": "default",
          "partial_rotary_factor": 0.5})"),
       {"rope_parameters.partial_rotary_factor", "0.5"}},
      {tiny_config_with(R"("model_type": "gemma2", "query_pre_attn_scalar": 0)"),
       {"query_pre_attn_scalar"}},
      {tiny_config_with(R"("model_type": "qwen3", "sliding_window": 8,
          "layer_types": ["sliding_attention", "full_attention", "full_attention",
                          "full_attention"])"),
       {"layer_types", "use_sliding_window", "no window"}},
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
// The parameter-name table, the disk-name map, generation_config.json

TEST_CASE("parameter_name spells Hugging Face's decoder-layer names", "[checkpoint]") {
  CHECK(parameter_name(0, LayerParam::kInputNorm) == "model.layers.0.input_layernorm.weight");
  CHECK(parameter_name(3, LayerParam::kQProj) == "model.layers.3.self_attn.q_proj.weight");
  CHECK(parameter_name(1, LayerParam::kVBias) == "model.layers.1.self_attn.v_proj.bias");
  CHECK(parameter_name(1, LayerParam::kOBias) == "model.layers.1.self_attn.o_proj.bias");
  CHECK(parameter_name(12, LayerParam::kPostNorm) ==
        "model.layers.12.post_attention_layernorm.weight");
  CHECK(parameter_name(2, LayerParam::kDownProj) == "model.layers.2.mlp.down_proj.weight");
  CHECK(parameter_name(0, LayerParam::kKNorm) == "model.layers.0.self_attn.k_norm.weight");
  CHECK(parameter_name(0, LayerParam::kPreFfnNorm) ==
        "model.layers.0.pre_feedforward_layernorm.weight");
  CHECK(parameter_name(0, LayerParam::kPostFfnNorm) ==
        "model.layers.0.post_feedforward_layernorm.weight");
}

TEST_CASE("layer_parameters lists one layer's parameters with the shapes its switches add",
          "[checkpoint]") {
  ModelConfig c = named_config("tiny");  // hidden 64, 4 heads, 2 kv heads of 16, 128 columns
  const auto shape_of = [&](LayerParam p) {
    for (const auto& [param, shape] : layer_parameters(c)) {
      if (param == p) return shape;
    }
    return std::vector<int64_t>{};  // absent
  };
  CHECK(layer_parameters(c).size() == 9);
  CHECK(shape_of(LayerParam::kQProj) == std::vector<int64_t>{64, 64});
  CHECK(shape_of(LayerParam::kKProj) == std::vector<int64_t>{32, 64});
  CHECK(shape_of(LayerParam::kOProj) == std::vector<int64_t>{64, 64});
  CHECK(shape_of(LayerParam::kGateProj) == std::vector<int64_t>{128, 64});
  CHECK(shape_of(LayerParam::kDownProj) == std::vector<int64_t>{64, 128});
  CHECK(shape_of(LayerParam::kQBias).empty());
  c.attention_bias = c.o_proj_bias = c.qk_norm = c.sandwich_norms = true;
  CHECK(layer_parameters(c).size() == 9 + 4 + 2 + 2);
  CHECK(shape_of(LayerParam::kVBias) == std::vector<int64_t>{32});
  CHECK(shape_of(LayerParam::kOBias) == std::vector<int64_t>{64});
  CHECK(shape_of(LayerParam::kQNorm) == std::vector<int64_t>{16});
  CHECK(shape_of(LayerParam::kPostFfnNorm) == std::vector<int64_t>{64});
}

TEST_CASE("expected_parameters is the embedding, every layer's parameters, the norm and the head",
          "[checkpoint]") {
  for (bool tied : {false, true}) {
    ModelConfig c = named_config("tiny-qwen3");
    c.tie_word_embeddings = tied;
    const auto all = expected_parameters(c);
    const auto layer = layer_parameters(c);
    REQUIRE(all.size() == 2 + layer.size() * 2 + (tied ? 0 : 1));
    CHECK(all.front().first == kEmbedTokens);
    CHECK(all.front().second == std::vector<int64_t>{128, 64});
    for (int64_t l = 0; l < 2; ++l) {
      for (size_t i = 0; i < layer.size(); ++i) {
        const auto& [name, shape] = all[1 + static_cast<size_t>(l) * layer.size() + i];
        CHECK(name == parameter_name(l, layer[i].first));
        CHECK(shape == layer[i].second);
      }
    }
    CHECK(all[1 + 2 * layer.size()].first == kFinalNorm);
    CHECK((all.back().first == kLmHead) == !tied);
  }
}

TEST_CASE("disk_tensors is expected_parameters, or q/k/v and gate/up fused for phi3",
          "[checkpoint]") {
  const ModelConfig llama = named_config("tiny");
  const auto separate = disk_tensors(llama);
  const auto expected = expected_parameters(llama);
  REQUIRE(separate.size() == expected.size());
  for (size_t i = 0; i < separate.size(); ++i) {
    CHECK(separate[i].name == expected[i].first);
    CHECK(separate[i].shape == expected[i].second);
    CHECK(separate[i].parts.empty());
  }
  const ModelConfig phi3 = named_config("tiny-phi3");
  const auto fused = disk_tensors(phi3);
  CHECK(fused.size() == expected_parameters(phi3).size() - 3 * 2);  // 5 tensors -> 2, per layer
  std::map<std::string, DiskTensor> by_name;
  for (const DiskTensor& t : fused) by_name[t.name] = t;
  CHECK(by_name.count(parameter_name(0, LayerParam::kQProj)) == 0);
  const DiskTensor& qkv = by_name.at("model.layers.1.self_attn.qkv_proj.weight");
  CHECK(qkv.shape == std::vector<int64_t>{64 + 32 + 32, 64});
  REQUIRE(qkv.parts.size() == 3);
  CHECK(qkv.parts[0] == std::make_pair(parameter_name(1, LayerParam::kQProj), int64_t{64}));
  CHECK(qkv.parts[2] == std::make_pair(parameter_name(1, LayerParam::kVProj), int64_t{32}));
  const DiskTensor& gate_up = by_name.at("model.layers.0.mlp.gate_up_proj.weight");
  CHECK(gate_up.shape == std::vector<int64_t>{256, 64});
  REQUIRE(gate_up.parts.size() == 2);
  CHECK(gate_up.parts[1] == std::make_pair(parameter_name(0, LayerParam::kUpProj), int64_t{128}));
  CHECK(by_name.at(kEmbedTokens).parts.empty());
}

TEST_CASE("load_generation_eos reads an id, a list or null, else keeps the fallback",
          "[checkpoint]") {
  TempDir tmp;
  const std::string path = tmp.file("generation_config.json");
  const auto eos = [&](const std::string& text) {
    write_text(path, text);
    return load_generation_eos(path, {7});
  };
  CHECK(eos(R"({"eos_token_id": 2})") == std::vector<int64_t>{2});
  CHECK(eos(R"({"eos_token_id": [128001, 128009]})") == std::vector<int64_t>{128001, 128009});
  CHECK(eos(R"({"eos_token_id": null})").empty());
  CHECK(eos(R"({"bos_token_id": 1, "do_sample": true})") == std::vector<int64_t>{7});
  require_error([&] { eos(R"({"eos_token_id": "two"})"); },
                {"generation_config.json", "eos_token_id"});
  require_error([&] { load_generation_eos(tmp.file("absent.json"), {}); }, {"absent.json"});
}

TEST_CASE("named_config_names lists each named shape once, every one valid", "[checkpoint]") {
  const std::vector<std::string> names = named_config_names();
  CHECK(std::set<std::string>(names.begin(), names.end()).size() == names.size());
  for (const char* name :
       {"tiny", "tiny-mistral", "tiny-qwen2", "tiny-qwen3", "tiny-gemma2", "tiny-gemma3",
        "tiny-phi3", "smollm2-135m", "gemma3-270m", "llama-3.2-1b", "llama-3.1-8b"}) {
    CHECK(std::find(names.begin(), names.end(), name) != names.end());
  }
  for (const std::string& name : names) {
    INFO(name);
    CHECK_NOTHROW(named_config(name).validate());
  }
}
