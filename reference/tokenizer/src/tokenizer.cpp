// statickv::tokenizer on pytorch-tokenizers' HFTokenizer (docs/tokenizer.md).
#include <statickv/tokenizer/tokenizer.hpp>

#include <pytorch/tokenizers/hf_tokenizer.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace statickv::tokenizer {
namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;

const char* error_name(tokenizers::Error error) {
  switch (error) {
    case tokenizers::Error::Ok:
      return "Ok";
    case tokenizers::Error::Internal:
      return "Internal";
    case tokenizers::Error::Uninitialized:
      return "Uninitialized";
    case tokenizers::Error::OutOfRange:
      return "OutOfRange";
    case tokenizers::Error::LoadFailure:
      return "LoadFailure";
    case tokenizers::Error::EncodeFailure:
      return "EncodeFailure";
    case tokenizers::Error::Base64DecodeFailure:
      return "Base64DecodeFailure";
    case tokenizers::Error::ParseFailure:
      return "ParseFailure";
    case tokenizers::Error::DecodeFailure:
      return "DecodeFailure";
    case tokenizers::Error::RegexFailure:
      return "RegexFailure";
  }
  return "unknown error";
}

[[noreturn]] void fail(const std::string& message) { throw std::runtime_error(message); }

json read_json(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path.string() + ": cannot open");
  try {
    return json::parse(in);
  } catch (const json::exception& e) {
    fail(path.string() + ": not valid JSON: " + e.what());
  }
}

// eos_token_id: an id, a list of ids, null or absent.
void add_eos_ids(const fs::path& path, std::vector<int64_t>& ids) {
  if (!fs::exists(path)) return;
  const json config = read_json(path);
  if (!config.is_object()) fail(path.string() + ": expected a JSON object");
  const auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return;
  const auto add = [&](const json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      fail(path.string() + ": eos_token_id: expected a non-negative id or a list of them, got " +
           it->dump());
    }
    if (std::find(ids.begin(), ids.end(), id.get<int64_t>()) == ids.end()) {
      ids.push_back(id.get<int64_t>());
    }
  };
  if (it->is_array()) {
    for (const auto& id : *it) add(id);
  } else {
    add(*it);
  }
}

std::string string_field(const fs::path& path, const json& object, const char* name) {
  const auto it = object.find(name);
  if (it == object.end() || !it->is_string()) {
    fail(path.string() + ": expected a string field \"" + name + "\"");
  }
  return it->get<std::string>();
}

}  // namespace

struct Tokenizer::Impl {
  std::string dir;
  tokenizers::HFTokenizer hf;
  int64_t vocab_size = 0;
  std::vector<int64_t> eos_ids;
  bool has_chat = false;
  std::string chat_prefix, chat_suffix;

  void check_id(int64_t id) const {
    if (id < 0 || id >= vocab_size) {
      throw std::out_of_range(dir + ": token id " + std::to_string(id) + " is outside [0, " +
                              std::to_string(vocab_size) + ")");
    }
  }
};

Tokenizer::Tokenizer(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& dir) {
  auto impl = std::make_unique<Impl>();
  impl->dir = dir;
  const fs::path root(dir);
  const fs::path tokenizer_json = root / "tokenizer.json";
  if (!fs::is_regular_file(tokenizer_json)) {
    fail(tokenizer_json.string() +
         ": no such file (a Hugging Face checkpoint directory has one; for SmolLM2 run "
         "tools/smollm2/convert.py)");
  }
  const tokenizers::Error error = impl->hf.load(tokenizer_json.string());
  if (error != tokenizers::Error::Ok) {
    fail(tokenizer_json.string() + ": pytorch-tokenizers could not load it (" + error_name(error) +
         ")");
  }
  impl->vocab_size = impl->hf.vocab_size();
  if (impl->vocab_size <= 0) fail(tokenizer_json.string() + ": empty vocabulary");

  add_eos_ids(root / "generation_config.json", impl->eos_ids);
  add_eos_ids(root / "config.json", impl->eos_ids);
  for (const int64_t id : impl->eos_ids) {
    if (id >= impl->vocab_size) {
      fail(dir + ": eos_token_id " + std::to_string(id) + " is outside the vocabulary (" +
           std::to_string(impl->vocab_size) + " ids)");
    }
  }

  const fs::path chat = root / "chat_prompt.json";
  if (fs::exists(chat)) {
    const json prompt = read_json(chat);
    if (!prompt.is_object()) fail(chat.string() + ": expected a JSON object");
    impl->chat_prefix = string_field(chat, prompt, "prefix");
    impl->chat_suffix = string_field(chat, prompt, "suffix");
    impl->has_chat = true;
  }
  return Tokenizer(std::move(impl));
}

std::vector<int64_t> Tokenizer::encode(std::string_view text) const {
  auto result = impl_->hf.encode(std::string(text), /*bos=*/0, /*eos=*/0);
  if (!result.ok()) {
    fail(impl_->dir + ": pytorch-tokenizers could not encode a text of " +
         std::to_string(text.size()) + " bytes (" + error_name(result.error()) + ")");
  }
  const auto& ids = result.get();
  return std::vector<int64_t>(ids.begin(), ids.end());
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<uint64_t> tokens;
  tokens.reserve(ids.size());
  for (const int64_t id : ids) {
    impl_->check_id(id);
    tokens.push_back(static_cast<uint64_t>(id));
  }
  auto result = impl_->hf.decode(tokens, skip_special_tokens);
  if (!result.ok()) {
    fail(impl_->dir + ": pytorch-tokenizers could not decode " + std::to_string(ids.size()) +
         " ids (" + error_name(result.error()) + ")");
  }
  return to_valid_utf8(result.get());
}

std::string Tokenizer::token_bytes(int64_t id, bool skip_special_tokens) const {
  impl_->check_id(id);
  // The previous token only matters to SentencePiece-style decoders (a
  // leading space after BOS); byte-level BPE decodes each token alone.
  auto result = impl_->hf.decode(/*prev_token=*/0, static_cast<uint64_t>(id), skip_special_tokens);
  if (!result.ok()) {
    fail(impl_->dir + ": pytorch-tokenizers could not decode id " + std::to_string(id) + " (" +
         error_name(result.error()) + ")");
  }
  return std::move(result.get());
}

int64_t Tokenizer::vocab_size() const { return impl_->vocab_size; }

const std::vector<int64_t>& Tokenizer::eos_ids() const { return impl_->eos_ids; }

bool Tokenizer::is_eos(int64_t id) const {
  return std::find(impl_->eos_ids.begin(), impl_->eos_ids.end(), id) != impl_->eos_ids.end();
}

bool Tokenizer::has_chat_prompt() const { return impl_->has_chat; }

std::string Tokenizer::chat_text(std::string_view user_message) const {
  if (!impl_->has_chat) {
    fail(impl_->dir +
         "/chat_prompt.json: no such file: the chat template rendered at conversion time "
         "(tools/smollm2/convert.py writes it)");
  }
  std::string text;
  text.reserve(impl_->chat_prefix.size() + user_message.size() + impl_->chat_suffix.size());
  text.append(impl_->chat_prefix).append(user_message).append(impl_->chat_suffix);
  return text;
}

std::vector<int64_t> Tokenizer::apply_chat(std::string_view user_message) const {
  return encode(chat_text(user_message));
}

const std::string& Tokenizer::dir() const { return impl_->dir; }

}  // namespace statickv::tokenizer
