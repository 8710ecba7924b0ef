#pragma once
// statickv-serve --http's OpenAI-compatible requests: bodies of
// /v1/completions, /v1/chat/completions, /tokenize and /detokenize read
// with errors that name the field (ApiError), and the checkpoint's
// generation defaults (docs/serving.md, "HTTP API"). The answers' shapes
// are response.hpp. No I/O here: server.cpp moves bytes.

#include <statickv/sampling/sampling.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace statickv::serve {

/// An HTTP error answer: its status and OpenAI's error object.
class ApiError : public std::runtime_error {
 public:
  ApiError(int status, const std::string& message, std::string param = "",
           std::string type = "invalid_request_error", std::string code = "")
      : std::runtime_error(message),
        status(status),
        param(std::move(param)),
        type(std::move(type)),
        code(std::move(code)) {}
  int status;
  std::string param, type, code;
};

enum class Endpoint { kCompletions, kChat };

/// One completions prompt: text, or token ids.
struct PromptIn {
  std::optional<std::string> text;
  std::vector<int64_t> ids;
};

/// One request as the client wrote it; absent fields stay empty.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::vector<PromptIn> prompts;  ///< completions: one or more, in order
  std::string messages_json;      ///< chat: the messages, content flattened to text
  std::optional<int64_t> max_tokens;
  std::string max_tokens_field = "max_tokens";  ///< or chat's max_completion_tokens
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  /// The head's fields (min_p, penalties, logit_bias, min_tokens); the
  /// rest of its settings come from the fields above.
  reference::Sampling head;
  bool ignore_eos = false;
  int64_t n = 1;  ///< choices per prompt
  /// Alternatives per token: completions' logprobs, chat's top_logprobs
  /// (with logprobs true). nullopt: no log-probabilities.
  std::optional<int64_t> logprobs;
  bool echo = false;  ///< completions: the prompt leads each choice's text
  std::vector<std::string> stop;
  bool stream = false, include_usage = false, continuous_usage = false;
  std::vector<std::string> ignored;  ///< fields not known, ignored (not strict)
};

/// Parses a body (throws ApiError 400 naming the field, 404 for another
/// model than `served_model`). `strict`: an unknown field is a 400, not
/// ignored (docs/serving.md, "Field policy").
ApiRequest parse_request(Endpoint endpoint, const std::string& body,
                         const std::string& served_model, bool strict = false);

/// POST /tokenize's body, vLLM's shape: a `prompt` (with
/// `add_special_tokens`, default true) or chat `messages` (rendered with
/// the generation prompt).
struct TokenizeRequest {
  std::optional<std::string> prompt;
  std::string messages_json;  ///< set when messages were given
  bool add_special_tokens = true;
};
TokenizeRequest parse_tokenize(const std::string& body);
/// POST /detokenize's body: {"tokens": [ids...]}.
std::vector<int64_t> parse_detokenize(const std::string& body);

/// The checkpoint's generation defaults (generation_config.json).
struct GenerationDefaults {
  double temperature = 1.0, top_p = 1.0;  ///< OpenAI's without a file
  int64_t top_k = 0;
  std::optional<int64_t> max_new_tokens;
  /// `dir`/generation_config.json: greedy unless its do_sample is true, then
  /// its temperature, top_p and top_k, each absent one as transformers'
  /// GenerationConfig has it (1.0, 1.0, 50); max_new_tokens if given. No
  /// file (or no dir): OpenAI's defaults (temperature 1, top_p 1, no top_k).
  /// A field of the wrong type throws std::runtime_error naming the file and field.
  static GenerationDefaults load(const std::string& dir);
};

}  // namespace statickv::serve
