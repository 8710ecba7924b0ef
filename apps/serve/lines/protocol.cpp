// statickv-serve's JSON lines: parsing with errors that name the field, and
// the reply lines.

#include "protocol.hpp"

#include "serve/fields.hpp"

#include <cmath>
#include <cstdint>
#include <limits>
#include <set>

namespace statickv::serve {

using nlohmann::json;

namespace {

/// The request's field a refusal's label names: "prompt" for "prompt[1]",
/// "logit_bias" for "logit_bias.5"; none for the line as a whole ("request").
std::string top_level(const std::string& label) {
  return label == "request" ? std::string() : label.substr(0, label.find_first_of("[."));
}

[[noreturn]] void refuse(const std::string& field, const std::string& expected, const json& got,
                         const json& id) {
  throw ProtocolError(::statickv::json::refusal(field, expected, got), id, top_level(field));
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

/// The fields a JSON line takes besides the sampling fields (fields.hpp's list).
const std::vector<std::string>& own_fields() {
  static const std::vector<std::string> own = {"id",   "prompt",    "text",    "max_new_tokens",
                                               "stop", "arrival_s", "logprobs"};
  return own;
}

void check_fields(const json& message, const json& id) {
  static const std::vector<std::string> sampling = sampling_field_names();
  static const std::set<std::string> known = [] {
    std::set<std::string> k(own_fields().begin(), own_fields().end());
    k.insert(sampling.begin(), sampling.end());
    return k;
  }();
  static const std::string listed = [] {
    std::string l = "id, prompt or text";
    for (const std::string& f : own_fields())
      if (f != "id" && f != "prompt" && f != "text") l += ", " + f;
    for (const std::string& f : sampling) l += ", " + f;
    return l + "; or cancel alone";
  }();
  for (const auto& item : message.items()) {
    if (known.count(item.key()) == 0) {
      throw ProtocolError("request: unknown field '" + item.key() + "' (expected " + listed + ")",
                          id, item.key());
    }
  }
}

/// The request fields of a message whose id is already read.
void read_request(const json& m, Message& out) {
  const json& id = out.id;
  if (m.contains("prompt") == m.contains("text")) {
    throw ProtocolError("prompt: expected exactly one of prompt (token ids) and text", id,
                        "prompt");
  }
  if (m.contains("prompt")) out.request.prompt = integers(m["prompt"], "prompt", id);
  if (m.contains("text")) {
    if (!m["text"].is_string()) refuse("text", "a string", m["text"], id);
    out.text = m["text"].get<std::string>();
  }
  if (!m.contains("max_new_tokens")) {
    throw ProtocolError("max_new_tokens: expected an integer >= 1 but got none", id,
                        "max_new_tokens");
  }
  out.request.max_new_tokens = integer(m["max_new_tokens"], "max_new_tokens", id);
  const SamplingFields f = reader(id).read_sampling(m);
  out.request.sampling = f.values;
  if (m.contains("stop")) out.request.stop = integers(m["stop"], "stop", id);
  // ignore_eos: only the "stop" ids end it (none without them), not the model's eos ids.
  if (f.ignore_eos && !out.request.stop) out.request.stop = std::vector<int64_t>{};
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

namespace {

json reply_json(const json& id, const reference::Completion& c,
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
  return out;
}

std::string line_of(const json& out) {
  return out.dump(-1, ' ', false, json::error_handler_t::replace);
}

}  // namespace

std::string reply_line(const json& id, const reference::Completion& c,
                       const std::optional<std::string>& text) {
  return line_of(reply_json(id, c, text));
}

std::string error_line(const json& id, const std::string& error, const std::string& field) {
  reference::Completion c;
  c.finish = reference::Finish::kError;
  c.error = error;
  json out = reply_json(id, c, std::nullopt);
  if (!field.empty()) out["field"] = field;
  return line_of(out);
}

}  // namespace statickv::serve
