#pragma once
// statickv::tokenizer::ChatTemplate: a checkpoint's own chat template, run
// by Jinja2 as transformers' apply_chat_template runs it (docs/tokenizer.md,
// "Chat templates").
//
//   auto chat = statickv::tokenizer::ChatTemplate::load("build/smollm2");
//   std::string text = chat.render(R"([{"role": "user", "content": "Hi"}])",
//                                  /*add_generation_prompt=*/true);
//   std::vector<int64_t> ids = tok.encode(text);  // add_special_tokens=False
//
// The template is `dir`/chat_template.jinja, else tokenizer_config.json's
// "chat_template" (a string, or a list of {"name", "template"} whose
// "default" is taken). It runs in Jinja2's ImmutableSandboxedEnvironment
// with transformers' settings (trim_blocks, lstrip_blocks, loop controls,
// the {% generation %} tag, tojson without HTML escaping, raise_exception,
// strftime_now) and sees the messages, add_generation_prompt and the
// special tokens of tokenizer_config.json (bos_token, eos_token, ...).
//
// Jinja2 runs in a Python interpreter embedded in this process, started on
// the first load: the Python this build was configured with (its
// environment holds jinja2; scripts/setup.sh installs it), or the
// interpreter named by the environment variable STATICKV_PYTHON. It never
// installs signal handlers. render() may be called from any thread; calls
// take Python's lock one at a time.
//
// Errors throw std::runtime_error: no template (naming both files), a
// template Jinja2 cannot compile (naming the file and Jinja2's message), a
// render the template refuses (raise_exception's message), messages that
// are not a JSON array of objects.

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace statickv::tokenizer {

class Tokenizer;

class ChatTemplate {
 public:
  /// True if `dir` has chat_template.jinja or a tokenizer_config.json with a
  /// "chat_template" (without starting Python).
  static bool available(const std::string& dir);
  /// Reads and compiles `dir`'s template (throws std::runtime_error).
  static ChatTemplate load(const std::string& dir);

  ChatTemplate(ChatTemplate&&) noexcept;
  ChatTemplate& operator=(ChatTemplate&&) noexcept;
  ~ChatTemplate();

  /// The prompt text of `messages_json` (a JSON array of message objects:
  /// {"role", "content"} and whatever else the template reads), with the
  /// assistant turn's opening when add_generation_prompt.
  std::string render(const std::string& messages_json, bool add_generation_prompt) const;
  /// The file the template came from.
  const std::string& source() const;

 private:
  struct Impl;
  explicit ChatTemplate(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// The messages array of one user turn, as JSON text.
std::string user_turn(std::string_view message);

/// transformers' apply_chat_template(messages, add_generation_prompt,
/// tokenize=True): the rendered text encoded with nothing added
/// (Tokenizer::encode; the template writes its own specials).
std::vector<int64_t> apply_chat(const Tokenizer& tok, const ChatTemplate& chat,
                                const std::string& messages_json,
                                bool add_generation_prompt = true);

}  // namespace statickv::tokenizer
