#pragma once
// statickv::tokenizer: text in and text out for a Hugging Face checkpoint
// directory, such as the SmolLM2-135M-Instruct and Gemma 3 270M ones that
// tools/smollm2/convert.py and tools/gemma3/convert.py write.
//
//   auto tok = statickv::tokenizer::Tokenizer::load("build/smollm2");
//   std::vector<int64_t> prompt = tok.encode_prompt("The capital of France is");
//   auto stream = tok.stream();             // skips special tokens
//   for (each generated id) {
//     if (tok.is_eos(id)) break;
//     std::cout << stream.push(id) << std::flush;  // whole characters only
//   }
//   std::cout << stream.finish() << "\n";
//
// Encoding and decoding go through pytorch-tokenizers (Meta's C++
// implementation of Hugging Face's tokenizer.json, the same code behind
// ExecuTorch's LLM runner), linked from its PyPI wheel; docs/tokenizer.md
// says why and what that links. Its ids equal transformers' on the test
// prompts (tests/text). Nothing of it shows in this header: a program
// including it needs no pytorch-tokenizers or re2 headers.
//
// CMake: target_link_libraries(prog PRIVATE statickv::tokenizer), under
// if(TARGET statickv::tokenizer): the target is left out (with a warning)
// where pytorch-tokenizers, re2/re2.h or a shared libpython3 is missing. A
// program linking it prints one line on stderr as it starts
// ("I tokenizers:regex.cpp:40] Registering override fallback regex"), from
// pytorch-tokenizers' module; it cannot be turned off from outside.
//
// The chat template (Jinja, in chat_template.jinja / tokenizer_config.json)
// runs in chat_template.hpp (ChatTemplate, apply_chat).
//
// Errors (missing or malformed files, ids out of range) throw
// std::runtime_error or std::out_of_range naming the file or the id.
// A Tokenizer is immutable after load, but pytorch-tokenizers does not say
// that its encode/decode are thread-safe: use one Tokenizer per thread. A
// StreamDecoder belongs to one sequence (one batch row).

#include <statickv/text/utf8.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

namespace statickv::tokenizer {

class StreamDecoder;

class Tokenizer {
 public:
  /// Reads `dir`/tokenizer.json (required), the eos ids from
  /// `dir`/generation_config.json and `dir`/config.json (eos_token_id, an id
  /// or a list; both files' ids, generation_config's first, no duplicates;
  /// neither file or no eos_token_id: no eos ids).
  static Tokenizer load(const std::string& dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  /// The ids of `text`, as transformers' tokenizer.encode(text,
  /// add_special_tokens=False): nothing is added before or after; a special
  /// token written in the text ("<|im_end|>") becomes its id.
  std::vector<int64_t> encode(std::string_view text) const;
  /// The ids of a prompt, as transformers' tokenizer(text).input_ids (its
  /// default add_special_tokens=True): encode(text) with the specials the
  /// tokenizer.json post-processor adds around one sequence (Gemma's <bos>
  /// first; none for SmolLM2).
  std::vector<int64_t> encode_prompt(std::string_view text) const;

  /// The text of `ids`, as transformers' tokenizer.decode(ids,
  /// skip_special_tokens): always valid UTF-8, ill-formed bytes (a character
  /// cut off by the end of `ids`, say) become U+FFFD. Throws
  /// std::out_of_range for an id outside [0, vocab_size()).
  std::string decode(const std::vector<int64_t>& ids, bool skip_special_tokens = false) const;

  /// The raw bytes of one token, possibly part of a UTF-8 character; empty
  /// for a special token when skip_special_tokens. The bytes of a sequence's
  /// tokens, concatenated and made valid UTF-8, are decode() of it.
  std::string token_bytes(int64_t id, bool skip_special_tokens = false) const;

  /// A streaming decoder over this tokenizer, which must outlive it.
  StreamDecoder stream(bool skip_special_tokens = true) const;

  /// Number of ids, special tokens included (49152 for SmolLM2).
  int64_t vocab_size() const;

  /// Ids that end generation (SmolLM2: 2, <|im_end|>), in file order.
  const std::vector<int64_t>& eos_ids() const;
  bool is_eos(int64_t id) const;

  /// The directory it was loaded from.
  const std::string& dir() const;

 private:
  struct Impl;
  explicit Tokenizer(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

/// Ids in, text out, one id at a time, for printing tokens as they are
/// generated. push(id) returns the whole UTF-8 characters that this id
/// completes (often none: "é" may take two ids, an emoji four) and never a
/// part of one; finish() returns what is left (U+FFFD for a character the
/// sequence cut off). The concatenation of every push() and the finish() is
/// tokenizer.decode(ids, skip_special_tokens). Eos ids are text like any
/// other (a special one is skipped): check is_eos before pushing.
class StreamDecoder {
 public:
  StreamDecoder(const Tokenizer& tokenizer, bool skip_special_tokens = true)
      : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

  std::string push(int64_t id) {
    return utf8_.push(tokenizer_->token_bytes(id, skip_special_tokens_));
  }
  std::string finish() { return utf8_.finish(); }

  /// Bytes held back, waiting for the rest of a character (0 to 3).
  size_t pending_bytes() const { return utf8_.pending_bytes(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  Utf8Stream utf8_;
};

inline StreamDecoder Tokenizer::stream(bool skip_special_tokens) const {
  return StreamDecoder(*this, skip_special_tokens);
}

}  // namespace statickv::tokenizer
