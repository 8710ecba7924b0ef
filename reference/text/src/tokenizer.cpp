// statickv::tokenizer on pytorch-tokenizers' HFTokenizer (docs/tokenizer.md).
#include <statickv/text/tokenizer.hpp>

#include "json_file.hpp"

#include <pytorch/tokenizers/hf_tokenizer.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <stdexcept>
#include <unordered_set>

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

using detail::read_json;

// eos_token_id: an id, a list of ids, null or absent.
void add_eos_ids(const fs::path& path, std::vector<int64_t>& ids) {
  if (!fs::exists(path)) return;
  const json config = read_json(path);
  if (!config.is_object()) fail(path.string() + ": expected a JSON object");
  const auto it = config.find("eos_token_id");
  if (it == config.end() || it->is_null()) return;
  const auto read = detail::reader(path);
  const auto add = [&](const json& id) {
    if (!id.is_number_integer() || id.get<int64_t>() < 0) {
      read.refuse("eos_token_id", "a non-negative id or a list of them", *it);
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

std::string string_field(const fs::path& path, const json& object, const std::string& name) {
  const auto read = detail::reader(path);
  return read.text(read.required(object, name, name), name);
}

/// The ids a post-processor adds around one sequence: TemplateProcessing's
/// "single" template (Gemma's <bos>), each of a Sequence's processors in
/// turn; ByteLevel adds none. Others are refused by name.
void read_template(const fs::path& path, const json& processor, std::vector<int64_t>& before,
                   std::vector<int64_t>& after) {
  if (processor.is_null()) return;
  const auto read = detail::reader(path);
  const std::string type = string_field(path, processor, "type");
  if (type == "ByteLevel") return;
  if (type == "Sequence") {
    for (const json& p : read.required(processor, "processors", "post_processor.processors")) {
      read_template(path, p, before, after);
    }
    return;
  }
  if (type != "TemplateProcessing") {
    read.refuse("post_processor.type", "TemplateProcessing, ByteLevel or a Sequence of them",
                processor["type"]);
  }
  const std::string field = "post_processor";
  const json& specials = read.required(processor, "special_tokens", field + ".special_tokens");
  bool seen_sequence = false;
  for (const json& piece : read.required(processor, "single", field + ".single")) {
    if (piece.contains("Sequence")) {
      seen_sequence = true;
      continue;
    }
    const std::string where = field + ".single[].SpecialToken";
    const std::string name = string_field(path, read.required(piece, "SpecialToken", where), "id");
    const json& special = read.required(specials, name, field + ".special_tokens." + name);
    for (const json& id :
         read.required(special, "ids", field + ".special_tokens." + name + ".ids")) {
      (seen_sequence ? after : before).push_back(read.integer(id, name + ".ids[]"));
    }
  }
}

}  // namespace

struct Tokenizer::Impl {
  std::string dir;
  tokenizers::HFTokenizer hf;
  int64_t vocab_size = 0;
  std::vector<int64_t> eos_ids;
  std::vector<int64_t> prompt_before, prompt_after;  // the post-processor's specials
  // Added tokens marked "special": false (Gemma's "\n", "\t", runs of
  // them): text that skip_special_tokens keeps. pytorch-tokenizers' skip
  // drops every added token, so these are decoded without it.
  std::unordered_set<int64_t> kept_added;

  std::string raw_decode(const std::vector<uint64_t>& tokens, bool skip) const {
    if (tokens.empty()) return {};
    auto result = hf.decode(tokens, skip);
    if (!result.ok()) {
      fail(dir + ": pytorch-tokenizers could not decode " + std::to_string(tokens.size()) +
           " ids (" + error_name(result.error()) + ")");
    }
    return std::move(result.get());
  }

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
  try {
    const json parsed = read_json(tokenizer_json);
    const auto processor = parsed.find("post_processor");
    if (processor != parsed.end()) {
      read_template(tokenizer_json, *processor, impl->prompt_before, impl->prompt_after);
    }
    for (const json& added : parsed.value("added_tokens", json::array())) {
      if (!added.value("special", true)) impl->kept_added.insert(added.at("id").get<int64_t>());
    }
  } catch (const json::exception& e) {
    fail(tokenizer_json.string() + ": post_processor: " + e.what());
  }

  add_eos_ids(root / "generation_config.json", impl->eos_ids);
  add_eos_ids(root / "config.json", impl->eos_ids);
  for (const int64_t id : impl->eos_ids) {
    if (id >= impl->vocab_size) {
      fail(dir + ": eos_token_id " + std::to_string(id) + " is outside the vocabulary (" +
           std::to_string(impl->vocab_size) + " ids)");
    }
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

std::vector<int64_t> Tokenizer::encode_prompt(std::string_view text) const {
  std::vector<int64_t> ids = impl_->prompt_before;
  const std::vector<int64_t> body = encode(text);
  ids.insert(ids.end(), body.begin(), body.end());
  ids.insert(ids.end(), impl_->prompt_after.begin(), impl_->prompt_after.end());
  return ids;
}

std::string Tokenizer::decode(const std::vector<int64_t>& ids, bool skip_special_tokens) const {
  std::vector<uint64_t> run;  // ids decoded together
  std::string out;
  for (const int64_t id : ids) {
    impl_->check_id(id);
    if (skip_special_tokens && impl_->kept_added.count(id)) {
      out += impl_->raw_decode(run, true);
      run.clear();
      out += impl_->raw_decode({static_cast<uint64_t>(id)}, false);
    } else {
      run.push_back(static_cast<uint64_t>(id));
    }
  }
  out += impl_->raw_decode(run, skip_special_tokens);
  return to_valid_utf8(out);
}

std::string Tokenizer::token_bytes(int64_t id, bool skip_special_tokens) const {
  impl_->check_id(id);
  const bool skip = skip_special_tokens && !impl_->kept_added.count(id);
  // The previous token only matters to SentencePiece-style decoders (a
  // leading space after BOS); byte-level BPE decodes each token alone.
  auto result = impl_->hf.decode(/*prev_token=*/0, static_cast<uint64_t>(id), skip);
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

const std::string& Tokenizer::dir() const { return impl_->dir; }

}  // namespace statickv::tokenizer
