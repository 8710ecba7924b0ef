#pragma once
// statickv-serve's reads of JSON request fields, shared by the JSON lines
// (protocol.cpp) and the HTTP API (openai.cpp): the project's one field
// reader (statickv/json/field_reader.hpp) and the sampling head's fields
// both front ends take alike (docs/serving.md). `Json` is nlohmann::json or
// nlohmann::ordered_json.

#include <statickv/json/field_reader.hpp>
#include <statickv/reference/sampling.hpp>

#include <cmath>
#include <cstdint>
#include <functional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace statickv::serve {

/// statickv::json::FieldReader (the one field reader) plus the fields both
/// front ends read alike.
template <class Json>
class RequestReader : public ::statickv::json::FieldReader<Json> {
 public:
  using Base = ::statickv::json::FieldReader<Json>;
  using Base::Base;
  using Base::boolean;
  using Base::given;
  using Base::integer;
  using Base::number;
  using Base::refuse;

  /// OpenAI's logit_bias: {"<token id>": bias, ...} (ids as decimal strings).
  std::vector<std::pair<int64_t, double>> logit_bias(const Json& v) const {
    if (!v.is_object()) refuse("logit_bias", "an object of token ids to biases", v);
    std::vector<std::pair<int64_t, double>> out;
    for (const auto& item : v.items()) {
      const std::string field = "logit_bias." + item.key();
      size_t used = 0;
      int64_t id = -1;
      try {
        id = std::stoll(item.key(), &used);
      } catch (const std::exception&) {
        used = 0;
      }
      if (used == 0 || used != item.key().size() || id < 0) {
        refuse("logit_bias", "token ids (decimal strings) as keys", Json(item.key()));
      }
      out.emplace_back(id, number(item.value(), field));
    }
    return out;
  }

  /// The head's fields (docs/sampling.md) both front ends take: min_p,
  /// repetition, presence and frequency penalties, logit_bias, min_tokens.
  /// Absent or null leaves `s` as it is; their ranges are the head's to
  /// refuse (check_sampling, naming the field). Returns ignore_eos.
  bool read_head_fields(const Json& body, reference::Sampling& s) const {
    if (given(body, "min_p")) s.min_p = number(body["min_p"], "min_p");
    if (given(body, "repetition_penalty")) {
      s.repetition_penalty = number(body["repetition_penalty"], "repetition_penalty");
    }
    if (given(body, "presence_penalty")) {
      s.presence_penalty = number(body["presence_penalty"], "presence_penalty");
    }
    if (given(body, "frequency_penalty")) {
      s.frequency_penalty = number(body["frequency_penalty"], "frequency_penalty");
    }
    if (given(body, "logit_bias")) s.logit_bias = logit_bias(body["logit_bias"]);
    if (given(body, "min_tokens")) s.min_tokens = integer(body["min_tokens"], "min_tokens");
    return given(body, "ignore_eos") && boolean(body["ignore_eos"], "ignore_eos");
  }
};

}  // namespace statickv::serve
