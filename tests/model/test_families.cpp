// The model families table (families.hpp): one row per model_type, read by
// load_config and the named shapes alike; an unknown type refused by name;
// activation_name, and apply_family setting a row's layer traits.

#include "checkpoint_files.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/families.hpp>

#include <set>
#include <string>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;
using namespace statickv::test::checkpoint;

TEST_CASE("every family's config.json of its model_type alone reads as the table's row",
          "[families]") {
  TempDir tmp;
  for (const Family& f : families()) {
    INFO(f.model_type);
    const ModelConfig c =
        config_from_text(tmp, std::string(R"({"model_type": ")") + f.model_type + R"("})");
    const FamilyDefaults& d = f.defaults;
    CHECK(c.model_type == f.model_type);
    CHECK(c.vocab_size == d.vocab_size);
    CHECK(c.hidden_size == d.hidden_size);
    CHECK(c.intermediate_size == d.intermediate_size);
    CHECK(c.num_hidden_layers == d.num_hidden_layers);
    CHECK(c.num_attention_heads == d.num_attention_heads);
    CHECK(c.num_key_value_heads ==
          (d.num_key_value_heads > 0 ? d.num_key_value_heads : d.num_attention_heads));
    CHECK(c.head_dim == (d.head_dim > 0 ? d.head_dim : d.hidden_size / d.num_attention_heads));
    CHECK(c.max_position_embeddings == d.max_position_embeddings);
    CHECK(c.eos_token_ids ==
          (d.eos_token_id >= 0 ? std::vector<int64_t>{d.eos_token_id} : std::vector<int64_t>{}));
    CHECK(c.bos_token_id == d.bos_token_id);
    CHECK(c.tie_word_embeddings == d.tie_word_embeddings);
    CHECK(c.hidden_act == f.traits.activation);
    CHECK(c.qk_norm == f.traits.qk_norm);
    CHECK(c.attention_bias == (f.traits.bias == BiasRule::kQkvAlways));
    CHECK(c.sandwich_norms == f.gemma.on);
    CHECK(c.scale_embeddings == f.gemma.on);
    CHECK((c.norm_style == NormStyle::kGemma) == f.gemma.on);
    CHECK(c.final_logit_softcapping == (f.gemma.on ? f.gemma.final_softcap : 0));
    CHECK(c.attn_logit_softcapping == (f.gemma.reads_attn_softcap ? f.gemma.attn_softcap : 0));
    CHECK(c.sliding_rope.has_value() == f.traits.rope_per_layer_type);
    CHECK(c.rms_norm_eps == d.rms_norm_eps);
    // The window each rule gives a config that names none.
    const bool slides =
        (f.layers.rule == LayerRule::kAllSliding || f.layers.rule == LayerRule::kPeriodic) &&
        f.layers.default_window > 0;
    CHECK(c.has_sliding() == slides);
    CHECK(c.sliding_window == (slides ? f.layers.default_window : 0));
  }
}

namespace {

std::string with_switch(const Family& f, const std::string& field, bool on) {
  return tiny_config_with(std::string(R"("model_type": ")") + f.model_type + R"(", ")" + field +
                          R"(": )" + (on ? "true" : "false"));
}

}  // namespace

TEST_CASE("a family refuses its switches when true, by name and reason, and others ignore them",
          "[families]") {
  TempDir tmp;
  std::set<std::string> fields;
  for (const Family& f : families()) {
    for (const Refusal& r : f.refuses) {
      INFO(f.model_type << " " << r.field);
      fields.insert(r.field);
      require_error(
          [&] { config_from_text(tmp, with_switch(f, r.field, true)); },
          {"config.json", std::string("\"") + r.field + "\" false", r.reason, "got true"});
      CHECK_NOTHROW(config_from_text(tmp, with_switch(f, r.field, false)));
    }
  }
  CHECK(fields.size() >= 2);
  for (const Family& f : families()) {
    for (const std::string& field : fields) {
      bool refused = false;
      for (const Refusal& r : f.refuses) refused = refused || field == r.field;
      INFO(f.model_type << " " << field);
      if (!refused) CHECK_NOTHROW(config_from_text(tmp, with_switch(f, field, true)));
    }
  }
}

TEST_CASE("an unknown model_type is refused naming every family in the table", "[families]") {
  std::vector<std::string> parts = {"model_type: expected one of", "but got \"gpt2\""};
  for (const Family& f : families()) parts.push_back(std::string("\"") + f.model_type + "\"");
  require_error([] { family("gpt2"); }, parts);
  TempDir tmp;
  parts.push_back("config.json: ");
  require_error([&] { config_from_text(tmp, tiny_config_with(R"("model_type": "gpt2")")); }, parts);
}

TEST_CASE("every named shape carries its family's traits from the table", "[families]") {
  std::set<std::string> seen;
  for (const std::string& name : named_config_names()) {
    INFO(name);
    const ModelConfig c = named_config(name);
    const Family& f = family(c.model_type);
    seen.insert(f.model_type);
    CHECK(c.hidden_act == f.traits.activation);
    CHECK(c.qk_norm == f.traits.qk_norm);
    CHECK((c.norm_style == NormStyle::kGemma) == f.gemma.on);
    CHECK(c.sandwich_norms == f.gemma.on);
    CHECK(c.scale_embeddings == f.gemma.on);
    CHECK(c.o_proj_bias == false);
    CHECK(c.attention_bias == (f.traits.bias == BiasRule::kQkvAlways));
  }
  CHECK(seen.size() == families().size());  // a tiny shape of every family
}

TEST_CASE("activation_name spells each activation as config.json does", "[families]") {
  CHECK(std::string(activation_name(Activation::kSilu)) == "silu");
  CHECK(std::string(activation_name(Activation::kGeluTanh)) == "gelu_pytorch_tanh");
  // Every family's config.json written with its activation's name reads back that activation.
  TempDir tmp;
  for (const Family& f : families()) {
    INFO(f.model_type);
    const auto text = [&](Activation act) {
      return std::string(R"({"model_type": ")") + f.model_type + R"(", ")" +
             f.traits.activation_field + R"(": ")" + activation_name(act) + R"("})";
    };
    CHECK(config_from_text(tmp, text(f.traits.activation)).hidden_act == f.traits.activation);
    // The other activation's name is refused, naming the one expected.
    const Activation other =
        f.traits.activation == Activation::kSilu ? Activation::kGeluTanh : Activation::kSilu;
    require_error(
        [&] { config_from_text(tmp, text(other)); },
        {f.traits.activation_field, std::string("\"") + activation_name(f.traits.activation) + "\"",
         std::string("got \"") + activation_name(other) + "\""});
  }
}

