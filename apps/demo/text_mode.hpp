#pragma once
// statickv-demo's text in and text out: prompts given as text (--prompt,
// --prompts-file, --chat) are encoded with the checkpoint's tokenizer
// (statickv::tokenizer), and the answers are printed as they are generated,
// whole UTF-8 characters only, with each request's time to first token and
// decode tokens/s.
//
// A ragged batch streams in prompt order: the first answer prints live; the
// text of later rows, generated in the same steps, is held until the rows
// before them have finished, then printed at once and followed live. So the
// terminal shows one answer at a time while every row decodes together.
//
// Without statickv::tokenizer (pytorch-tokenizers missing at configure
// time, docs/tokenizer.md) TextSession::open throws a FlagError saying so.

#include <statickv/engine/generator.hpp>

#include <chrono>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace statickv::demo {

/// The text-prompt flags as given.
struct TextFlags {
  std::vector<std::string> prompts;  ///< --prompt, then --prompts-file's lines, in order
  std::string prompts_file;          ///< --prompts-file: one prompt a line
  bool chat = false;                 ///< --chat: the checkpoint's chat template

  bool given() const { return !prompts.empty() || !prompts_file.empty(); }
};

/// The prompts of --prompts-file: its non-empty lines, in order. Throws
/// FlagError naming the flag if it cannot be read or holds no prompt.
std::vector<std::string> read_prompts_file(const std::string& path);

/// A checkpoint's tokenizer and the encoded prompts, and the printer of
/// their answers.
class TextSession {
 public:
  /// Loads `checkpoint`/tokenizer.json (and its chat template with --chat),
  /// encodes the prompts. Throws FlagError for a missing tokenizer, a
  /// checkpoint without a chat template under --chat, or an empty encoding.
  static std::unique_ptr<TextSession> open(const std::string& checkpoint, const TextFlags& flags);
  virtual ~TextSession() = default;

  /// The prompts' token ids (after the chat template, with --chat).
  virtual const std::vector<std::vector<int64_t>>& prompt_ids() const = 0;

  /// A token callback for one Generator::generate call that started at
  /// `start`: prints each answer in prompt order, streamed, then its
  /// statistics line ("stopped at eos" when its last id is one of
  /// `stop_ids`, the ids the generator stops at). The session must outlive
  /// the call.
  virtual reference::TokenCallback printer(std::chrono::steady_clock::time_point start,
                                           std::vector<int64_t> stop_ids) = 0;
};

}  // namespace statickv::demo
