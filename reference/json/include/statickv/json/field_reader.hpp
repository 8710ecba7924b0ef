#pragma once
// The one reader of JSON fields: typed reads whose refusals all take one
// form, "<field>: expected <expected> but got <actual>", for nlohmann::json
// and nlohmann::ordered_json alike (any nlohmann::basic_json). Each caller
// turns a refusal into its own error through the Refuse callback: an HTTP
// 400 (apps/serve/http/request.cpp), a JSON-lines error reply naming the request
// (apps/serve/lines/protocol.cpp), a c10::Error or std::runtime_error naming the
// file (checkpoints, the tokenizer's files, generation_config.json).
// Header-only; the CMake target statickv_json_fields carries its include
// directory and nlohmann_json.

#include <cmath>
#include <cstdint>
#include <functional>
#include <limits>
#include <stdexcept>
#include <string>
#include <utility>

namespace statickv::json {

/// How a refused value is shown: compact JSON, invalid UTF-8 replaced.
template <class Json>
std::string shown(const Json& value) {
  return value.dump(-1, ' ', false, Json::error_handler_t::replace);
}

/// The one form of a refusal's message.
template <class Json>
std::string refusal(const std::string& field, const std::string& expected, const Json& got) {
  return field + ": expected " + expected + " but got " + shown(got);
}

/// What a reader accepts beyond JSON's own types.
struct ReaderOptions {
  /// An integer written as a float with no fraction (8192.0), as some
  /// tools write config.json.
  bool integral_floats = false;
};

template <class Json>
class FieldReader {
 public:
  /// Throws the caller's error for `field` (refusal() is the message's
  /// form). Must not return.
  using Refuse =
      std::function<void(const std::string& field, const std::string& expected, const Json& got)>;

  explicit FieldReader(Refuse refuse, ReaderOptions options = {})
      : refuse_(std::move(refuse)), options_(options) {}

  [[noreturn]] void refuse(const std::string& field, const std::string& expected,
                           const Json& got) const {
    refuse_(field, expected, got);
    throw std::logic_error("FieldReader: the refuse callback returned");
  }

  /// `object` has `key` with a value other than null.
  static bool given(const Json& object, const std::string& key) {
    const auto it = object.find(key);
    return it != object.end() && !it->is_null();
  }

  /// object[key], which must be given (absent and null are refused alike,
  /// as `field` ... but got null).
  const Json& required(const Json& object, const std::string& key, const std::string& field) const {
    if (!given(object, key)) refuse(field, "a value", Json());
    return *object.find(key);
  }

  int64_t integer(const Json& v, const std::string& field) const {
    if (v.is_number_integer() && !(v.is_number_unsigned() &&
                                   v.template get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
      return v.template get<int64_t>();
    }
    if (options_.integral_floats && v.is_number_float()) {
      const double d = v.template get<double>();
      if (std::isfinite(d) && d == std::floor(d) && std::abs(d) < 9.0e15) {
        return static_cast<int64_t>(d);
      }
    }
    refuse(field, "an integer", v);
  }

  double number(const Json& v, const std::string& field) const {
    if (!v.is_number() || !std::isfinite(v.template get<double>())) {
      refuse(field, "a finite number", v);
    }
    return v.template get<double>();
  }

  std::string text(const Json& v, const std::string& field) const {
    if (!v.is_string()) refuse(field, "a string", v);
    return v.template get<std::string>();
  }

  bool boolean(const Json& v, const std::string& field) const {
    if (!v.is_boolean()) refuse(field, "a boolean", v);
    return v.template get<bool>();
  }

 private:
  Refuse refuse_;
  ReaderOptions options_;
};

}  // namespace statickv::json
