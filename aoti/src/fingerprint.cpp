#include <statickv/aoti/fingerprint.hpp>

#include <c10/util/Exception.h>

#include <sstream>

namespace statickv::aoti {

namespace {

std::string join(const std::vector<std::string>& parts) {
  std::ostringstream out;
  for (size_t i = 0; i < parts.size(); ++i) out << (i ? "," : "") << parts[i];
  return out.str();
}

std::string layer_types(const CacheConfig& config) {
  std::vector<std::string> types;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    types.push_back(config.layer_type(l) == LayerType::kSliding ? "sliding" : "full");
  }
  return join(types);
}

std::string capacities(const CacheConfig& config) {
  std::vector<std::string> caps;
  for (int64_t l = 0; l < config.num_layers; ++l) {
    const bool sliding = config.layer_type(l) == LayerType::kSliding;
    caps.push_back(std::to_string(sliding ? config.sliding_capacity() : config.max_len));
  }
  return join(caps);
}

}  // namespace

Fingerprint fingerprint(const CacheConfig& config) {
  config.validate();
  const bool sliding = config.has_type(LayerType::kSliding);
  return {
      {"statickv.inputs", kInputs},
      {"statickv.num_layers", std::to_string(config.num_layers)},
      {"statickv.layer_types", layer_types(config)},
      {"statickv.sliding_window", std::to_string(sliding ? config.sliding_window : 0)},
      {"statickv.num_kv_heads", std::to_string(config.num_kv_heads)},
      {"statickv.head_dim", std::to_string(config.head_dim)},
      {"statickv.dtype", c10::toString(config.dtype)},
      {"statickv.device", config.device.is_cuda() ? "cuda" : "cpu"},
      {"statickv.max_batch", std::to_string(config.max_batch)},
      {"statickv.capacities", capacities(config)},
  };
}

void check_fingerprint(const std::unordered_map<std::string, std::string>& metadata,
                       const CacheConfig& config, const std::string& package) {
  for (const auto& [key, want] : fingerprint(config)) {
    const auto found = metadata.find(key);
    TORCH_CHECK(found != metadata.end(), "AOTInductor package ", package, ": metadata has no ", key,
                ": not a statickv package (build it with examples/aoti/export.py)");
    TORCH_CHECK(found->second == want, "AOTInductor package ", package, ": built for ", key, "=",
                found->second, " but the cache has ", key, "=", want,
                " (rebuild the package for this cache: examples/aoti/export.py)");
  }
}

int64_t metadata_int(const std::unordered_map<std::string, std::string>& metadata,
                     const std::string& key, const std::string& package) {
  const auto found = metadata.find(key);
  TORCH_CHECK(found != metadata.end(), "AOTInductor package ", package, ": metadata has no ", key,
              ": not a statickv package (build it with examples/aoti/export.py)");
  size_t used = 0;
  int64_t value = -1;
  try {
    value = std::stoll(found->second, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  TORCH_CHECK(used == found->second.size() && value >= 1, "AOTInductor package ", package, ": ",
              key, ": expected a positive integer but got '", found->second, "'");
  return value;
}

}  // namespace statickv::aoti
