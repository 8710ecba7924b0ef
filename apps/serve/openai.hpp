#pragma once
// statickv-serve --http's OpenAI-compatible bodies: requests of
// /v1/completions and /v1/chat/completions read with errors that name the
// field, and the responses and stream chunks in OpenAI's shapes
// (docs/serving.md, "HTTP API"). No I/O here: http_server.cpp moves bytes.

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

/// One request as the client wrote it; absent fields stay empty.
struct ApiRequest {
  Endpoint endpoint = Endpoint::kCompletions;
  std::optional<std::string> prompt_text;  ///< completions: a string prompt
  std::vector<int64_t> prompt_ids;         ///< completions: token ids
  std::string messages_json;               ///< chat: the messages, content flattened to text
  std::optional<int64_t> max_tokens;
  std::string max_tokens_field = "max_tokens";  ///< or chat's max_completion_tokens
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  std::vector<std::string> stop;
  bool stream = false, include_usage = false;
};

/// Parses a body (throws ApiError 400 naming the field, 404 for another
/// model than `served_model`).
ApiRequest parse_request(Endpoint endpoint, const std::string& body,
                         const std::string& served_model);

/// The checkpoint's generation defaults (generation_config.json).
struct GenerationDefaults {
  double temperature = 1.0, top_p = 1.0;  ///< OpenAI's without a file
  int64_t top_k = 0;
  std::optional<int64_t> max_new_tokens;
  /// `dir`/generation_config.json: greedy unless its do_sample is true, then
  /// its temperature, top_p and top_k, each absent one as transformers'
  /// GenerationConfig has it (1.0, 1.0, 50); max_new_tokens if given. No
  /// file (or no dir): OpenAI's defaults (temperature 1, top_p 1, no top_k).
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

/// The whole (non-stream) response.
nlohmann::json response_body(const ResponseHead& head, const std::string& text,
                             const std::vector<int64_t>& token_ids, const std::string& finish,
                             const Usage& usage, const std::vector<int64_t>& prompt_ids);

/// One stream chunk: a text piece (chat: `first` carries the role too), or
/// with `finish` the last choice chunk.
nlohmann::json stream_chunk(const ResponseHead& head, const std::string& text,
                            const std::vector<int64_t>& token_ids, bool first,
                            const std::optional<std::string>& finish);

/// The chunk with `usage` and no choices (stream_options.include_usage).
nlohmann::json usage_chunk(const ResponseHead& head, const Usage& usage);

/// GET /v1/models.
nlohmann::json models_body(const std::string& served_model, int64_t created);

}  // namespace statickv::serve
