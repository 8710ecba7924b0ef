// statickv-serve's JSON lines (apps/serve/lines/protocol.hpp: parse_message), in
// process: a request line's fields and their refusals, a cancel line, and
// the id a refusal carries so the reply can name the request. Every
// refusal is a ProtocolError whose message reads "<field>: expected <what>
// but got <value>" (docs/serving.md, "statickv-serve").

#include "serve/fields.hpp"
#include "serve/http/request.hpp"
#include "serve/lines/protocol.hpp"

#include <catch2/catch.hpp>

#include <fstream>
#include <string>
#include <vector>

using namespace statickv::serve;
using nlohmann::json;

namespace {

/// The request field a refusal's message names: what comes before its
/// first ':', '[' or '.', or the quoted name of an unknown field.
std::string field_named(const std::string& message) {
  const std::string unknown = "request: unknown field '";
  if (message.rfind(unknown, 0) == 0) {
    return message.substr(unknown.size(), message.find('\'', unknown.size()) - unknown.size());
  }
  return message.substr(0, message.find_first_of(":[."));
}

/// Expects parse_message(line) to throw ProtocolError carrying `id`, its
/// message containing every fragment, and the field the first fragment
/// names as data.
void require_refused(const std::string& line, const json& id,
                     const std::vector<std::string>& fragments) {
  try {
    parse_message(line);
  } catch (const ProtocolError& e) {
    const std::string what = e.what();
    INFO("line: " << line << "\nmessage: " << what);
    CHECK(e.id == id);
    const std::string field = field_named(fragments.front());
    CHECK(e.field == (field == "request" ? "" : field));
    for (const std::string& fragment : fragments) CHECK(what.find(fragment) != std::string::npos);
    return;
  }
  FAIL("expected a ProtocolError for " << line);
}

}  // namespace

TEST_CASE("a request line reads its id, prompt or text, and every sampling field", "[protocol]") {
  const Message m = parse_message(
      R"({"id": "a", "prompt": [4, 5], "max_new_tokens": 3, "temperature": 0.7, "top_k": 5,
          "top_p": 0.9, "seed": 3, "stop": [2], "arrival_s": 1.5, "min_p": 0.1,
          "presence_penalty": 0.5, "frequency_penalty": 0.25, "repetition_penalty": 1.2,
          "logit_bias": {"9": -3}, "min_tokens": 1, "logprobs": 2})");
  CHECK_FALSE(m.cancel);
  CHECK(m.id == "a");
  CHECK(m.request.id == "\"a\"");
  CHECK(m.request.prompt == std::vector<int64_t>{4, 5});
  CHECK_FALSE(m.text.has_value());
  CHECK(m.request.max_new_tokens == 3);
  CHECK(m.request.sampling.temperature == 0.7);
  CHECK(m.request.sampling.top_k == 5);
  CHECK(m.request.sampling.top_p == 0.9);
  CHECK(m.request.sampling.seed == 3U);
  CHECK(m.request.stop == std::vector<int64_t>{2});
  CHECK(m.arrival_s == 1.5);
  CHECK(m.request.sampling.min_p == 0.1);
  CHECK(m.request.sampling.presence_penalty == 0.5);
  CHECK(m.request.sampling.frequency_penalty == 0.25);
  CHECK(m.request.sampling.repetition_penalty == 1.2);
  CHECK(m.request.sampling.logit_bias == std::vector<std::pair<int64_t, double>>{{9, -3.0}});
  CHECK(m.request.sampling.min_tokens == 1);
  CHECK(m.request.sampling.logprobs == 2);

  // Integer and string ids are different requests: 5 and "5".
  const Message five = parse_message(R"({"id": 5, "text": "hi", "max_new_tokens": 1})");
  CHECK(five.id == 5);
  CHECK(five.request.id == "5");
  CHECK(five.text == "hi");
  CHECK(five.request.prompt.empty());
  CHECK_FALSE(five.request.stop.has_value());  // the model's eos ids
  CHECK_FALSE(five.arrival_s.has_value());
  CHECK(parse_message(R"({"id": "5", "text": "", "max_new_tokens": 1})").request.id == "\"5\"");
}

TEST_CASE("ignore_eos stops a request only at its stop ids, none without them", "[protocol]") {
  const Message none = parse_message(R"({"id": 1, "prompt": [1], "max_new_tokens": 2,
                                         "ignore_eos": true})");
  REQUIRE(none.request.stop.has_value());
  CHECK(none.request.stop->empty());
  const Message listed = parse_message(R"({"id": 1, "prompt": [1], "max_new_tokens": 2,
                                           "ignore_eos": true, "stop": [7]})");
  CHECK(listed.request.stop == std::vector<int64_t>{7});
  const Message off = parse_message(R"({"id": 1, "prompt": [1], "max_new_tokens": 2,
                                        "ignore_eos": false})");
  CHECK_FALSE(off.request.stop.has_value());
}

TEST_CASE("a cancel line names the request alone", "[protocol]") {
  const Message m = parse_message(R"({"cancel": "a"})");
  CHECK(m.cancel);
  CHECK(m.id == "a");
  CHECK(m.request.id == "\"a\"");
  CHECK(parse_message(R"({"cancel": 7})").request.id == "7");
  require_refused(R"({"cancel": "a", "id": "a"})", "a",
                  {"cancel: expected a message with no other field"});
  require_refused(R"({"cancel": 1.5})", nullptr,
                  {"cancel: expected a string or an integer", "got 1.5"});
  require_refused(R"({"cancel": null})", nullptr, {"cancel: expected a string or an integer"});
}

