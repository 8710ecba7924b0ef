#pragma once
// statickv-serve's text: the checkpoint's tokenizer and chat template behind
// one lock, for the JSON-lines "text" field and the HTTP API (the handler
// threads encode, the engine thread decodes). Null without a tokenizer.

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace statickv::serve {

/// One sequence's decoder: each id in, the whole characters it completes
/// out (special tokens skipped); finish() gives what an unfinished
/// character left (as U+FFFD).
struct TextStream {
  std::function<std::string(int64_t)> push;
  std::function<std::string()> finish;
};

class TextTools {
 public:
  virtual ~TextTools() = default;
  /// A text prompt's ids, the tokenizer's own specials added (Gemma's <bos>).
  virtual std::vector<int64_t> encode_prompt(const std::string& text) = 0;
  /// `text`'s ids with nothing added (special tokens written in the text
  /// encode as themselves).
  virtual std::vector<int64_t> encode(const std::string& text) = 0;
  /// One token's bytes, special tokens included (log-probabilities' names).
  virtual std::string token_text(int64_t id) = 0;
  /// The eos token's text: tokenizer_config.json's eos_token, else the
  /// first eos id's ("" when neither names one).
  virtual std::string eos_token() = 0;
  /// The chat template's prompt of `messages_json` with the generation
  /// prompt, encoded with nothing added (transformers' apply_chat_template).
  /// Throws std::runtime_error (no template, or the template refuses).
  virtual std::vector<int64_t> apply_chat(const std::string& messages_json) = 0;
  virtual bool has_chat() const = 0;
  /// The text of ids, special tokens skipped.
  virtual std::string decode(const std::vector<int64_t>& ids) = 0;
  /// A decoder for one sequence.
  virtual TextStream stream() = 0;
};

/// A token named by its id, "token_id:<id>" (vLLM's spelling): what
/// log-probabilities call a token without a tokenizer's text.
std::string id_text(int64_t id);

/// `dir`'s tokenizer.json and, with `chat` and when it has one, its chat
/// template (compiled now: a template Jinja2 refuses fails here). Throws
/// std::runtime_error, or FlagError where this build has no
/// statickv::tokenizer.
std::shared_ptr<TextTools> load_text_tools(const std::string& dir, bool chat);

}  // namespace statickv::serve
