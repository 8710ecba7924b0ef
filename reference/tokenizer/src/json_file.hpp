#pragma once
// The JSON files of a checkpoint directory, read with errors that name the
// file (tokenizer.cpp, chat_template.cpp; not installed).

#include <nlohmann/json.hpp>

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

}  // namespace statickv::tokenizer::detail
