// OpenAI-compatible request parsing and response shapes (openai.hpp).

#include "openai.hpp"

#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>

namespace statickv::serve {

using nlohmann::json;
// Request bodies keep their keys' order: a chat template may print a message
// whole (| tojson), and transformers' keeps the client's order.
using Body = nlohmann::ordered_json;

namespace {

[[noreturn]] void refuse(const std::string& field, const std::string& expected, const Body& got) {
  throw ApiError(400, field + ": expected " + expected + " but got " + got.dump(), field);
}

int64_t integer(const Body& v, const std::string& field) {
  if (v.is_number_integer() &&
      !(v.is_number_unsigned() && v.get<uint64_t>() > static_cast<uint64_t>(INT64_MAX))) {
    return v.get<int64_t>();
  }
  refuse(field, "an integer", v);
}

double number(const Body& v, const std::string& field) {
  if (!v.is_number() || !std::isfinite(v.get<double>())) refuse(field, "a finite number", v);
  return v.get<double>();
}

std::string text(const Body& v, const std::string& field) {
  if (!v.is_string()) refuse(field, "a string", v);
  return v.get<std::string>();
}

bool is_empty_or_null(const Body& v) {
  return v.is_null() || ((v.is_object() || v.is_array()) && v.empty());
}

/// Fields statickv does not implement, accepted at the value that means
/// "not used" (docs/serving.md lists them); any other value is a 400.
struct Neutral {
  const char* field;
  const char* expected;
  std::function<bool(const Body&)> ok;
};

const std::vector<Neutral>& neutral_fields(Endpoint endpoint) {
  static const auto one = [](const Body& v) { return v.is_null() || v == 1; };
  static const auto off = [](const Body& v) { return v.is_null() || v == false || v == 0; };
  static const auto zero = [](const Body& v) { return v.is_null() || (v.is_number() && v == 0); };
  static const auto any_string = [](const Body& v) { return v.is_null() || v.is_string(); };
  static const auto any_object = [](const Body& v) { return v.is_null() || v.is_object(); };
  static const std::vector<Neutral> common = {
      {"n", "1 (one choice per request)", one},
      {"presence_penalty", "0", zero},
      {"frequency_penalty", "0", zero},
      {"logprobs", "null, false or 0 (no log probabilities)", off},
      {"logit_bias", "null or {}", is_empty_or_null},
      {"user", "a string", any_string},
  };
  static const std::vector<Neutral> completions = [&] {
    std::vector<Neutral> v = common;
    v.push_back({"best_of", "1", one});
    v.push_back({"echo", "false", off});
    v.push_back({"suffix", "null or \"\"", [](const Body& s) { return s.is_null() || s == ""; }});
    return v;
  }();
  static const std::vector<Neutral> chat = [&] {
    std::vector<Neutral> v = common;
    v.push_back({"top_logprobs", "null or 0", zero});
    v.push_back({"response_format", "null or {\"type\": \"text\"}", [](const Body& f) {
                   return f.is_null() || f == Body{{"type", "text"}};
                 }});
    v.push_back({"tools", "null or [] (no tool calling)", is_empty_or_null});
    v.push_back({"tool_choice", "null, \"none\" or \"auto\" (no tools)",
                 [](const Body& c) { return c.is_null() || c == "none" || c == "auto"; }});
    v.push_back({"parallel_tool_calls", "a boolean",
                 [](const Body& p) { return p.is_null() || p.is_boolean(); }});
    v.push_back({"store", "false", off});
    v.push_back({"metadata", "an object", any_object});
    v.push_back({"service_tier", "a string", any_string});
    return v;
  }();
  return endpoint == Endpoint::kChat ? chat : completions;
}

void check_fields(const Body& body, Endpoint endpoint) {
  static const std::vector<std::string> own = {"model", "max_tokens", "temperature",
                                               "top_p", "top_k",      "seed",
                                               "stop",  "stream",     "stream_options"};
  const std::vector<Neutral>& neutral = neutral_fields(endpoint);
  for (const auto& item : body.items()) {
    const std::string& key = item.key();
    if (std::find(own.begin(), own.end(), key) != own.end()) continue;
    if (key == (endpoint == Endpoint::kChat ? "messages" : "prompt")) continue;
    if (endpoint == Endpoint::kChat && key == "max_completion_tokens") continue;
    const auto n = std::find_if(neutral.begin(), neutral.end(),
                                [&](const Neutral& f) { return key == f.field; });
    if (n == neutral.end()) {
      throw ApiError(400, key + ": unknown field (docs/serving.md lists the fields)", key);
    }
    if (!n->ok(item.value())) refuse(key, n->expected, item.value());
  }
}

/// completions' prompt: a string, token ids, or a list holding one of them.
void read_prompt(const Body& body, ApiRequest& r) {
  if (!body.contains("prompt")) refuse("prompt", "a string or an array of token ids", nullptr);
  Body p = body["prompt"];
  if (p.is_array() && p.size() == 1 && (p[0].is_string() || p[0].is_array())) p = Body(p[0]);
  if (p.is_string()) {
    r.prompt_text = p.get<std::string>();
    return;
  }
  if (!p.is_array() || p.empty()) {
    refuse("prompt", "a string or a non-empty array of token ids (one prompt per request)", p);
  }
  for (size_t i = 0; i < p.size(); ++i) {
    r.prompt_ids.push_back(integer(p[i], "prompt[" + std::to_string(i) + "]"));
  }
}

/// A message's content as text: a string, or the text of its text parts.
Body content_text(const Body& content, const std::string& field) {
  if (content.is_string() || content.is_null()) return content;
  if (!content.is_array()) refuse(field, "a string or an array of text parts", content);
  std::string out;
  for (size_t i = 0; i < content.size(); ++i) {
    const std::string part = field + "[" + std::to_string(i) + "]";
    const Body& c = content[i];
    if (!c.is_object() || c.value("type", Body()) != "text" || !c.contains("text")) {
      refuse(part, "a text part {\"type\": \"text\", \"text\": ...}", c);
    }
    out += text(c["text"], part + ".text");
  }
  return out;
}

void read_messages(const Body& body, ApiRequest& r) {
  if (!body.contains("messages")) refuse("messages", "a non-empty array of messages", nullptr);
  const Body& m = body["messages"];
  if (!m.is_array() || m.empty()) refuse("messages", "a non-empty array of messages", m);
  Body out = Body::array();
  for (size_t i = 0; i < m.size(); ++i) {
    const std::string field = "messages[" + std::to_string(i) + "]";
    if (!m[i].is_object()) refuse(field, "an object with role and content", m[i]);
    if (!m[i].contains("role")) refuse(field + ".role", "a string", nullptr);
    Body message = m[i];
    text(message["role"], field + ".role");
    if (message.contains("content")) {
      message["content"] = content_text(message["content"], field + ".content");
    }
    out.push_back(std::move(message));
  }
  r.messages_json = out.dump();
}

void read_stop(const Body& v, ApiRequest& r) {
  if (v.is_null()) return;
  const Body list = v.is_string() ? Body::array({v}) : v;
  if (!list.is_array() || list.size() > 16) refuse("stop", "a string or up to 16 strings", v);
  for (size_t i = 0; i < list.size(); ++i) {
    const std::string field = "stop[" + std::to_string(i) + "]";
    std::string s = text(list[i], field);
    if (s.empty()) refuse(field, "a non-empty string", list[i]);
    r.stop.push_back(std::move(s));
  }
}

void read_stream(const Body& body, ApiRequest& r) {
  if (body.contains("stream") && !body["stream"].is_null()) {
    if (!body["stream"].is_boolean()) refuse("stream", "a boolean", body["stream"]);
    r.stream = body["stream"].get<bool>();
  }
  if (!body.contains("stream_options") || body["stream_options"].is_null()) return;
  const Body& o = body["stream_options"];
  if (!r.stream) refuse("stream_options", "null unless stream is true", o);
  if (!o.is_object()) refuse("stream_options", "an object", o);
  for (const auto& item : o.items()) {
    if (item.key() != "include_usage") {
      refuse("stream_options." + item.key(), "no such field (include_usage only)", item.value());
    }
    if (!item.value().is_boolean())
      refuse("stream_options.include_usage", "a boolean", item.value());
    r.include_usage = item.value().get<bool>();
  }
}

void read_sampling(const Body& body, ApiRequest& r) {
  const std::string max_key =
      body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  r.max_tokens_field = max_key;
  if (body.contains(max_key) && !body[max_key].is_null()) {
    r.max_tokens = integer(body[max_key], max_key);
    if (*r.max_tokens < 1) refuse(max_key, "an integer >= 1", body[max_key]);
  }
  if (body.contains("temperature") && !body["temperature"].is_null()) {
    r.temperature = number(body["temperature"], "temperature");
    if (*r.temperature < 0)
      refuse("temperature", "a number >= 0 (0 = greedy)", body["temperature"]);
  }
  if (body.contains("top_p") && !body["top_p"].is_null()) {
    r.top_p = number(body["top_p"], "top_p");
    if (*r.top_p <= 0 || *r.top_p > 1) refuse("top_p", "a number in (0, 1]", body["top_p"]);
  }
  if (body.contains("top_k") && !body["top_k"].is_null()) {
    const int64_t k = integer(body["top_k"], "top_k");
    if (k < -1) refuse("top_k", "an integer >= 0 (0 or -1 = no filter)", body["top_k"]);
    r.top_k = std::max<int64_t>(k, 0);
  }
  if (body.contains("seed") && !body["seed"].is_null()) {
    r.seed = static_cast<uint64_t>(integer(body["seed"], "seed"));
  }
  if (body.contains("stop")) read_stop(body["stop"], r);
}

}  // namespace

std::string error_body(const ApiError& e) {
  const auto or_null = [](const std::string& s) { return s.empty() ? json(nullptr) : json(s); };
  return json{{"error",
               {{"message", e.what()},
                {"type", e.type},
                {"param", or_null(e.param)},
                {"code", or_null(e.code)}}}}
      .dump();
}

ApiRequest parse_request(Endpoint endpoint, const std::string& body_text,
                         const std::string& served_model) {
  Body body;
  try {
    body = Body::parse(body_text);
  } catch (const Body::parse_error& e) {
    throw ApiError(
        400, std::string("body: expected a JSON object but got malformed JSON (") + e.what() + ")");
  }
  if (!body.is_object()) refuse("body", "a JSON object", body);
  check_fields(body, endpoint);
  if (body.contains("model") && !body["model"].is_null()) {
    const std::string model = text(body["model"], "model");
    if (model != served_model) {
      throw ApiError(
          404, "model: expected '" + served_model + "' (GET /v1/models) but got '" + model + "'",
          "model", "invalid_request_error", "model_not_found");
    }
  }
  ApiRequest r;
  r.endpoint = endpoint;
  if (endpoint == Endpoint::kChat) {
    read_messages(body, r);
  } else {
    read_prompt(body, r);
  }
  read_stream(body, r);
  read_sampling(body, r);
  return r;
}

GenerationDefaults GenerationDefaults::load(const std::string& dir) {
  GenerationDefaults d;
  const std::filesystem::path path = std::filesystem::path(dir) / "generation_config.json";
  if (dir.empty() || !std::filesystem::exists(path)) return d;
  const json config = json::parse(std::ifstream(path), nullptr, /*allow_exceptions=*/false);
  if (!config.is_object()) throw std::runtime_error(path.string() + ": malformed JSON");
  const auto get = [&](const char* key) {
    return config.contains(key) && !config[key].is_null() ? config[key] : json();
  };
  if (get("max_new_tokens").is_number_integer()) d.max_new_tokens = get("max_new_tokens");
  if (get("do_sample") != true) {  // transformers: greedy unless do_sample
    d.temperature = 0.0;
    return d;
  }
  // Sampling: the file's values, else transformers' GenerationConfig defaults.
  d.temperature = get("temperature").is_number() ? get("temperature").get<double>() : 1.0;
  d.top_p = get("top_p").is_number() ? get("top_p").get<double>() : 1.0;
  d.top_k = get("top_k").is_number_integer() ? get("top_k").get<int64_t>() : 50;
  return d;
}

namespace {

json usage_json(const Usage& usage) {
  return {{"prompt_tokens", usage.prompt_tokens},
          {"completion_tokens", usage.completion_tokens},
          {"total_tokens", usage.prompt_tokens + usage.completion_tokens}};
}

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

json response_body(const ResponseHead& head, const std::string& out_text,
                   const std::vector<int64_t>& token_ids, const std::string& finish,
                   const Usage& usage, const std::vector<int64_t>& prompt_ids) {
  const bool chat = head.endpoint == Endpoint::kChat;
  json choice = {
      {"index", 0}, {"logprobs", nullptr}, {"finish_reason", finish}, {"token_ids", token_ids}};
  if (chat) {
    choice["message"] = {{"role", "assistant"}, {"content", out_text}};
  } else {
    choice["text"] = out_text;
  }
  json body = envelope(head, chat ? "chat.completion" : "text_completion", json::array({choice}));
  body["usage"] = usage_json(usage);
  body["prompt_token_ids"] = prompt_ids;
  return body;
}

json stream_chunk(const ResponseHead& head, const std::string& piece,
                  const std::vector<int64_t>& token_ids, bool first,
                  const std::optional<std::string>& finish) {
  const bool chat = head.endpoint == Endpoint::kChat;
  json choice = {{"index", 0},
                 {"logprobs", nullptr},
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

json models_body(const std::string& served_model, int64_t created) {
  return {{"object", "list"},
          {"data", json::array({{{"id", served_model},
                                 {"object", "model"},
                                 {"created", created},
                                 {"owned_by", "statickv"}}})}};
}

}  // namespace statickv::serve
