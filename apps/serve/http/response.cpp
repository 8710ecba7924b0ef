// OpenAI-compatible response shapes (response.hpp).

#include "response.hpp"

namespace statickv::serve {

using nlohmann::json;

std::string error_body(const ApiError& e) {
  const auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return json{{"error",
               {{"message", e.what()},
                {"type", e.type},
                {"param", or_null(e.param)},
                {"code", or_null(e.code)}}}}
      .dump(-1, ' ', false, json::error_handler_t::replace);
}

json usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

std::string json_text(const json& body) {
  return body.dump(-1, ' ', false, json::error_handler_t::replace);
}

namespace {

/// What every response and chunk names: id, object, created, model, choices.
json envelope(const ResponseHead& head, const char* object, json choices) {
  return {{"id", head.id},
          {"object", object},
          {"created", head.created},
          {"model", head.model},
          {"choices", std::move(choices)}};
}

const char* chunk_object(const ResponseHead& head) {
  return head.endpoint == Endpoint::kChat ? "chat.completion.chunk" : "text_completion";
}

}  // namespace

json response_body(const ResponseHead& head, const std::vector<ChoiceOut>& choices,
                   const Usage& usage) {
  const bool chat = head.endpoint == Endpoint::kChat;
  json list = json::array();
  bool one_prompt = true;
  for (const ChoiceOut& c : choices) {
    one_prompt = one_prompt && c.prompt_ids == choices.front().prompt_ids;
    json choice = {{"index", c.index},
                   {"logprobs", c.logprobs},
                   {"finish_reason", c.finish},
                   {"token_ids", c.token_ids},
                   {"prompt_token_ids", c.prompt_ids}};
    if (chat) {
      choice["message"] = {{"role", "assistant"}, {"content", c.text}};
    } else {
      choice["text"] = c.text;
    }
    list.push_back(std::move(choice));
  }
  json body = envelope(head, chat ? "chat.completion" : "text_completion", std::move(list));
  body["usage"] = usage_json(usage);
  if (one_prompt && !choices.empty()) body["prompt_token_ids"] = choices.front().prompt_ids;
  return body;
}

json stream_chunk(const ResponseHead& head, int64_t index, const std::string& piece,
                  const std::vector<int64_t>& token_ids, bool first,
                  const std::optional<std::string>& finish, const json& logprobs) {
  const bool chat = head.endpoint == Endpoint::kChat;
  json choice = {{"index", index},
                 {"logprobs", logprobs},
                 {"finish_reason", finish ? json(*finish) : json(nullptr)},
                 {"token_ids", token_ids}};
  if (chat) {
    json delta = json::object();
    if (first) delta["role"] = "assistant";
    if (first || !piece.empty() || !finish) delta["content"] = piece;
    choice["delta"] = std::move(delta);
  } else {
    choice["text"] = piece;
  }
  return envelope(head, chunk_object(head), json::array({choice}));
}

json usage_chunk(const ResponseHead& head, const Usage& usage) {
  json chunk = envelope(head, chunk_object(head), json::array());
  chunk["usage"] = usage_json(usage);
  return chunk;
}

json models_body(const std::string& served_model, int64_t created, const std::string& root,
                 int64_t max_model_len) {
  return {{"object", "list"},
          {"data", json::array({{{"id", served_model},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "statickv"},
                                 {"root", root},
                                 {"max_model_len", max_model_len}}})}};
}

}  // namespace statickv::serve
