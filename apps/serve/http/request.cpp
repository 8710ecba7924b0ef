// OpenAI-compatible request parsing (request.hpp).

#include "request.hpp"

#include "serve/fields.hpp"

#include <statickv/json/file.hpp>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <functional>
#include <map>

namespace statickv::serve {

using nlohmann::json;
// Request bodies keep their keys' order: a chat template may print a message
// whole (| tojson), and transformers' keeps the client's order.
using Body = nlohmann::ordered_json;

namespace {

[[noreturn]] void refuse(const std::string& field, const std::string& expected, const Body& got) {
  throw ApiError(400, ::statickv::json::refusal(field, expected, got), field);
}

const RequestReader<Body>& reader() {
  static const RequestReader<Body> r([](const std::string& field, const std::string& expected,
                                        const Body& got) { refuse(field, expected, got); });
  return r;
}

int64_t integer(const Body& v, const std::string& field) { return reader().integer(v, field); }
std::string text(const Body& v, const std::string& field) { return reader().text(v, field); }
bool given(const Body& body, const std::string& key) {
  return RequestReader<Body>::given(body, key);
}

Body parsed_object(const std::string& body_text) {
  Body body;
  try {
    body = Body::parse(body_text);
  } catch (const Body::parse_error& e) {
    throw ApiError(
        400, std::string("body: expected a JSON object but got malformed JSON (") + e.what() + ")");
  }
  if (!body.is_object()) refuse("body", "a JSON object", body);
  return body;
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
  static const auto any_string = [](const Body& v) { return v.is_null() || v.is_string(); };
  static const auto any_object = [](const Body& v) { return v.is_null() || v.is_object(); };
  static const auto any_boolean = [](const Body& v) { return v.is_null() || v.is_boolean(); };
  // Bookkeeping: stored nowhere, changes nothing in the answer.
  static const std::vector<Neutral> common = {
      {"user", "a string", any_string},
      {"metadata", "an object", any_object},
      {"store", "a boolean", any_boolean},
      {"service_tier", "a string", any_string},
  };
  static const std::vector<Neutral> completions = [&] {
    std::vector<Neutral> v = common;
    v.push_back({"best_of", "null or 1 (no server-side ranking)",
                 [](const Body& b) { return b.is_null() || b == 1; }});
    v.push_back({"suffix", "null or \"\"", [](const Body& s) { return s.is_null() || s == ""; }});
    return v;
  }();
  static const std::vector<Neutral> chat = [&] {
    std::vector<Neutral> v = common;
    v.push_back({"response_format", "null or {\"type\": \"text\"}", [](const Body& f) {
                   return f.is_null() || f == Body{{"type", "text"}};
                 }});
    v.push_back({"tools", "null or [] (no tool calling)", is_empty_or_null});
    v.push_back({"tool_choice", "null, \"none\" or \"auto\" (no tools)",
                 [](const Body& c) { return c.is_null() || c == "none" || c == "auto"; }});
    v.push_back({"parallel_tool_calls", "a boolean", any_boolean});
    return v;
  }();
  return endpoint == Endpoint::kChat ? chat : completions;
}

/// The fields each endpoint reads (besides the neutral ones).
bool is_read(const std::string& key, Endpoint endpoint) {
  static const std::vector<std::string> sampling = sampling_field_names();
  static const std::vector<std::string> both = {"model", "max_tokens", "max_completion_tokens",
                                                "stop",  "stream",     "stream_options",
                                                "n",     "logprobs"};
  static const std::vector<std::string> completions = {"prompt", "echo"};
  static const std::vector<std::string> chat = {"messages", "top_logprobs"};
  const auto has = [&](const std::vector<std::string>& v) {
    return std::find(v.begin(), v.end(), key) != v.end();
  };
  return has(sampling) || has(both) || has(endpoint == Endpoint::kChat ? chat : completions);
}

/// Neutral fields at another value are refused; unknown ones are ignored
/// (recorded in r.ignored) or, strict, refused.
void check_fields(const Body& body, Endpoint endpoint, bool strict, ApiRequest& r) {
  const std::vector<Neutral>& neutral = neutral_fields(endpoint);
  for (const auto& item : body.items()) {
    const std::string& key = item.key();
    if (is_read(key, endpoint)) continue;
    const auto n = std::find_if(neutral.begin(), neutral.end(),
                                [&](const Neutral& f) { return key == f.field; });
    if (n != neutral.end()) {
      if (!n->ok(item.value())) refuse(key, n->expected, item.value());
      continue;
    }
    if (strict) {
      throw ApiError(
          400, key + ": unknown field (--strict-fields; docs/serving.md lists the fields)", key);
    }
    r.ignored.push_back(key);
  }
}

/// completions' prompt: a string, token ids, or a non-empty list of strings
/// or of token-id lists (one choice each).
void read_prompt(const Body& body, ApiRequest& r) {
  if (!body.contains("prompt")) refuse("prompt", "a string or an array of token ids", nullptr);
  const Body& p = body["prompt"];
  const char* expected =
      "a string, a non-empty array of token ids, or a non-empty list of strings or of token-id "
      "arrays";
  if (p.is_string()) {
    r.prompts.push_back({p.get<std::string>(), {}});
    return;
  }
  if (!p.is_array() || p.empty()) refuse("prompt", expected, p);
  const auto ids = [&](const Body& list, const std::string& field) {
    PromptIn in;
    if (!list.is_array() || list.empty()) refuse(field, "a non-empty array of token ids", list);
    for (size_t i = 0; i < list.size(); ++i) {
      in.ids.push_back(integer(list[i], field + "[" + std::to_string(i) + "]"));
    }
    return in;
  };
  if (!p[0].is_string() && !p[0].is_array()) {
    r.prompts.push_back(ids(p, "prompt"));
    return;
  }
  for (size_t i = 0; i < p.size(); ++i) {
    const std::string field = "prompt[" + std::to_string(i) + "]";
    if (p[i].is_string()) {
      r.prompts.push_back({p[i].get<std::string>(), {}});
    } else if (p[i].is_array()) {
      r.prompts.push_back(ids(p[i], field));
    } else {
      refuse(field, "a string or an array of token ids (as prompt[0] is)", p[i]);
    }
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

void read_stream(const Body& body, bool strict, ApiRequest& r) {
  if (given(body, "stream")) r.stream = reader().boolean(body["stream"], "stream");
  if (!given(body, "stream_options")) return;
  const Body& o = body["stream_options"];
  if (!r.stream) refuse("stream_options", "null unless stream is true", o);
  if (!o.is_object()) refuse("stream_options", "an object", o);
  for (const auto& item : o.items()) {
    const std::string field = "stream_options." + item.key();
    if (item.key() == "include_usage") {
      r.include_usage = reader().boolean(item.value(), field);
    } else if (item.key() == "continuous_usage_stats") {
      r.continuous_usage = reader().boolean(item.value(), field);
    } else if (strict) {
      refuse(field, "no such field (include_usage, continuous_usage_stats)", item.value());
    } else {
      r.ignored.push_back(field);
    }
  }
}

/// n, logprobs (completions: 0..20; chat: logprobs true with top_logprobs
/// 0..20) and echo.
void read_choices(const Body& body, ApiRequest& r) {
  if (given(body, "n")) {
    r.n = integer(body["n"], "n");
    if (r.n < 1) refuse("n", "an integer >= 1", body["n"]);
  }
  const auto alternatives = [&](const Body& v, const std::string& field) {
    const int64_t k = integer(v, field);
    if (k < 0 || k > reference::kMaxLogprobs) {
      refuse(field, "an integer 0.." + std::to_string(reference::kMaxLogprobs), v);
    }
    return k;
  };
  if (r.endpoint == Endpoint::kCompletions) {
    if (given(body, "logprobs")) {
      // false and true are what some clients send for "none" and "the token's".
      const Body& v = body["logprobs"];
      if (v.is_boolean()) {
        if (v.get<bool>()) r.logprobs = 0;
      } else {
        r.logprobs = alternatives(v, "logprobs");
      }
    }
    if (given(body, "echo")) r.echo = reader().boolean(body["echo"], "echo");
    return;
  }
  const bool asked = given(body, "logprobs") && reader().boolean(body["logprobs"], "logprobs");
  if (given(body, "top_logprobs")) {
    const int64_t k = alternatives(body["top_logprobs"], "top_logprobs");
    if (!asked) refuse("top_logprobs", "null unless logprobs is true", body["top_logprobs"]);
    r.logprobs = k;
  } else if (asked) {
    r.logprobs = 0;
  }
}

void read_sampling(const Body& body, ApiRequest& r) {
  const std::string max_key =
      body.contains("max_completion_tokens") ? "max_completion_tokens" : "max_tokens";
  r.max_tokens_field = max_key;
  if (given(body, max_key)) {
    r.max_tokens = integer(body[max_key], max_key);
    if (*r.max_tokens < (r.echo ? 0 : 1)) {
      refuse(max_key,
             r.echo ? "an integer >= 0 (0 with echo: the prompt scored alone)"
                    : "an integer >= 1 (0 only with echo)",
             body[max_key]);
    }
  }
  const SamplingFields f = reader().read_sampling(body);
  r.temperature = f.temperature, r.top_p = f.top_p, r.top_k = f.top_k, r.seed = f.seed;
  // The head's own fields (min_p, penalties, logit_bias, min_tokens): the
  // plan (plan.cpp) sets temperature, top_p, top_k and seed itself.
  const reference::Sampling neutral;
  r.head = f.values;
  r.head.temperature = neutral.temperature, r.head.top_p = neutral.top_p;
  r.head.top_k = neutral.top_k, r.head.seed = neutral.seed;
  r.ignore_eos = f.ignore_eos;
  if (body.contains("stop")) read_stop(body["stop"], r);
}

}  // namespace

ApiRequest parse_request(Endpoint endpoint, const std::string& body_text,
                         const std::string& served_model, bool strict) {
  const Body body = parsed_object(body_text);
  ApiRequest r;
  r.endpoint = endpoint;
  check_fields(body, endpoint, strict, r);
  if (given(body, "model")) {
    const std::string model = text(body["model"], "model");
    if (model != served_model) {
      throw ApiError(
          404, "model: expected '" + served_model + "' (GET /v1/models) but got '" + model + "'",
          "model", "invalid_request_error", "model_not_found");
    }
  }
  if (endpoint == Endpoint::kChat) {
    read_messages(body, r);
  } else {
    read_prompt(body, r);
  }
  read_stream(body, strict, r);
  read_choices(body, r);
  read_sampling(body, r);
  if (r.stream && r.echo && r.logprobs) {
    refuse("echo", "false with stream and logprobs (a prompt's log-probabilities are not streamed)",
           body["echo"]);
  }
  return r;
}

TokenizeRequest parse_tokenize(const std::string& body_text) {
  const Body body = parsed_object(body_text);
  TokenizeRequest r;
  if (given(body, "prompt") == given(body, "messages")) {
    refuse("prompt", "exactly one of prompt (a string) and messages", body);
  }
  if (given(body, "prompt")) r.prompt = text(body["prompt"], "prompt");
  if (given(body, "messages")) {
    ApiRequest chat;
    read_messages(body, chat);
    r.messages_json = chat.messages_json;
  }
  if (given(body, "add_special_tokens")) {
    r.add_special_tokens = reader().boolean(body["add_special_tokens"], "add_special_tokens");
  }
  return r;
}

std::vector<int64_t> parse_detokenize(const std::string& body_text) {
  const Body body = parsed_object(body_text);
  if (!given(body, "tokens") || !body["tokens"].is_array()) {
    refuse("tokens", "an array of token ids", body.value("tokens", Body()));
  }
  std::vector<int64_t> ids;
  for (size_t i = 0; i < body["tokens"].size(); ++i) {
    ids.push_back(integer(body["tokens"][i], "tokens[" + std::to_string(i) + "]"));
  }
  return ids;
}

GenerationDefaults GenerationDefaults::load(const std::string& dir) {
  GenerationDefaults d;
  const std::filesystem::path path = std::filesystem::path(dir) / "generation_config.json";
  if (dir.empty() || !std::filesystem::exists(path)) return d;
  const json config =
      ::statickv::json::read_json_file(path.string(), ::statickv::json::fail_with_runtime_error);
  // A field of the wrong type is refused, naming it: a silent default
  // would serve other answers than transformers' generate.
  const ::statickv::json::FieldReader<json> read(
      [&](const std::string& field, const std::string& expected, const json& got) {
        throw std::runtime_error(path.string() + ": " +
                                 ::statickv::json::refusal(field, expected, got));
      });
  const auto given = [&](const char* key) { return read.given(config, key); };
  if (given("max_new_tokens")) {
    d.max_new_tokens = read.integer(config["max_new_tokens"], "max_new_tokens");
  }
  if (!given("do_sample") || !read.boolean(config["do_sample"], "do_sample")) {
    d.temperature = 0.0;  // greedy unless do_sample
    return d;
  }
  // Sampling: the file's values, else transformers' GenerationConfig defaults.
  d.temperature = given("temperature") ? read.number(config["temperature"], "temperature") : 1.0;
  d.top_p = given("top_p") ? read.number(config["top_p"], "top_p") : 1.0;
  d.top_k = given("top_k") ? read.integer(config["top_k"], "top_k") : 50;
  return d;
}

}  // namespace statickv::serve
