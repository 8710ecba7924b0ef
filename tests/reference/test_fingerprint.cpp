// fingerprint.hpp (statickv::aoti) without a package: the statickv.* keys
// fingerprint() writes for a cache config, in their checking order;
// check_fingerprint's refusal of metadata for another cache or of no
// statickv package, naming the package, the key and both values; and
// metadata_int's positive integers. A real package's metadata against a
// cache is test_package_decoder.cpp's (it needs the compiled packages).

#include "support.hpp"

#include <statickv/aoti/fingerprint.hpp>

#include <string>
#include <unordered_map>

using namespace statickv;
using statickv::test::ConfigBuilder;
using statickv::test::require_error;

namespace {

using Metadata = std::unordered_map<std::string, std::string>;

/// A package's metadata for `config`, with its own limits besides.
Metadata metadata_for(const CacheConfig& config) {
  Metadata m = {{"statickv.max_query", "16"}, {"statickv.vocab_size", "32000"}};
  for (const auto& [key, value] : aoti::fingerprint(config)) m[key] = value;
  return m;
}

}  // namespace

TEST_CASE("fingerprint lists the config's buffers, layout first, as statickv keys",
          "[fingerprint]") {
  const aoti::Fingerprint plain = aoti::fingerprint(ConfigBuilder());
  const aoti::Fingerprint want = {
      {"statickv.inputs", aoti::kInputs},    {"statickv.num_layers", "2"},
      {"statickv.layer_types", "full,full"}, {"statickv.sliding_window", "0"},
      {"statickv.num_kv_heads", "2"},        {"statickv.head_dim", "8"},
      {"statickv.dtype", "Float"},           {"statickv.device", "cpu"},
      {"statickv.max_batch", "4"},           {"statickv.capacities", "16,16"}};
  CHECK(plain == want);
  // A hybrid: the ring's capacity (window + chunk - 1) for its sliding layer.
  const CacheConfig hybrid = ConfigBuilder().max_len(96).max_batch(2).dtype(at::kHalf).hybrid(8, 6);
  Metadata got;
  for (const auto& [key, value] : aoti::fingerprint(hybrid)) got[key] = value;
  CHECK(got.size() == want.size());
  CHECK(got.at("statickv.layer_types") == "sliding,full");
  CHECK(got.at("statickv.sliding_window") == "8");
  CHECK(got.at("statickv.capacities") == std::to_string(hybrid.sliding_capacity()) + ",96");
  CHECK(hybrid.sliding_capacity() == 13);
  CHECK(got.at("statickv.dtype") == "Half");
  CHECK(got.at("statickv.max_batch") == "2");
}

TEST_CASE("check_fingerprint accepts its own cache's metadata and names the first key that differs",
          "[fingerprint]") {
  const CacheConfig config = ConfigBuilder();
  const Metadata good = metadata_for(config);
  aoti::check_fingerprint(good, config, "m.pt2");
  // The package was built for 8 rows: the message has both values.
  Metadata other = good;
  other["statickv.max_batch"] = "8";
  require_error([&] { aoti::check_fingerprint(other, config, "m.pt2"); },
                {"m.pt2", "built for statickv.max_batch=8", "the cache has statickv.max_batch=4"});
  // The layout is checked before the sizes it implies.
  other["statickv.layer_types"] = "sliding,full";
  require_error([&] { aoti::check_fingerprint(other, config, "m.pt2"); },
                {"statickv.layer_types=sliding,full", "statickv.layer_types=full,full"});
  // Each key counts: a cache of another dtype is refused by the same metadata.
  require_error(
      [&] { aoti::check_fingerprint(good, ConfigBuilder().dtype(at::kBFloat16), "m.pt2"); },
      {"statickv.dtype=Float", "statickv.dtype=BFloat16"});
  Metadata missing = good;
  missing.erase("statickv.capacities");
  require_error([&] { aoti::check_fingerprint(missing, config, "m.pt2"); },
                {"m.pt2", "no statickv.capacities", "not a statickv package"});
  require_error([&] { aoti::check_fingerprint({}, config, "plain.pt2"); },
                {"plain.pt2", "statickv.inputs", "not a statickv package"});
}

TEST_CASE("metadata_int reads a positive integer key and refuses anything else by name",
          "[fingerprint]") {
  const Metadata m = metadata_for(ConfigBuilder());
  CHECK(aoti::metadata_int(m, "statickv.max_query", "m.pt2") == 16);
  CHECK(aoti::metadata_int(m, "statickv.vocab_size", "m.pt2") == 32000);
  require_error([&] { aoti::metadata_int(m, "statickv.max_len", "m.pt2"); },
                {"m.pt2", "no statickv.max_len", "not a statickv package"});
  for (const char* bad : {"0", "-3", "12x", "", "abc", "99999999999999999999"}) {
    Metadata b = m;
    b["statickv.max_query"] = bad;
    require_error(
        [&] { aoti::metadata_int(b, "statickv.max_query", "m.pt2"); },
        {"m.pt2", "statickv.max_query", "positive integer", "'" + std::string(bad) + "'"});
  }
}
