// Fuzz target: CacheConfig validation with extreme field values. Every
// config is either refused with an error naming CacheConfig, or valid with
// consistent derived sizes and an exact memory estimate; no signed overflow
// (UBSan) and no runaway loop (libFuzzer -timeout). A small valid config is
// allocated to check the estimate against the real cache.
//
// Each field is a byte (odd: an extreme int64, else a small value) then the
// value; then a byte (odd: list layer types) and one per layer (2 is not a
// layer type). Seeds (corpus/config, named for what they hold): a sound
// hybrid config, sizes whose bytes overflow int64, a window wider than
// max_len, a ring with max_len 2^40 and a config just past it, an invalid
// layer type, INT64_MIN in every field.

#include "fuzz_support.hpp"

#include <statickv/statickv.hpp>

namespace {

using namespace statickv;
using namespace statickv::fuzz;

int64_t configs = 0;

void fuzz_config_fields(Input& in) {
  ++configs;
  CacheConfig c;
  c.num_layers = in.flip() ? in.extreme() : in.range(1, 4);
  c.num_kv_heads = in.flip() ? in.extreme() : in.range(1, 4);
  c.head_dim = in.flip() ? in.extreme() : in.range(1, 8);
  c.max_batch = in.flip() ? in.extreme() : in.range(1, 8);
  c.max_len = in.flip() ? in.extreme() : in.range(1, 64);
  c.sliding_window = in.flip() ? in.extreme() : in.range(0, 16);
  c.max_chunk = in.flip() ? in.extreme() : in.range(0, 16);
  if (in.flip() && c.num_layers >= 1 && c.num_layers <= 8) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
      c.layer_types.push_back(static_cast<LayerType>(in.range(0, 2)));  // 2: not a layer type
    }
  }
  try {
    c.validate();
  } catch (const c10::Error& e) {
    FUZZ_CHECK(mentions(e, "CacheConfig"), e.what_without_backtrace());
    return;
  }
  // Valid: every derived size is consistent and the estimate is exact.
  FUZZ_CHECK(c.effective_max_chunk() >= 1 && c.effective_max_chunk() <= c.max_len,
             "effective_max_chunk");
  const int64_t bytes = estimate_memory_bytes(c);
  FUZZ_CHECK(bytes > 0, "estimate_memory_bytes");
  if (c.has_type(LayerType::kSliding)) {
    FUZZ_CHECK(c.sliding_capacity() >= 1 && c.sliding_capacity() <= c.max_len, "ring capacity");
  }
  if (bytes <= (1 << 16)) {
    HybridCache cache(c);
    FUZZ_CHECK(cache.memory_bytes() == bytes, "memory_bytes != estimate");
  }
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return run_input(data, size, fuzz_config_fields);
}

std::string statickv_fuzz_summary() { return "configs " + std::to_string(configs); }