TEST_CASE("apply_family sets the family's layer traits and leaves the numbers as they are",
          "[families]") {
  for (const Family& f : families()) {
    INFO(f.model_type);
    // Start from the other extreme: every trait switched on, odd numbers.
    ModelConfig c = named_config("tiny");
    c.hidden_act =
        f.traits.activation == Activation::kSilu ? Activation::kGeluTanh : Activation::kSilu;
    c.qk_norm = !f.traits.qk_norm;
    c.norm_style = f.gemma.on ? NormStyle::kLlama : NormStyle::kGemma;
    c.sandwich_norms = c.scale_embeddings = !f.gemma.on;
    c.attention_bias = f.traits.bias != BiasRule::kQkvAlways;
    c.o_proj_bias = true;
    c.vocab_size = 77;
    c.sliding_window = 5;
    c.rms_norm_eps = 1e-3;
    apply_family(f, c);
    CHECK(c.model_type == f.model_type);
    CHECK(c.hidden_act == f.traits.activation);
    CHECK(c.qk_norm == f.traits.qk_norm);
    CHECK((c.norm_style == NormStyle::kGemma) == f.gemma.on);
    CHECK(c.sandwich_norms == f.gemma.on);
    CHECK(c.scale_embeddings == f.gemma.on);
    CHECK(c.attention_bias == (f.traits.bias == BiasRule::kQkvAlways));
    CHECK_FALSE(c.o_proj_bias);
    CHECK(c.vocab_size == 77);
    CHECK(c.sliding_window == 5);
    CHECK(c.rms_norm_eps == 1e-3);
    CHECK(&family(c.model_type) == &f);
  }
}
