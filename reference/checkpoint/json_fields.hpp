#pragma once
// Private to reference/checkpoint: reading files and JSON fields with
// errors that name the file and the field ("config.json: expected field
// \"vocab_size\" to be an integer but got ..."). One home for the rules
// config.json, sharded indexes and safetensors headers share.

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>

#include <cerrno>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <sstream>
#include <string>
#include <vector>

namespace statickv::reference::detail {

using Json = nlohmann::json;

inline std::string read_text_file(const std::string& path) {
  TORCH_CHECK(std::filesystem::is_regular_file(path), path,
              ": expected an existing file but got none");
  std::ifstream in(path, std::ios::binary);
  TORCH_CHECK(in, path, ": expected a readable file but got: ", std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  TORCH_CHECK(!in.bad(), path, ": expected a readable file but got a read error");
  return text.str();
}

inline Json parse_json(const std::string& path, const char* begin, const char* end,
                       const char* what) {
  try {
    return Json::parse(begin, end);
  } catch (const Json::exception& e) {
    TORCH_CHECK(false, path, ": expected ", what, " but got invalid JSON: ", e.what());
  }
  return Json();  // unreachable
}

inline Json parse_json_file(const std::string& path) {
  const std::string text = read_text_file(path);
  Json json = parse_json(path, text.data(), text.data() + text.size(), "a JSON object");
  TORCH_CHECK(json.is_object(), path, ": expected a JSON object but got ", json.type_name());
  return json;
}

inline bool has(const Json& object, const char* key) {
  auto it = object.find(key);
  return it != object.end() && !it->is_null();
}

/// `object[key]`, which must be present and not null. `where` names the
/// field in messages ("rope_parameters.factor").
inline const Json& require(const std::string& path, const Json& object, const char* key,
                           const std::string& where) {
  auto it = object.find(key);
  TORCH_CHECK(it != object.end() && !it->is_null(), path, ": expected field \"", where,
              "\" but got none");
  return *it;
}

inline int64_t as_int(const std::string& path, const Json& value, const std::string& where) {
  if (value.is_number_integer()) {
    if (value.is_number_unsigned()) {
      const uint64_t u = value.get<uint64_t>();
      TORCH_CHECK(u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max()), path,
                  ": expected field \"", where, "\" to fit in int64 but got ", u);
      return static_cast<int64_t>(u);
    }
    return value.get<int64_t>();
  }
  // Some tools write integral fields as 8192.0.
  if (value.is_number_float()) {
    const double d = value.get<double>();
    if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e15) {
      return static_cast<int64_t>(d);
    }
  }
  TORCH_CHECK(false, path, ": expected field \"", where, "\" to be an integer but got ",
              value.dump());
  return 0;  // unreachable
}

inline double as_double(const std::string& path, const Json& value, const std::string& where) {
  TORCH_CHECK(value.is_number(), path, ": expected field \"", where, "\" to be a number but got ",
              value.dump());
  return value.get<double>();
}

inline bool as_bool(const std::string& path, const Json& value, const std::string& where) {
  TORCH_CHECK(value.is_boolean(), path, ": expected field \"", where,
              "\" to be true or false but got ", value.dump());
  return value.get<bool>();
}

inline std::string as_string(const std::string& path, const Json& value, const std::string& where) {
  TORCH_CHECK(value.is_string(), path, ": expected field \"", where, "\" to be a string but got ",
              value.dump());
  return value.get<std::string>();
}

inline int64_t required_int(const std::string& path, const Json& object, const char* key,
                            const std::string& where) {
  return as_int(path, require(path, object, key, where), where);
}

inline double required_double(const std::string& path, const Json& object, const char* key,
                              const std::string& where) {
  return as_double(path, require(path, object, key, where), where);
}

/// "a, b, c".
inline std::string join(const std::vector<std::string>& items) {
  std::string out;
  for (const std::string& item : items) {
    if (!out.empty()) out += ", ";
    out += item;
  }
  return out;
}

/// safetensors' name of a dtype ("BF16"), or nullptr (safetensors.cpp).
const char* safetensors_dtype_name(at::ScalarType type);

}  // namespace statickv::reference::detail
