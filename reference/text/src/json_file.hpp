#pragma once
// The files of a checkpoint directory the tokenizer reads, through the one
// opener (statickv/json/file.hpp) with errors that name the file
// (tokenizer.cpp, chat_template.cpp; not installed), their fields through
// the one field reader (statickv/json/field_reader.hpp).

#include <nlohmann/json.hpp>
#include <statickv/json/field_reader.hpp>
#include <statickv/json/file.hpp>

#include <filesystem>
#include <stdexcept>
#include <string>

namespace statickv::tokenizer::detail {

/// `path` parsed (json/file.hpp, the one opener); throws std::runtime_error
/// naming it when it cannot be read or is not one JSON object.
inline nlohmann::json read_json(const std::filesystem::path& path) {
  return ::statickv::json::read_json_file(path.string(), ::statickv::json::fail_with_runtime_error);
}

/// The text of `path`; throws std::runtime_error naming it.
inline std::string read_file(const std::filesystem::path& path) {
  return ::statickv::json::read_text_file(path.string(), ::statickv::json::fail_with_runtime_error);
}

/// The field reader for the file at `path`: refusals are
/// std::runtime_errors prefixed with the path.
inline ::statickv::json::FieldReader<nlohmann::json> reader(const std::filesystem::path& path) {
  return ::statickv::json::FieldReader<nlohmann::json>(
      [path](const std::string& field, const std::string& expected, const nlohmann::json& got) {
        throw std::runtime_error(path.string() + ": " +
                                 ::statickv::json::refusal(field, expected, got));
      });
}

}  // namespace statickv::tokenizer::detail
