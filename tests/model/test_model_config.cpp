// ModelConfig (reference/model/include/statickv/model/model_config.hpp):
// each layer's attention type and rope, whether any layer slides, and
// validate(), which refuses an impossible config naming its first bad field
// (test_named_shapes.cpp walks every field).

#include "support.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/model_config.hpp>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

TEST_CASE("a config without layer_types has only full layers and nothing sliding",
          "[model_config]") {
  const ModelConfig c = named_config("tiny");
  REQUIRE(c.layer_types.empty());
  for (int64_t l = 0; l < c.num_hidden_layers; ++l) CHECK(c.layer_type(l) == LayerType::kFull);
  CHECK_FALSE(c.has_sliding());
}

TEST_CASE("layer_type reads each layer's entry and has_sliding is true with one sliding layer",
          "[model_config]") {
  ModelConfig c = named_config("tiny");
  c.layer_types = {LayerType::kFull, LayerType::kFull};
  CHECK_FALSE(c.has_sliding());
  c.layer_types = {LayerType::kFull, LayerType::kSliding};
  c.sliding_window = 4;
  CHECK(c.layer_type(0) == LayerType::kFull);
  CHECK(c.layer_type(1) == LayerType::kSliding);
  CHECK(c.has_sliding());
  CHECK_NOTHROW(c.validate());
}

TEST_CASE("layer_rope is the one rope without sliding_rope and the sliding rope on sliding layers",
          "[model_config]") {
  ModelConfig c = named_config("tiny");
  c.layer_types = {LayerType::kSliding, LayerType::kFull};
  c.sliding_window = 4;
  c.rope.theta = 500000.0;
  // Unset: every layer reads `rope`, the very object.
  CHECK(&c.layer_rope(0) == &c.rope);
  CHECK(&c.layer_rope(1) == &c.rope);
  c.sliding_rope = RopeConfig{};
  c.sliding_rope->theta = 10000.0;
  CHECK(c.layer_rope(0).theta == 10000.0);
  CHECK(&c.layer_rope(0) == &*c.sliding_rope);
  CHECK(c.layer_rope(1).theta == 500000.0);

  // Gemma 3's tiny shape: five sliding layers on the local rope, the sixth
  // on the global one.
  const ModelConfig g = named_config("tiny-gemma3");
  REQUIRE(g.sliding_rope.has_value());
  for (int64_t l = 0; l < 5; ++l) CHECK(g.layer_rope(l).theta == g.sliding_rope->theta);
  CHECK(g.layer_rope(5).theta == g.rope.theta);
  CHECK(g.rope.theta != g.sliding_rope->theta);
}

TEST_CASE("validate accepts every named shape and names the first impossible field",
          "[model_config]") {
  for (const std::string& name : named_config_names()) {
    INFO(name);
    CHECK_NOTHROW(named_config(name).validate());
  }
  ModelConfig c = named_config("tiny");
  c.head_dim = 15;  // rotate_half needs an even head_dim
  require_error([&] { c.validate(); }, {"ModelConfig.head_dim", "even", "got 15"});
  c = named_config("tiny-gemma3");
  c.sliding_rope->type = "yarn";
  require_error([&] { c.validate(); }, {"ModelConfig.sliding_rope.type", "\"yarn\""});
  c = named_config("tiny");
  c.rope.type = "llama3";
  c.rope.high_freq_factor = c.rope.low_freq_factor;
  require_error([&] { c.validate(); }, {"ModelConfig.rope.high_freq_factor", "low_freq_factor"});
  c = named_config("tiny");
  c.attn_logit_softcapping = -1;
  require_error([&] { c.validate(); }, {"ModelConfig.attn_logit_softcapping", "got -1"});
}
