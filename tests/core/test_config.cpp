// CacheConfig validation, layer patterns and the ring's capacity rule,
// tested without tensors (the layer policies' slot arithmetic: test_layers.cpp).

#include "support.hpp"

using namespace statickv;
using namespace statickv::test;

namespace {
// A sound config: 4 full layers, 2 kv heads of 8, 2 rows of 64 positions.
CacheConfig valid() { return ConfigBuilder().num_layers(4).max_batch(2).max_len(64); }
}  // namespace

TEST_CASE("validate accepts a sound config and names the field of each impossible one",
          "[config]") {
  CHECK_NOTHROW(valid().validate());
  struct Bad {
    const char* field;
    void (*mutate)(CacheConfig&);
  };
  const std::vector<Bad> cases = {
      {"num_layers", [](CacheConfig& c) { c.num_layers = 0; }},
      {"num_kv_heads", [](CacheConfig& c) { c.num_kv_heads = -1; }},
      {"head_dim", [](CacheConfig& c) { c.head_dim = 0; }},
      {"max_batch", [](CacheConfig& c) { c.max_batch = 0; }},
      {"max_len", [](CacheConfig& c) { c.max_len = -3; }},
      {"dtype", [](CacheConfig& c) { c.dtype = at::kInt; }},
      {"layer_types", [](CacheConfig& c) { c.layer_types = {LayerType::kFull}; }},
      {"sliding_window", [](CacheConfig& c) { c.layer_types = all_sliding(4); }},
      {"sliding_window", [](CacheConfig& c) { c.sliding_window = -1; }},
      {"max_chunk", [](CacheConfig& c) { c.max_chunk = 65; }},
      {"max_chunk", [](CacheConfig& c) { c.max_chunk = -1; }},
  };
  for (const Bad& bad : cases) {
    CacheConfig c = valid();
    bad.mutate(c);
    INFO(bad.field);
    require_error([&] { c.validate(); }, {std::string("CacheConfig.") + bad.field, "expected"});
  }
}

TEST_CASE("layer patterns match the models they are named after", "[config]") {
  using T = LayerType;
  CHECK(alternating(4) == std::vector<T>{T::kSliding, T::kFull, T::kSliding, T::kFull});
  const auto gemma3 = sliding_then_full(12, 5);
  CHECK(std::count(gemma3.begin(), gemma3.end(), T::kFull) == 2);
  CHECK(gemma3[5] == T::kFull);
  CHECK(gemma3[11] == T::kFull);
  CHECK(gemma3[6] == T::kSliding);
  CHECK(all_sliding(3) == std::vector<T>(3, T::kSliding));
}

TEST_CASE("chunk limit and ring capacity follow the documented rule", "[config]") {
  CacheConfig c = valid();
  CHECK(c.effective_max_chunk() == 64);  // full layers only: any chunk up to max_len
  c.layer_types = alternating(4);
  c.sliding_window = 8;
  CHECK(c.effective_max_chunk() == 8);       // default: one window per step
  CHECK(c.sliding_capacity() == 8 + 8 - 1);  // window + chunk - 1
  c.max_chunk = 1;
  CHECK(c.sliding_capacity() == 8);  // decode only: exactly the window
  c.max_chunk = 60;
  CHECK(c.sliding_capacity() == 64);  // never more than max_len
}
