// CacheConfig validation, layer patterns and the ring's capacity rule,
// the names of layer and stored types, the stored dtype, the staging
// buffers' and the whole cache's byte counts (by hand, and their overflow),
// tested without tensors (the layer policies' slot arithmetic: test_layers.cpp).

#include "support.hpp"

#include <sstream>

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

TEST_CASE("to_string names each layer type and stored type as operator<< prints them", "[config]") {
  CHECK(std::string(to_string(LayerType::kFull)) == "full");
  CHECK(std::string(to_string(LayerType::kSliding)) == "sliding");
  CHECK(std::string(to_string(static_cast<LayerType>(7))) == "unknown");
  CHECK(std::string(to_string(KvStorage::kCompute)) == "compute");
  CHECK(std::string(to_string(KvStorage::kInt8)) == "int8");
  CHECK(std::string(to_string(KvStorage::kFp8E4m3)) == "fp8");
  CHECK(std::string(to_string(static_cast<KvStorage>(9))) == "unknown");
  std::ostringstream os;
  os << LayerType::kSliding << "/" << KvStorage::kInt8;
  CHECK(os.str() == "sliding/int8");
}

TEST_CASE("layer_type and has_type read layer_types, empty meaning every layer full", "[config]") {
  CacheConfig c = valid();  // 4 layers, layer_types empty
  CHECK(c.layer_type(0) == LayerType::kFull);
  CHECK(c.layer_type(3) == LayerType::kFull);
  CHECK(c.has_type(LayerType::kFull));
  CHECK_FALSE(c.has_type(LayerType::kSliding));
  require_error([&] { c.layer_type(4); }, {"layer", "[0, 4)", "got 4"});
  require_error([&] { c.layer_type(-1); }, {"layer", "got -1"});
  c.layer_types = alternating(4);
  c.sliding_window = 8;
  CHECK(c.layer_type(0) == LayerType::kSliding);
  CHECK(c.layer_type(1) == LayerType::kFull);
  CHECK(c.has_type(LayerType::kFull));
  CHECK(c.has_type(LayerType::kSliding));
  c.layer_types = all_sliding(4);
  CHECK_FALSE(c.has_type(LayerType::kFull));
  CacheConfig empty;  // no layers: no type at all
  CHECK_FALSE(empty.has_type(LayerType::kFull));
  CHECK_FALSE(empty.has_type(LayerType::kSliding));
}

TEST_CASE("plain_storage and storage_dtype follow kv_storage", "[config]") {
  CacheConfig c = valid();
  c.dtype = at::kHalf;
  CHECK(c.plain_storage());
  CHECK(c.storage_dtype() == at::kHalf);  // plain: the compute dtype
  c.kv_storage = KvStorage::kInt8;
  CHECK_FALSE(c.plain_storage());
  CHECK(c.storage_dtype() == at::kChar);
  c.kv_storage = KvStorage::kFp8E4m3;
  CHECK_FALSE(c.plain_storage());
  CHECK(c.storage_dtype() == at::kFloat8_e4m3fn);
}

TEST_CASE("validate_storage refuses a stored type the compute dtype or offload cannot take",
          "[config]") {
  CacheConfig c = valid();
  CHECK_NOTHROW(c.validate_storage());
  c.kv_storage = KvStorage::kInt8;
  CHECK_NOTHROW(c.validate_storage());
  c.host_offload = true;
  require_error([&] { c.validate_storage(); },
                {"CacheConfig.host_offload", "kv_storage=int8", "got true"});
  require_error([&] { c.validate(); }, {"CacheConfig.host_offload"});  // validate() calls it
  c.host_offload = false;
  c.dtype = at::kDouble;
  require_error([&] { c.validate_storage(); }, {"CacheConfig.kv_storage", "Double", "int8"});
  c.kv_storage = KvStorage::kCompute;
  CHECK_NOTHROW(c.validate_storage());  // plain storage takes Double
  c.kv_storage = static_cast<KvStorage>(9);
  require_error([&] { c.validate_storage(); },
                {"CacheConfig.kv_storage", "compute, int8 or fp8", "got 9"});
}

TEST_CASE("max_view_slots is the largest capacity and max_buffer_slots one more", "[config]") {
  CacheConfig c = valid();  // full layers of max_len 64
  CHECK(c.max_view_slots() == 64);
  CHECK(c.max_buffer_slots() == 65);
  c.layer_types = alternating(4);
  c.sliding_window = 8;  // rings of 8 + 8 - 1 = 15 slots, smaller than a full layer
  CHECK(c.max_view_slots() == 64);
  c.layer_types = all_sliding(4);
  CHECK(c.max_view_slots() == 15);
  CHECK(c.max_buffer_slots() == 16);
}

TEST_CASE("staging_count and staging_bytes size the staging buffers of each storage mode",
          "[config]") {
  CacheConfig c = valid();  // 2 rows, 2 kv heads of 8, max_len 64, float
  bool overflow = false;
  CHECK(c.staging_count() == 0);
  CHECK(c.staging_bytes(&overflow) == 0);
  c.kv_storage = KvStorage::kInt8;  // one buffer of max_view_slots (64), keys and values
  CHECK(c.staging_count() == 1);
  CHECK(c.staging_bytes(&overflow) == 2 * 1 * 2 * 2 * 64 * 8 * 4);
  c.kv_storage = KvStorage::kCompute;
  c.host_offload = true;  // a ring of two of max_buffer_slots (65)
  CHECK(c.staging_count() == 2);
  CHECK(c.staging_bytes(&overflow) == 2 * 2 * 2 * 2 * 65 * 8 * 4);
  CHECK_FALSE(overflow);
  c.max_batch = int64_t{1} << 40;
  c.num_kv_heads = int64_t{1} << 20;
  CHECK(c.staging_bytes(&overflow) == 0);
  CHECK(overflow);
}

TEST_CASE("owned counts a cache's bytes by where they live and owned_bytes adds them up",
          "[config]") {
  // 4 full layers: keys and values [2, 2, 64 + 1, 8]; one group's
  // slot_positions [2, 65] and row offsets [2, 2] (int64); seq_lengths [2].
  const int64_t kv = 4 * 2 * (2 * 2 * 65 * 8) * 4;
  const int64_t book = 2 * 65 * 8 + 2 * 2 * 8 + 2 * 8;
  CacheConfig c = valid();
  bool overflow = true;
  CacheConfig::Bytes bytes = c.owned(&overflow);
  CHECK_FALSE(overflow);
  CHECK(bytes.device == kv + book);
  CHECK(bytes.host == 0);
  CHECK(c.owned_bytes(&overflow) == kv + book);
  c.host_offload = true;  // keys and values to the host, a staging ring on the device
  bytes = c.owned(&overflow);
  CHECK(bytes.host == kv);
  CHECK(bytes.device == book + c.staging_bytes(&overflow));
  CHECK(c.owned_bytes(&overflow) == bytes.device + bytes.host);
  c.host_offload = false;
  c.kv_storage = KvStorage::kInt8;  // 1 byte an element plus a float32 scale a slot
  const int64_t int8_kv = 4 * 2 * (2 * 2 * 65) * (8 + 4);
  CHECK(c.owned(&overflow).device == int8_kv + book + c.staging_bytes(&overflow));
  c.max_len = int64_t{1} << 40;
  c.max_batch = int64_t{1} << 30;
  bytes = c.owned(&overflow);
  CHECK(overflow);
  CHECK(bytes.device == 0);
  CHECK(bytes.host == 0);
  CHECK(c.owned_bytes(&overflow) == 0);
}
