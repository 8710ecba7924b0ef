#pragma once
// Private to reference/model/src/checkpoint: reading files through the one opener
// (statickv/json/file.hpp), and JSON fields through the one field reader
// (statickv/json/field_reader.hpp) with errors that name the file and the field ("config.json:
// vocab_size: expected an integer but got ..."), for config.json, sharded indexes and safetensors
// headers.

#include <c10/core/ScalarType.h>
#include <c10/util/Exception.h>
#include <nlohmann/json.hpp>
#include <statickv/json/field_reader.hpp>
#include <statickv/json/file.hpp>

#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <string>
#include <vector>

namespace statickv::reference::detail {

using Json = nlohmann::json;

/// json/file.hpp's failures as c10::Errors.
inline void fail_with_c10_error(const std::string& message) { TORCH_CHECK(false, message); }

inline Json parse_json(const std::string& path, const char* begin, const char* end,
                       const char* what) {
  return ::statickv::json::parse_json<Json>(path, begin, end, what, fail_with_c10_error);
}

inline Json parse_json_file(const std::string& path) {
  return ::statickv::json::read_json_file<Json>(path, fail_with_c10_error);
}

inline bool has(const Json& object, const char* key) {
  return ::statickv::json::FieldReader<Json>::given(object, key);
}

/// The one field reader (statickv/json/field_reader.hpp) for the file at
/// `path`: its refusals are c10::Errors prefixed with the path, and an
/// integer may be written as 8192.0, as some tools write config.json.
inline ::statickv::json::FieldReader<Json> reader(const std::string& path) {
  return ::statickv::json::FieldReader<Json>(
      [path](const std::string& field, const std::string& expected, const Json& got) {
        TORCH_CHECK(false, path, ": ", ::statickv::json::refusal(field, expected, got));
      },
      ::statickv::json::ReaderOptions{/*integral_floats=*/true});
}

/// `object[key]`, which must be present and not null. `where` names the
/// field in messages ("rope_parameters.factor").
inline const Json& require(const std::string& path, const Json& object, const char* key,
                           const std::string& where) {
  return reader(path).required(object, key, where);
}

inline int64_t as_int(const std::string& path, const Json& value, const std::string& where) {
  return reader(path).integer(value, where);
}

inline double as_double(const std::string& path, const Json& value, const std::string& where) {
  return reader(path).number(value, where);
}

inline bool as_bool(const std::string& path, const Json& value, const std::string& where) {
  return reader(path).boolean(value, where);
}

inline std::string as_string(const std::string& path, const Json& value, const std::string& where) {
  return reader(path).text(value, where);
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
