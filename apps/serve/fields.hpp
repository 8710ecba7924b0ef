#pragma once
// statickv-serve's reads of JSON request fields, shared by the JSON lines
// (lines/protocol.cpp) and the HTTP API (http/request.cpp): the project's one field
// reader (statickv/json/field_reader.hpp) and the one list of the sampling
// fields both front ends take alike (RequestReader::fields(); docs/serving.md,
// "Sampling fields"). `Json` is nlohmann::json or nlohmann::ordered_json.

#include <statickv/json/field_reader.hpp>
#include <statickv/sampling/sampling.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

namespace statickv::serve {

/// The sampling fields of one request as its body gave them.
struct SamplingFields {
  reference::Sampling values;  ///< the given fields set, the rest at Sampling's defaults
  /// The fields whose default is the server's to choose (HTTP takes the
  /// checkpoint's generation defaults): set only when given.
  std::optional<double> temperature, top_p;
  std::optional<int64_t> top_k;
  std::optional<uint64_t> seed;
  bool ignore_eos = false;  ///< the model's eos ids do not end the request
};

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

  /// Every sampling field of `body` (the list is sampling_fields()):
  /// absent or null is not given. What a field alone can refuse is refused
  /// here, naming it; the rest is the head's to refuse (check_sampling).
  SamplingFields read_sampling(const Json& body) const {
    SamplingFields out;
    for (const Field& f : fields()) {
      if (!given(body, f.name)) continue;
      f.read(*this, body[f.name], f.name, out);
    }
    return out;
  }

  /// One sampling field: its name, spelled here once, and its reader.
  struct Field {
    const char* name;
    void (*read)(const RequestReader&, const Json& v, const std::string& name, SamplingFields& out);
  };

  /// The sampling fields both fronts take (docs/serving.md, "Sampling
  /// fields"): the one list of them.
  static const std::vector<Field>& fields() {
    using R = RequestReader;
    using S = SamplingFields;
    static const std::vector<Field> list = {
        {"temperature",
         [](const R& r, const Json& v, const std::string& n, S& o) {
           o.temperature = o.values.temperature = r.number(v, n);
           if (*o.temperature < 0) r.refuse(n, "a number >= 0 (0 = greedy)", v);
         }},
        {"top_p",
         [](const R& r, const Json& v, const std::string& n, S& o) {
           o.top_p = o.values.top_p = r.number(v, n);
           if (*o.top_p <= 0 || *o.top_p > 1) r.refuse(n, "a number in (0, 1]", v);
         }},
        {"top_k",
         [](const R& r, const Json& v, const std::string& n, S& o) {
           const int64_t k = r.integer(v, n);
           if (k < -1) r.refuse(n, "an integer >= 0 (0 or -1 = no filter)", v);
           o.top_k = o.values.top_k = std::max<int64_t>(k, 0);
         }},
        {"seed",
         [](const R& r, const Json& v, const std::string& n, S& o) {
           const int64_t seed = r.integer(v, n);
           if (seed < 0) r.refuse(n, "an integer >= 0", v);
           o.seed = o.values.seed = static_cast<uint64_t>(seed);
         }},
        {"min_p", [](const R& r, const Json& v, const std::string& n,
                     S& o) { o.values.min_p = r.number(v, n); }},
        {"repetition_penalty", [](const R& r, const Json& v, const std::string& n,
                                  S& o) { o.values.repetition_penalty = r.number(v, n); }},
        {"presence_penalty", [](const R& r, const Json& v, const std::string& n,
                                S& o) { o.values.presence_penalty = r.number(v, n); }},
        {"frequency_penalty", [](const R& r, const Json& v, const std::string& n,
                                 S& o) { o.values.frequency_penalty = r.number(v, n); }},
        {"logit_bias", [](const R& r, const Json& v, const std::string&,
                          S& o) { o.values.logit_bias = r.logit_bias(v); }},
        {"min_tokens", [](const R& r, const Json& v, const std::string& n,
                          S& o) { o.values.min_tokens = r.integer(v, n); }},
        {"ignore_eos", [](const R& r, const Json& v, const std::string& n,
                          S& o) { o.ignore_eos = r.boolean(v, n); }},
    };
    return list;
  }
};

/// The sampling fields' names, in the list's order: what each front's
/// known-field check and its documentation take from the one list.
inline std::vector<std::string> sampling_field_names() {
  std::vector<std::string> names;
  for (const auto& f : RequestReader<nlohmann::json>::fields()) names.emplace_back(f.name);
  return names;
}

}  // namespace statickv::serve
