#pragma once
// statickv-serve's protocol: one JSON object per line on stdin, one per
// finished request on stdout (docs/serving.md, "statickv-serve").
//
//   in:  {"id": <string or integer>, "prompt": [ids...] | "text": "...",
//         "max_new_tokens": N, "stop": [ids...], "arrival_s": T, "logprobs": N,
//         and the sampling fields of fields.hpp's one list}
//                                          (all but id, prompt/text and
//                                           max_new_tokens optional)
//        {"cancel": <id>}
//   out: {"id": ..., "tokens": [...], "finish": "length"|"stop"|"cancelled"|"error",
//         "queue_s": ..., "ttft_s": ..., "decode_tokens_per_s": ...,
//         "error": "..." and "field": "..." (rejected only; field: the request's
//         field at fault, when one is), "text": "..." (with a tokenizer),
//         "logprobs": [{"token", "logprob", "top": [[id, logprob], ...]}] (asked only)}
//
// A line that is not such an object throws ProtocolError naming the field,
// with the id when it could be read, so the reply can carry it.

#include <statickv/engine/scheduler.hpp>

#include <nlohmann/json.hpp>

#include <optional>
#include <stdexcept>
#include <string>

namespace statickv::serve {

/// A line the protocol refuses; id is the request's id (null when unknown).
class ProtocolError : public std::invalid_argument {
 public:
  ProtocolError(const std::string& what, nlohmann::json id, std::string field = "")
      : std::invalid_argument(what), id(std::move(id)), field(std::move(field)) {}
  nlohmann::json id;
  std::string field;  ///< the request's field at fault ("": the line as a whole)
};

/// One input line, parsed.
struct Message {
  nlohmann::json id;  ///< as the client wrote it (string or integer)
  bool cancel = false;
  reference::Request request;       ///< request.id is id.dump(): 5 and "5" differ
  std::optional<std::string> text;  ///< "text" instead of "prompt"
  std::optional<double> arrival_s;  ///< replay offset from the server's start
};

/// Parses one line (throws ProtocolError naming the field).
Message parse_message(const std::string& line);

/// The reply line of a finished request (text: with a tokenizer).
std::string reply_line(const nlohmann::json& id, const reference::Completion& c,
                       const std::optional<std::string>& text = std::nullopt);

/// The reply line of a rejected request; `field` (when not empty) names the
/// request's field at fault as data, beside the message.
std::string error_line(const nlohmann::json& id, const std::string& error,
                       const std::string& field = "");

}  // namespace statickv::serve
