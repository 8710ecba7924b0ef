// statickv-serve's tokenizer and chat template behind one lock (text_tools.hpp).

#include "text_tools.hpp"

#include <statickv/flags/flags.hpp>
#ifdef STATICKV_SERVE_TOKENIZER
#include <statickv/text/chat_template.hpp>
#include <statickv/text/tokenizer.hpp>
#endif

#include <nlohmann/json.hpp>

#include <filesystem>
#include <fstream>
#include <mutex>
#include <optional>
#include <stdexcept>

namespace statickv::serve {

std::string id_text(int64_t id) { return "token_id:" + std::to_string(id); }

#ifdef STATICKV_SERVE_TOKENIZER

namespace {

/// tokenizer_config.json's eos_token (a string, or {"content": ...}), as
/// transformers' tokenizer.eos_token reads it; "" when absent.
std::string config_eos_token(const std::string& dir) {
  std::ifstream in(std::filesystem::path(dir) / "tokenizer_config.json");
  if (!in) return "";
  const nlohmann::json config = nlohmann::json::parse(in, nullptr, /*allow_exceptions=*/false);
  const nlohmann::json eos =
      config.is_object() ? config.value("eos_token", nlohmann::json()) : nlohmann::json();
  if (eos.is_string()) return eos.get<std::string>();
  if (eos.is_object() && eos.value("content", nlohmann::json()).is_string()) {
    return eos["content"].get<std::string>();
  }
  return "";
}

// pytorch-tokenizers does not promise thread-safe calls, so one lock covers
// every use; the chat template takes Python's lock of its own.
class TokenizerText final : public TextTools {
 public:
  TokenizerText(const std::string& dir, bool chat)
      : tok_(tokenizer::Tokenizer::load(dir)), eos_(config_eos_token(dir)) {
    if (chat && tokenizer::ChatTemplate::available(dir)) {
      chat_ = tokenizer::ChatTemplate::load(dir);
    }
  }
  std::vector<int64_t> encode_prompt(const std::string& text) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return tok_.encode_prompt(text);
  }
  std::vector<int64_t> encode(const std::string& text) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return tok_.encode(text);
  }
  std::string token_text(int64_t id) override {
    std::lock_guard<std::mutex> lock(mutex_);
    if (id < 0 || id >= tok_.vocab_size()) return id_text(id);  // the model's padded rows
    return tok_.token_bytes(id, /*skip_special_tokens=*/false);
  }
  std::string eos_token() override {
    if (!eos_.empty()) return eos_;
    std::lock_guard<std::mutex> lock(mutex_);
    return tok_.eos_ids().empty() ? std::string() : tok_.token_bytes(tok_.eos_ids().front());
  }
  std::vector<int64_t> apply_chat(const std::string& messages_json) override {
    if (!chat_) {
      throw std::runtime_error("messages: expected a checkpoint with a chat template (" +
                               tok_.dir() +
                               "/chat_template.jinja or tokenizer_config.json's "
                               "chat_template) but it has none");
    }
    const std::string text = chat_->render(messages_json, /*add_generation_prompt=*/true);
    std::lock_guard<std::mutex> lock(mutex_);
    return tok_.encode(text);
  }
  bool has_chat() const override { return chat_.has_value(); }
  std::string decode(const std::vector<int64_t>& ids) override {
    std::lock_guard<std::mutex> lock(mutex_);
    return tok_.decode(ids, /*skip_special_tokens=*/true);
  }
  TextStream stream() override {
    auto decoder = std::make_shared<tokenizer::StreamDecoder>(tok_.stream());
    return {[this, decoder](int64_t id) {
              std::lock_guard<std::mutex> lock(mutex_);
              return decoder->push(id);
            },
            [this, decoder] {
              std::lock_guard<std::mutex> lock(mutex_);
              return decoder->finish();
            }};
  }

 private:
  std::mutex mutex_;
  tokenizer::Tokenizer tok_;
  std::string eos_;  // tokenizer_config.json's eos_token ("" without one)
  std::optional<tokenizer::ChatTemplate> chat_;
};

}  // namespace

std::shared_ptr<TextTools> load_text_tools(const std::string& dir, bool chat) {
  return std::make_shared<TokenizerText>(dir, chat);
}

#else

std::shared_ptr<TextTools> load_text_tools(const std::string&, bool) {
  throw flags::FlagError(
      "--tokenizer: expected no tokenizer: this build has no statickv::tokenizer");
}

#endif

}  // namespace statickv::serve
