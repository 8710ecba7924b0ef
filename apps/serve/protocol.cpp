// statickv-serve's JSON lines: parsing with errors that name the field, and
// the reply lines.

#include "protocol.hpp"

#include "fields.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

namespace statickv::serve {

using nlohmann::json;

namespace {

[[noreturn]] void refuse(const std::string& field, const std::string& expected, const json& got,
                         const json& id) {
  throw ProtocolError(::statickv::json::refusal(field, expected, got), id);
}

/// The one field reader (fields.hpp), its refusals carrying the line's id.
RequestReader<json> reader(const json& id) {
  return RequestReader<json>([id](const std::string& field, const std::string& expected,
                                  const json& got) { refuse(field, expected, got, id); });
}

int64_t integer(const json& v, const std::string& field, const json& id) {
  return reader(id).integer(v, field);
}

std::vector<int64_t> integers(const json& v, const std::string& field, const json& id) {
  if (!v.is_array()) refuse(field, "an array of token ids (integers)", v, id);
  std::vector<int64_t> out;
  for (size_t i = 0; i < v.size(); ++i) {
    out.push_back(integer(v[i], field + "[" + std::to_string(i) + "]", id));
  }
  return out;
}

double number(const json& v, const std::string& field, const json& id) {
  return reader(id).number(v, field);
}

json checked_id(const json& v, const std::string& field) {
  if (v.is_string() || v.is_number_integer()) return v;
  refuse(field, "a string or an integer", v, nullptr);
}

json object_of(const std::string& line) {
  json message;
  try {
    message = json::parse(line);
  } catch (const json::parse_error& e) {
    throw ProtocolError(std::string("request: expected one JSON object per line but got "
                                    "malformed JSON (") +
                            e.what() + ")",
                        nullptr);
  }
  if (!message.is_object()) refuse("request", "a JSON object", message, nullptr);
  return message;
}

void check_fields(const json& message, const json& id) {
  static const std::set<std::string> known = {"id",
                                              "prompt",
                                              "text",
                                              "max_new_tokens",
                                              "temperature",
                                              "top_k",
                                              "top_p",
                                              "seed",
                                              "stop",
                                              "arrival_s",
                                              "min_p",
                                              "presence_penalty",
                                              "frequency_penalty",
                                              "repetition_penalty",
                                              "logit_bias",
                                              "min_tokens",
                                              "ignore_eos",
                                              "logprobs"};
  for (const auto& item : message.items()) {
    if (known.count(item.key()) == 0) {
      throw ProtocolError("request: unknown field '" + item.key() +
                              "' (expected id, prompt or text, max_new_tokens, temperature, "
                              "top_k, top_p, seed, stop, arrival_s, min_p, presence_penalty, "
                              "frequency_penalty, repetition_penalty, logit_bias, min_tokens, "
                              "ignore_eos, logprobs; or cancel alone)",
                          id);
    }
  }
}

/// The request fields of a message whose id is already read.
void read_request(const json& m, Message& out) {
  const json& id = out.id;
  if (m.contains("prompt") == m.contains("text")) {
    throw ProtocolError("prompt: expected exactly one of prompt (token ids) and text", id);
  }
  if (m.contains("prompt")) out.request.prompt = integers(m["prompt"], "prompt", id);
  if (m.contains("text")) {
    if (!m["text"].is_string()) refuse("text", "a string", m["text"], id);
    out.text = m["text"].get<std::string>();
  }
  if (!m.contains("max_new_tokens")) {
    throw ProtocolError("max_new_tokens: expected an integer >= 1 but got none", id);
  }
  out.request.max_new_tokens = integer(m["max_new_tokens"], "max_new_tokens", id);
  if (m.contains("temperature")) {
    out.request.sampling.temperature = number(m["temperature"], "temperature", id);
  }
  if (m.contains("top_k")) out.request.sampling.top_k = integer(m["top_k"], "top_k", id);
  if (m.contains("top_p")) out.request.sampling.top_p = number(m["top_p"], "top_p", id);
  if (m.contains("seed")) {
    const int64_t seed = integer(m["seed"], "seed", id);
    if (seed < 0) refuse("seed", "an integer >= 0", m["seed"], id);
    out.request.sampling.seed = static_cast<uint64_t>(seed);
  }
  if (m.contains("stop")) out.request.stop = integers(m["stop"], "stop", id);
  // ignore_eos: only the "stop" ids end it (none without them), not the model's eos ids.
  const bool ignore_eos = reader(id).read_head_fields(m, out.request.sampling);
  if (ignore_eos && !out.request.stop) out.request.stop = std::vector<int64_t>{};
  if (m.contains("logprobs"))
    out.request.sampling.logprobs = integer(m["logprobs"], "logprobs", id);
  if (m.contains("arrival_s")) {
    const double t = number(m["arrival_s"], "arrival_s", id);
    if (t < 0)
      refuse("arrival_s", "a number >= 0 (seconds from the server's start)", m["arrival_s"], id);
    out.arrival_s = t;
  }
}

}  // namespace

Message parse_message(const std::string& line) {
  const json m = object_of(line);
  Message out;
  if (m.contains("cancel")) {
    out.id = checked_id(m["cancel"], "cancel");
    if (m.size() != 1) refuse("cancel", "a message with no other field", m, out.id);
    out.cancel = true;
    out.request.id = out.id.dump();
    return out;
  }
  if (!m.contains("id")) refuse("id", "a string or an integer", nullptr, nullptr);
  out.id = checked_id(m["id"], "id");
  out.request.id = out.id.dump();
  check_fields(m, out.id);
  read_request(m, out);
  return out;
}

std::string reply_line(const json& id, const reference::Completion& c,
                       const std::optional<std::string>& text) {
  json out = {{"id", id},
              {"tokens", c.tokens},
              {"finish", reference::to_string(c.finish)},
              {"queue_s", c.stats.queue_seconds},
              {"ttft_s", c.stats.ttft_seconds},
              {"decode_tokens_per_s", c.stats.decode_tokens_per_second}};
  if (c.finish == reference::Finish::kError) out["error"] = c.error;
  if (text) out["text"] = *text;
  if (!c.logprobs.empty()) {
    json list = json::array();
    for (const reference::TokenLogprob& p : c.logprobs) {
      list.push_back({{"token", p.token}, {"logprob", p.logprob}, {"top", p.top}});
    }
    out["logprobs"] = std::move(list);
  }
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

std::string error_line(const json& id, const std::string& error) {
  reference::Completion c;
  c.finish = reference::Finish::kError;
  c.error = error;
  return reply_line(id, c);
}

}  // namespace statickv::serve
