#pragma once
// The JSON files of a checkpoint directory, read with errors that name the
// file (tokenizer.cpp, chat_template.cpp; not installed), their fields
// through the one field reader (statickv/json/field_reader.hpp).

#include <nlohmann/json.hpp>
#include <statickv/json/field_reader.hpp>

#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace statickv::tokenizer::detail {

/// `path` parsed; throws std::runtime_error naming it when it cannot be
/// opened or is not valid JSON.
inline nlohmann::json read_json(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) throw std::runtime_error(path.string() + ": cannot open");
  try {
    return nlohmann::json::parse(in);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(path.string() + ": not valid JSON: " + e.what());
  }
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
