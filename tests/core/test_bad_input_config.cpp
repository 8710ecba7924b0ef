// Bad input to CacheConfig: validate(), both cache constructors and the
// memory estimate refuse every impossible config, naming the field, and size
// configs at the int64 limits without overflow.

#include "bad_input.hpp"

#include <cmath>
#include <functional>
#include <limits>
#include <new>

using namespace statickv;
using namespace statickv::test;
using namespace statickv::test::bad_input;

namespace {

// A config change that makes the config impossible, and what its error names.
struct BadConfig {
  std::string what;
  std::function<void(CacheConfig&)> mutate;
  std::vector<std::string> fragments;
};

// Every impossible change, one field (or one combination) at a time.
std::vector<BadConfig> bad_configs() {
  return {
      {"num_layers 0",
       [](CacheConfig& c) {
         c.num_layers = 0;
         c.layer_types.clear();
       },
       {"CacheConfig.num_layers", "> 0", "got 0"}},
      {"num_kv_heads negative",
       [](CacheConfig& c) { c.num_kv_heads = -2; },
       {"CacheConfig.num_kv_heads", "> 0", "got -2"}},
      {"head_dim 0", [](CacheConfig& c) { c.head_dim = 0; }, {"CacheConfig.head_dim", "got 0"}},
      {"max_batch negative",
       [](CacheConfig& c) { c.max_batch = kMin; },
       {"CacheConfig.max_batch", "> 0", "got -9223372036854775808"}},
      {"max_len 0", [](CacheConfig& c) { c.max_len = 0; }, {"CacheConfig.max_len", "got 0"}},
      {"max_len past 2^40",
       [](CacheConfig& c) { c.max_len = (int64_t{1} << 40) + 1; },
       {"CacheConfig.max_len", "<= 2^40", "got 1099511627777"}},
      {"dtype Int",
       [](CacheConfig& c) { c.dtype = at::kInt; },
       {"CacheConfig.dtype", "Float, Half, BFloat16 or Double", "Int"}},
      {"dtype Bool", [](CacheConfig& c) { c.dtype = at::kBool; }, {"CacheConfig.dtype", "Bool"}},
      {"device meta",
       [](CacheConfig& c) { c.device = at::Device(at::kMeta); },
       {"CacheConfig.device", "cpu or cuda", "meta"}},
      {"layer_types too short",
       [](CacheConfig& c) { c.layer_types = {LayerType::kFull}; },
       {"CacheConfig.layer_types", "num_layers (2)", "got 1"}},
      {"layer_types holds an unknown value",
       [](CacheConfig& c) { c.layer_types[1] = static_cast<LayerType>(7); },
       {"CacheConfig.layer_types[1]", "full or sliding", "got 7"}},
      {"sliding_window 0 with a sliding layer",
       [](CacheConfig& c) {
         c.layer_types[0] = LayerType::kSliding;
         c.sliding_window = 0;
       },
       {"CacheConfig.sliding_window", "> 0 when a layer is kSliding", "got 0"}},
      {"sliding_window negative without one",
       [](CacheConfig& c) { c.sliding_window = -1; },
       {"CacheConfig.sliding_window", ">= 0", "got -1"}},
      {"max_chunk negative",
       [](CacheConfig& c) { c.max_chunk = -1; },
       {"CacheConfig.max_chunk", "[0, max_len=16]", "got -1"}},
      {"max_chunk past max_len",
       [](CacheConfig& c) { c.max_chunk = 17; },
       {"CacheConfig.max_chunk", "got 17"}},
      {"newest-wins keys past int64",
       [](CacheConfig& c) { c.max_len = int64_t{1} << 40; },  // default chunk: max_len
       {"CacheConfig.max_chunk", "max_len * max_chunk < 2^63", "max_len=1099511627776",
        "(the default)"}},
      {"buffers past 2^63 bytes",
       [](CacheConfig& c) {
         c.max_batch = int64_t{1} << 40;
         c.num_kv_heads = int64_t{1} << 20;
       },
       {"CacheConfig", "< 2^63 bytes", "max_batch=1099511627776", "num_kv_heads=1048576"}},
      {"head_dim near int64 max",
       [](CacheConfig& c) { c.head_dim = kMax; },
       {"CacheConfig", "< 2^63 bytes", "head_dim=9223372036854775807"}},
      {"num_layers near int64 max",
       [](CacheConfig& c) {
         c.num_layers = kMax / 2;
         c.layer_types.clear();
       },
       {"CacheConfig", "< 2^63 bytes", "4611686018427387903 layers"}},
  };
}

}  // namespace

TEST_CASE("every impossible config is refused by validate, both constructors and the estimate",
          "[errors][config]") {
  const CacheConfig base = config_for({LayerType::kFull, LayerType::kFull});
  const std::vector<BadConfig> cases = bad_configs();
  for (const BadConfig& bad : cases) {
    CacheConfig config = base;
    bad.mutate(config);
    INFO(bad.what);
    require_error([&] { config.validate(); }, bad.fragments);
    require_error([&] { HybridCache cache(config); }, bad.fragments);
    require_error([&] { estimate_memory_bytes(config); }, bad.fragments);
    if (!config.has_type(LayerType::kSliding) &&
        std::all_of(config.layer_types.begin(), config.layer_types.end(),
                    [](LayerType t) { return t == LayerType::kFull; })) {
      require_error([&] { StaticCache cache(config); }, bad.fragments);
    }
  }
  CacheConfig sliding = config_for({LayerType::kFull, LayerType::kSliding});
  require_error([&] { StaticCache cache(sliding); },
                {"StaticCache", "layer_types[1]", "expected full", "sliding"});
}

TEST_CASE("configs at the int64 limits are sized without overflow", "[errors][config]") {
  // A window wider than max_len: the ring holds every position.
  const CacheConfig c = config_for({LayerType::kSliding, LayerType::kFull}).sliding_window(kMax);
  CHECK_NOTHROW(c.validate());
  CHECK(c.sliding_capacity() == c.max_len);
  HybridCache cache(c);
  CHECK(cache.capacity(0) == 16);
  CHECK(cache.memory_bytes() == estimate_memory_bytes(c));

  // Positions up to 2^40, but a 7-slot ring.
  const CacheConfig ring = config_for({LayerType::kSliding}).max_len(int64_t{1} << 40).max_chunk(4);
  CHECK(ring.sliding_capacity() == 7);
  CHECK(estimate_memory_bytes(ring) == 3 * 8 + 2 * 3 * 2 * 8 * 4 * 4 + 3 * 8 * 8 + 3 * 2 * 8);
}
