#pragma once
// The one opener of the files the project reads whole: a file's text, and
// a JSON file parsed, with failures that all name the path in one form
// ("<path>: expected <what> but got <what came>"): checkpoints' config.json,
// generation_config.json and sharded indexes, safetensors headers, the
// tokenizer's JSON files and chat templates. As with FieldReader, each
// caller turns a failure into its own error through the Fail callback (a
// c10::Error for checkpoints, std::runtime_error for the tokenizer).
// Header-only, torch-free; target statickv_json_fields.

#include <nlohmann/json.hpp>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>

namespace statickv::json {

/// Throws the caller's error with `message` (which names the path). Must
/// not return.
using Fail = std::function<void(const std::string& message)>;

/// Calls `fail`; a callback that returns is a bug, not a silent result.
[[noreturn]] inline void failed(const Fail& fail, const std::string& message) {
  fail(message);
  throw std::logic_error("statickv::json: the fail callback returned after: " + message);
}

/// A Fail that throws std::runtime_error.
inline void fail_with_runtime_error(const std::string& message) {
  throw std::runtime_error(message);
}

/// The bytes of the regular file at `path`.
inline std::string read_text_file(const std::string& path, const Fail& fail) {
  if (!std::filesystem::is_regular_file(path)) {
    failed(fail, path + ": expected an existing file but got none");
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) failed(fail, path + ": expected a readable file but got: " + std::strerror(errno));
  std::ostringstream text;
  text << in.rdbuf();
  if (in.bad()) failed(fail, path + ": expected a readable file but got a read error");
  return text.str();
}

/// [begin, end) parsed as JSON; `what` says what the bytes should be ("a
/// JSON safetensors header").
template <class Json = nlohmann::json>
Json parse_json(const std::string& path, const char* begin, const char* end,
                const std::string& what, const Fail& fail) {
  try {
    return Json::parse(begin, end);
  } catch (const typename Json::exception& e) {
    failed(fail, path + ": expected " + what + " but got invalid JSON: " + e.what());
  }
}

/// The file at `path`, which must hold one JSON object.
template <class Json = nlohmann::json>
Json read_json_file(const std::string& path, const Fail& fail) {
  const std::string text = read_text_file(path, fail);
  Json json = parse_json<Json>(path, text.data(), text.data() + text.size(), "a JSON object", fail);
  if (!json.is_object()) {
    failed(fail, path + ": expected a JSON object but got " + std::string(json.type_name()));
  }
  return json;
}

}  // namespace statickv::json
