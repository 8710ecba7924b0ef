#pragma once
// Test support for the Hugging Face cross-check checkpoints (tests/reference/hf,
// make_reference.py): where they are, and what transformers generated.

#include "../support.hpp"

#include <statickv/model/checkpoint.hpp>

#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

namespace statickv::test {

inline constexpr int64_t kHfMaxNewTokens = 8;  // as in make_reference.py
inline constexpr int64_t kHfNumPrompts = 3;

/// What transformers generated for each prompt of one model.
struct HfExpected {
  std::vector<std::vector<int64_t>> prompts;    // each [len]
  std::vector<std::vector<int64_t>> generated;  // each [kHfMaxNewTokens]
  std::vector<at::Tensor> logits;               // each [kHfMaxNewTokens, vocab] float32
};

inline std::vector<int64_t> to_ids(const at::Tensor& t) {
  const at::Tensor ids = t.to(at::kLong).contiguous();
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
}

/// The directory an environment variable names, which a ctest fixture wrote.
inline std::filesystem::path env_dir(const char* variable, const char* how) {
  const char* root = std::getenv(variable);
  if (root == nullptr || *root == '\0') FAIL(variable << " is not set: " << how);
  return root;
}

/// The directory of one model written by make_reference.py.
inline std::string hf_model_dir(const std::string& name) {
  const std::filesystem::path root = env_dir(
      "STATICKV_HF_DIR",
      "run tests/reference/hf/make_reference.py OUT_DIR and point STATICKV_HF_DIR at OUT_DIR "
      "(ctest's hf_crosscheck does both)");
  const std::filesystem::path dir = root / name;
  if (!std::filesystem::is_regular_file(dir / "expected.safetensors") ||
      !std::filesystem::is_regular_file(dir / "config.json")) {
    FAIL(dir.string() << " lacks config.json or expected.safetensors: run "
                         "tests/reference/hf/make_reference.py "
                      << root.string());
  }
  return dir.string();
}

inline HfExpected read_hf_expected(const std::string& dir) {
  const reference::Weights tensors = reference::read_safetensors(dir + "/expected.safetensors");
  HfExpected expected;
  for (int64_t i = 0; i < kHfNumPrompts; ++i) {
    const std::string n = std::to_string(i);
    INFO(dir << "/expected.safetensors");
    REQUIRE(tensors.count("prompt_" + n) == 1);
    REQUIRE(tensors.count("generated_" + n) == 1);
    REQUIRE(tensors.count("logits_" + n) == 1);
    expected.prompts.push_back(to_ids(tensors.at("prompt_" + n)));
    expected.generated.push_back(to_ids(tensors.at("generated_" + n)));
    expected.logits.push_back(tensors.at("logits_" + n).to(at::kFloat).contiguous());
    REQUIRE(expected.generated.back().size() == static_cast<size_t>(kHfMaxNewTokens));
  }
  return expected;
}

}  // namespace statickv::test
