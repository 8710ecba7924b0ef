// The model families table (families.hpp): the one place a model_type
// string is compared. Each row is what transformers 5.24's config and model
// classes of that type do; tests/reference/hf cross-checks every row.

#include "json_fields.hpp"

#include <statickv/model/families.hpp>

#include <c10/util/Exception.h>

#include <string>
#include <vector>

namespace statickv::reference {

namespace {

constexpr Refusal kMlpBias{"mlp_bias", "MLP biases are not supported"};
constexpr Refusal kBidirectional{"use_bidirectional_attention", "a decoder attends causally"};

constexpr FamilyTraits kLlamaLayer{"hidden_act", Activation::kSilu, BiasRule::kAttentionBias,
                                   /*qk_norm=*/false, /*rope_per_layer_type=*/false};
constexpr GemmaMath kNoGemmaMath{false, 0, false, 0};

std::vector<Family> make_table() {
  using L = LayerRule;
  return {
      {"llama",
       "LlamaConfig",
       {32000, 4096, 11008, 32, 32, 0, 0, 2048, 1e-6, 2, 1, false},
       {L::kAllFull, 0, 0, 0, nullptr},
       kLlamaLayer,
       kNoGemmaMath,
       DiskLayout::kSeparate,
       {kMlpBias}},
      {"mistral",
       "MistralConfig",
       {32000, 4096, 14336, 32, 32, 8, 0, 4096 * 32, 1e-6, 2, 1, false},
       {L::kAllSliding, 4096, 0, 0, nullptr},
       {"hidden_act", Activation::kSilu, BiasRule::kNone, false, false},
       kNoGemmaMath,
       DiskLayout::kSeparate,
       {}},
      {"qwen2",
       "Qwen2Config",
       {151936, 4096, 22016, 32, 32, 32, 0, 32768, 1e-6, -1, -1, false},
       {L::kFromLayer, 4096, 28, 0, nullptr},
       {"hidden_act", Activation::kSilu, BiasRule::kQkvAlways, false, false},
       kNoGemmaMath,
       DiskLayout::kSeparate,
       {}},
      {"qwen3",
       "Qwen3Config",
       {151936, 4096, 22016, 32, 32, 32, 128, 32768, 1e-6, -1, -1, false},
       {L::kFromLayer, 4096, 28, 0, nullptr},
       {"hidden_act", Activation::kSilu, BiasRule::kAttentionBias, /*qk_norm=*/true, false},
       kNoGemmaMath,
       DiskLayout::kSeparate,
       {}},
      {"gemma2",
       "Gemma2Config",
       {256000, 2304, 9216, 26, 8, 4, 256, 8192, 1e-6, 1, 2, true},
       {L::kPeriodic, 4096, 0, 2, nullptr},
       {"hidden_activation", Activation::kGeluTanh, BiasRule::kAttentionBias, false, false},
       {true, /*final_softcap=*/30, /*reads_attn_softcap=*/true, /*attn_softcap=*/50},
       DiskLayout::kSeparate,
       {kBidirectional}},
      {"gemma3_text",
       "Gemma3TextConfig",
       {262208, 2304, 9216, 26, 8, 4, 256, 131072, 1e-6, 1, 2, true},
       {L::kPeriodic, 4096, 0, 6, "sliding_window_pattern"},
       {"hidden_activation", Activation::kGeluTanh, BiasRule::kAttentionBias,
        /*qk_norm=*/true, /*rope_per_layer_type=*/true},
       {true, /*final_softcap=*/0, /*reads_attn_softcap=*/false, 0},
       DiskLayout::kSeparate,
       {kBidirectional}},
      // Phi-3: Llama's layer with q/k/v and gate/up fused on disk; a
      // sliding_window (absent: none) slides every layer.
      {"phi3",
       "Phi3Config",
       {32064, 3072, 8192, 32, 32, 0, 0, 4096, 1e-5, 32000, 1, false},
       {L::kAllSliding, /*default_window=*/0, 0, 0, nullptr},
       {"hidden_act", Activation::kSilu, BiasRule::kNone, false, false},
       kNoGemmaMath,
       DiskLayout::kFusedQkvGateUp,
       {}},
  };
}

}  // namespace

const std::vector<Family>& families() {
  static const std::vector<Family> table = make_table();
  return table;
}

const Family& family(const std::string& model_type) {
  const Family* found = nullptr;
  std::vector<std::string> known;
  for (const Family& f : families()) {
    if (model_type == f.model_type) found = &f;
    known.push_back(std::string("\"") + f.model_type + "\"");
  }
  TORCH_CHECK(found, "model_type: expected one of ", detail::join(known), " but got \"", model_type,
              "\"");
  return *found;
}

const char* activation_name(Activation activation) {
  return activation == Activation::kGeluTanh ? "gelu_pytorch_tanh" : "silu";
}

void apply_family(const Family& family, ModelConfig& config) {
  config.model_type = family.model_type;
  config.hidden_act = family.traits.activation;
  config.qk_norm = family.traits.qk_norm;
  config.attention_bias = family.traits.bias == BiasRule::kQkvAlways;
  config.o_proj_bias = false;
  const bool gemma = family.gemma.on;
  config.norm_style = gemma ? NormStyle::kGemma : NormStyle::kLlama;
  config.sandwich_norms = gemma;
  config.scale_embeddings = gemma;
}

}  // namespace statickv::reference