TEST_CASE("a line that is not a request object is refused before its id is known", "[protocol]") {
  require_refused("{\"id\": ", nullptr,
                  {"request: expected one JSON object per line but got malformed JSON"});
  require_refused("[1]", nullptr, {"request: expected a JSON object but got [1]"});
  require_refused(R"({"prompt": [1], "max_new_tokens": 1})", nullptr,
                  {"id: expected a string or an integer but got null"});
  require_refused(R"({"id": [1], "prompt": [1], "max_new_tokens": 1})", nullptr,
                  {"id: expected a string or an integer but got [1]"});
  require_refused(R"({"id": 2.5, "prompt": [1], "max_new_tokens": 1})", nullptr,
                  {"id: expected a string or an integer but got 2.5"});
}

TEST_CASE("each bad field of a request is refused by name, carrying the request's id",
          "[protocol]") {
  const auto line = [](const std::string& fields) { return R"({"id": "r", )" + fields + "}"; };
  const std::string ok = R"("prompt": [1], "max_new_tokens": 2)";
  const std::vector<std::pair<std::string, std::vector<std::string>>> bad = {
      {ok + R"(, "tempurature": 1)", {"request: unknown field 'tempurature'", "or cancel alone"}},
      {R"("max_new_tokens": 2)", {"prompt: expected exactly one of prompt (token ids) and text"}},
      {R"("prompt": [1], "text": "a", "max_new_tokens": 2)", {"prompt: expected exactly one"}},
      {R"("prompt": "1 2", "max_new_tokens": 2)",
       {"prompt: expected an array of token ids (integers)", "got \"1 2\""}},
      {R"("prompt": [1, 2.5], "max_new_tokens": 2)", {"prompt[1]: expected an integer", "2.5"}},
      {R"("text": 3, "max_new_tokens": 2)", {"text: expected a string but got 3"}},
      {R"("prompt": [1])", {"max_new_tokens: expected an integer >= 1 but got none"}},
      {R"("prompt": [1], "max_new_tokens": "2")", {"max_new_tokens: expected an integer"}},
      {ok + R"(, "temperature": "hot")", {"temperature: expected a finite number"}},
      {ok + R"(, "top_k": 1.5)", {"top_k: expected an integer but got 1.5"}},
      {ok + R"(, "top_p": 1.5)", {"top_p: expected a number in (0, 1] but got 1.5"}},
      {ok + R"(, "top_k": -2)", {"top_k: expected an integer >= 0 (0 or -1 = no filter)"}},
      {ok + R"(, "seed": -1)", {"seed: expected an integer >= 0 but got -1"}},
      {ok + R"(, "stop": 2)", {"stop: expected an array of token ids", "got 2"}},
      {ok + R"(, "stop": [true])", {"stop[0]: expected an integer but got true"}},
      {ok + R"(, "arrival_s": -1)", {"arrival_s: expected a number >= 0", "got -1"}},
      {ok + R"(, "arrival_s": "now")", {"arrival_s: expected a finite number"}},
      {ok + R"(, "min_p": [])", {"min_p: expected a finite number but got []"}},
      {ok + R"(, "logit_bias": {"a": 1})", {"logit_bias: expected token ids", "got \"a\""}},
      {ok + R"(, "logit_bias": {"3": "x"})", {"logit_bias.3: expected a finite number"}},
      {ok + R"(, "min_tokens": 0.5)", {"min_tokens: expected an integer"}},
      {ok + R"(, "ignore_eos": 1)", {"ignore_eos: expected a boolean but got 1"}},
      {ok + R"(, "logprobs": true)", {"logprobs: expected an integer but got true"}},
  };
  for (const auto& [fields, fragments] : bad) require_refused(line(fields), "r", fragments);
}

TEST_CASE("both fronts take every sampling field of the one list, and the docs list them all",
          "[protocol]") {
  const std::vector<std::string> names = sampling_field_names();
  REQUIRE(names.size() == 11);
  // Each field, given alone on a JSON line, is read (not refused as unknown),
  // and null is the same as absent, as on HTTP.
  for (const std::string& name : names) {
    INFO(name);
    const std::string line = R"({"id": 1, "prompt": [1], "max_new_tokens": 1, ")" + name + "\": ";
    CHECK_NOTHROW(parse_message(line + "null}"));
    try {
      parse_message(line + "[[]]}");
      FAIL("a list of lists was read as " << name);
    } catch (const ProtocolError& e) {
      CHECK_THAT(e.what(), Catch::StartsWith(name + ":"));
    }
    CHECK_NOTHROW(parse_request(Endpoint::kCompletions, R"({"prompt": "x", ")" + name + "\": null}",
                                "m", /*strict=*/true));
  }
  // docs/serving.md's "Sampling fields" table has one row per field, in order.
  std::ifstream doc(STATICKV_SERVING_DOC);
  REQUIRE(doc.good());
  std::vector<std::string> documented;
  bool in_table = false;
  for (std::string line; std::getline(doc, line);) {
    if (line.rfind("### Sampling fields", 0) == 0)
      in_table = true;
    else if (in_table && line.rfind("### ", 0) == 0)
      break;
    else if (in_table && line.rfind("| `", 0) == 0) {
      documented.push_back(line.substr(3, line.find('`', 3) - 3));
    }
  }
  CHECK(documented == names);
}
