#pragma once
// statickv-serve --http's OpenAI-compatible bodies: requests of
// /v1/completions and /v1/chat/completions read with errors that name the
// field, and the responses and stream chunks in OpenAI's shapes
// (docs/serving.md, "HTTP API"). No I/O here: http_server.cpp moves bytes.

#include <statickv/reference/sampling.hpp>

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

/// {"error": {"message", "type", "param", "code"}}.
std::string error_body(const ApiError& e);

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

/// What a response names besides its tokens.
struct ResponseHead {
  Endpoint endpoint = Endpoint::kCompletions;
  std::string id, model;
  int64_t created = 0;
};

struct Usage {
  int64_t prompt_tokens = 0, completion_tokens = 0;
};

/// One choice of a whole response.
struct ChoiceOut {
  int64_t index = 0;
  std::string text;
  std::vector<int64_t> token_ids, prompt_ids;
  std::string finish;
  nlohmann::json logprobs;  ///< null, or the endpoint's log-probability object
};

/// The whole (non-stream) response; `prompt_token_ids` at the top when
/// every choice has the same prompt.
nlohmann::json response_body(const ResponseHead& head, const std::vector<ChoiceOut>& choices,
                             const Usage& usage);

/// One stream chunk of choice `index`: a text piece (chat: `first` carries
/// the role too), or with `finish` its last chunk.
nlohmann::json stream_chunk(const ResponseHead& head, int64_t index, const std::string& text,
                            const std::vector<int64_t>& token_ids, bool first,
                            const std::optional<std::string>& finish,
                            const nlohmann::json& logprobs = nullptr);

/// The chunk with `usage` and no choices (stream_options.include_usage).
nlohmann::json usage_chunk(const ResponseHead& head, const Usage& usage);
/// {"prompt_tokens", "completion_tokens", "total_tokens"}.
nlohmann::json usage_json(const Usage& usage);

/// GET /v1/models: the served name, the checkpoint as `root` and the
/// longest sequence (--max-len).
nlohmann::json models_body(const std::string& served_model, int64_t created,
                           const std::string& root, int64_t max_model_len);

/// A response's text: invalid UTF-8 (a token's partial bytes) as U+FFFD.
std::string json_text(const nlohmann::json& body);

}  // namespace statickv::serve
