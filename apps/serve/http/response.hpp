#pragma once
// statickv-serve --http's OpenAI-compatible answers: whole responses, stream
// chunks, usage, /v1/models and error bodies in OpenAI's shapes
// (docs/serving.md, "HTTP API"). No I/O here: server.cpp moves bytes.

#include "request.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace statickv::serve {

/// {"error": {"message", "type", "param", "code"}}.
std::string error_body(const ApiError& e);

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
