// statickv-serve --http's request parser (apps/serve/http/request.hpp:
// parse_request, parse_tokenize, parse_detokenize) and its response shapes
// (response.hpp), in process: every field
// docs/serving.md ("HTTP API", "Field policy") lists, at the values it takes
// and at each it refuses. A refusal is an ApiError whose status is 400 (404
// for another model), whose param is the field, and whose message reads
// "<field>: expected <what> but got <value>".

#include "serve/http/request.hpp"
#include "serve/http/response.hpp"

#include <catch2/catch.hpp>

#include <string>
#include <utility>
#include <vector>

using namespace statickv::serve;

namespace {

const std::string kModel = "tiny";

ApiRequest completions(const std::string& body, bool strict = false) {
  return parse_request(Endpoint::kCompletions, body, kModel, strict);
}
ApiRequest chat(const std::string& body, bool strict = false) {
  return parse_request(Endpoint::kChat, body, kModel, strict);
}

/// Expects `fn` to throw ApiError with `status` and `param`, its message
/// containing every fragment.
template <typename Fn>
void require_api_error(Fn&& fn, int status, const std::string& param,
                       const std::vector<std::string>& fragments) {
  try {
    fn();
  } catch (const ApiError& e) {
    const std::string what = e.what();
    INFO("message: " << what);
    CHECK(e.status == status);
    CHECK(e.param == param);
    for (const std::string& fragment : fragments) CHECK(what.find(fragment) != std::string::npos);
    return;
  }
  FAIL("expected an ApiError naming " << param);
}

/// A 400 naming `field`, its message "<field>: expected ..." plus `fragments`.
template <typename Fn>
void require_refused(Fn&& fn, const std::string& field, std::vector<std::string> fragments) {
  fragments.insert(fragments.begin(), field + ": expected ");
  require_api_error(std::forward<Fn>(fn), 400, field, fragments);
}

}  // namespace

TEST_CASE("a completions body with only a prompt leaves every other field at its default",
          "[openai]") {
  const ApiRequest r = completions(R"({"prompt": "Hello"})");
  CHECK(r.endpoint == Endpoint::kCompletions);
  REQUIRE(r.prompts.size() == 1);
  CHECK(r.prompts[0].text == "Hello");
  CHECK(r.prompts[0].ids.empty());
  CHECK_FALSE(r.max_tokens.has_value());
  CHECK(r.max_tokens_field == "max_tokens");
  CHECK_FALSE(r.temperature.has_value());
  CHECK_FALSE(r.top_p.has_value());
  CHECK_FALSE(r.top_k.has_value());
  CHECK_FALSE(r.seed.has_value());
  CHECK(r.n == 1);
  CHECK_FALSE(r.logprobs.has_value());
  CHECK_FALSE(r.echo);
  CHECK(r.stop.empty());
  CHECK_FALSE(r.stream);
  CHECK_FALSE(r.include_usage);
  CHECK_FALSE(r.continuous_usage);
  CHECK_FALSE(r.ignore_eos);
  CHECK(r.ignored.empty());
  CHECK(r.head.min_p == 0.0);
  CHECK(r.head.logit_bias.empty());
  CHECK(r.head.min_tokens == 0);
  // null is absent.
  const ApiRequest nulls = completions(
      R"({"prompt": "x", "max_tokens": null, "temperature": null, "n": null, "stop": null,
          "logprobs": null, "stream": null, "seed": null, "model": null})");
  CHECK_FALSE(nulls.max_tokens.has_value());
  CHECK_FALSE(nulls.temperature.has_value());
  CHECK(nulls.n == 1);
  CHECK(nulls.stop.empty());
  CHECK_FALSE(nulls.logprobs.has_value());
}

TEST_CASE("a completions body reads every field it documents", "[openai]") {
  const ApiRequest r = completions(R"({
      "model": "tiny", "prompt": "Hello", "max_tokens": 7, "temperature": 0.5, "top_p": 0.9,
      "top_k": 40, "seed": 11, "stop": ["\n", "END"], "n": 2, "logprobs": 3, "echo": true,
      "min_p": 0.05, "presence_penalty": 0.5, "frequency_penalty": -0.5,
      "repetition_penalty": 1.1, "logit_bias": {"5": -100, "7": 2.5}, "min_tokens": 2,
      "ignore_eos": true})");
  CHECK(r.max_tokens == 7);
  CHECK(r.temperature == 0.5);
  CHECK(r.top_p == 0.9);
  CHECK(r.top_k == 40);
  CHECK(r.seed == 11U);
  CHECK(r.stop == std::vector<std::string>{"\n", "END"});
  CHECK(r.n == 2);
  CHECK(r.logprobs == 3);
  CHECK(r.echo);
  CHECK(r.head.min_p == 0.05);
  CHECK(r.head.presence_penalty == 0.5);
  CHECK(r.head.frequency_penalty == -0.5);
  CHECK(r.head.repetition_penalty == 1.1);
  CHECK(r.head.logit_bias == std::vector<std::pair<int64_t, double>>{{5, -100.0}, {7, 2.5}});
  CHECK(r.head.min_tokens == 2);
  CHECK(r.ignore_eos);
  CHECK(r.ignored.empty());
  // top_k -1 means no filter, as 0 does.
  CHECK(completions(R"({"prompt": "x", "top_k": -1})").top_k == 0);
  CHECK(completions(R"({"prompt": "x", "top_k": 0})").top_k == 0);
  CHECK(completions(R"({"prompt": "x", "temperature": 0})").temperature == 0.0);
  CHECK(completions(R"({"prompt": "x", "top_p": 1})").top_p == 1.0);
  CHECK(completions(R"({"prompt": "x", "ignore_eos": false})").ignore_eos == false);
}

TEST_CASE("a completions prompt is a string, token ids, or a list of either", "[openai]") {
  const ApiRequest ids = completions(R"({"prompt": [1, 2, 3]})");
  REQUIRE(ids.prompts.size() == 1);
  CHECK_FALSE(ids.prompts[0].text.has_value());
  CHECK(ids.prompts[0].ids == std::vector<int64_t>{1, 2, 3});
  const ApiRequest texts = completions(R"({"prompt": ["a", "b"]})");
  REQUIRE(texts.prompts.size() == 2);
  CHECK(texts.prompts[0].text == "a");
  CHECK(texts.prompts[1].text == "b");
  const ApiRequest lists = completions(R"({"prompt": [[4, 5], [6]]})");
  REQUIRE(lists.prompts.size() == 2);
  CHECK(lists.prompts[0].ids == std::vector<int64_t>{4, 5});
  CHECK(lists.prompts[1].ids == std::vector<int64_t>{6});
  const ApiRequest mixed = completions(R"({"prompt": ["a", [7]]})");
  REQUIRE(mixed.prompts.size() == 2);
  CHECK(mixed.prompts[0].text == "a");
  CHECK(mixed.prompts[1].ids == std::vector<int64_t>{7});
  CHECK(completions(R"({"prompt": ""})").prompts[0].text == "");

  require_refused([] { completions(R"({"max_tokens": 3})"); }, "prompt",
                  {"a string or an array of token ids", "but got null"});
  require_refused([] { completions(R"({"prompt": []})"); }, "prompt", {"non-empty", "got []"});
  require_refused([] { completions(R"({"prompt": 5})"); }, "prompt", {"got 5"});
  require_refused([] { completions(R"({"prompt": {"a": 1}})"); }, "prompt", {"got {\"a\":1}"});
  require_refused([] { completions(R"({"prompt": [1, 2.5]})"); }, "prompt[1]",
                  {"an integer", "got 2.5"});
  require_refused([] { completions(R"({"prompt": [1, "a"]})"); }, "prompt[1]",
                  {"an integer", "got \"a\""});
  require_refused([] { completions(R"({"prompt": [1, 9223372036854775808]})"); }, "prompt[1]",
                  {"an integer", "got 9223372036854775808"});
  require_refused([] { completions(R"({"prompt": ["a", 3]})"); }, "prompt[1]",
                  {"a string or an array of token ids (as prompt[0] is)", "got 3"});
  require_refused([] { completions(R"({"prompt": [[1], []]})"); }, "prompt[1]",
                  {"a non-empty array of token ids", "got []"});
  require_refused([] { completions(R"({"prompt": [[1, true]]})"); }, "prompt[0][1]",
                  {"an integer", "got true"});
}

TEST_CASE("chat messages keep the client's keys and order, content parts flattened to text",
          "[openai]") {
  const ApiRequest r = chat(R"({"messages": [
      {"role": "system", "content": "Be brief.", "name": "rules"},
      {"content": [{"type": "text", "text": "Hi "}, {"type": "text", "text": "there"}],
       "role": "user"},
      {"role": "assistant", "content": null}]})");
  CHECK(r.endpoint == Endpoint::kChat);
  CHECK(r.prompts.empty());
  CHECK(r.messages_json ==
        R"([{"role":"system","content":"Be brief.","name":"rules"},)"
        R"({"content":"Hi there","role":"user"},{"role":"assistant","content":null}])");
  CHECK(chat(R"({"messages": [{"role": "user"}]})").messages_json == R"([{"role":"user"}])");

  require_refused([] { chat(R"({"model": "tiny"})"); }, "messages",
                  {"a non-empty array of messages", "got null"});
  require_refused([] { chat(R"({"messages": []})"); }, "messages", {"got []"});
  require_refused([] { chat(R"({"messages": "hi"})"); }, "messages", {"got \"hi\""});
  require_refused([] { chat(R"({"messages": [{"role": "user", "content": "a"}, 3]})"); },
                  "messages[1]", {"an object with role and content", "got 3"});
  require_refused([] { chat(R"({"messages": [{"content": "a"}]})"); }, "messages[0].role",
                  {"a string", "got null"});
  require_refused([] { chat(R"({"messages": [{"role": 1, "content": "a"}]})"); },
                  "messages[0].role", {"a string", "got 1"});
  require_refused([] { chat(R"({"messages": [{"role": "user", "content": 4}]})"); },
                  "messages[0].content", {"a string or an array of text parts", "got 4"});
  require_refused(
      [] {
        chat(R"({"messages": [{"role": "user", "content": [{"type": "image_url", "x": 1}]}]})");
      },
      "messages[0].content[0]", {"a text part", "image_url"});
  require_refused(
      [] { chat(R"({"messages": [{"role": "user", "content": [{"type": "text"}]}]})"); },
      "messages[0].content[0]", {"a text part"});
  require_refused(
      [] { chat(R"({"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]})"); },
      "messages[0].content[0].text", {"a string", "got 5"});
}

TEST_CASE("model names the served model or answers 404 model_not_found", "[openai]") {
  CHECK_NOTHROW(completions(R"({"model": "tiny", "prompt": "x"})"));
  CHECK_NOTHROW(chat(R"({"model": "tiny", "messages": [{"role": "user", "content": "x"}]})"));
  try {
    completions(R"({"model": "gpt-4", "prompt": "x"})");
    FAIL("expected a 404");
  } catch (const ApiError& e) {
    CHECK(e.status == 404);
    CHECK(e.param == "model");
    CHECK(e.code == "model_not_found");
    CHECK(e.type == "invalid_request_error");
    CHECK(std::string(e.what()) == "model: expected 'tiny' (GET /v1/models) but got 'gpt-4'");
  }
  require_refused([] { completions(R"({"model": 3, "prompt": "x"})"); }, "model",
                  {"a string", "got 3"});
}

TEST_CASE("sampling fields are taken in their ranges and refused outside them, by name",
          "[openai]") {
  const auto body = [](const std::string& field, const std::string& value) {
    return R"({"prompt": "x", ")" + field + R"(": )" + value + "}";
  };
  const std::vector<std::tuple<std::string, std::string, std::string>> bad = {
      {"temperature", "-0.5", "a number >= 0 (0 = greedy)"},
      {"temperature", "\"hot\"", "a finite number"},
      {"top_p", "0", "a number in (0, 1]"},
      {"top_p", "1.5", "a number in (0, 1]"},
      {"top_k", "-2", "an integer >= 0 (0 or -1 = no filter)"},
      {"top_k", "2.5", "an integer"},
      {"seed", "1.5", "an integer"},
      {"seed", "-1", "an integer >= 0"},
      {"n", "0", "an integer >= 1"},
      {"n", "\"2\"", "an integer"},
      {"min_p", "\"a\"", "a finite number"},
      {"presence_penalty", "true", "a finite number"},
      {"frequency_penalty", "[]", "a finite number"},
      {"repetition_penalty", "{}", "a finite number"},
      {"min_tokens", "1.5", "an integer"},
      {"ignore_eos", "1", "a boolean"},
      {"echo", "\"yes\"", "a boolean"},
      {"max_tokens", "2.5", "an integer"},
      {"max_tokens", "0", "an integer >= 1 (0 only with echo)"},
      {"max_tokens", "-1", "an integer >= 1"},
      {"max_completion_tokens", "0", "an integer >= 1"},
  };
  for (const auto& [field, value, expected] : bad) {
    INFO(field << " = " << value);
    require_refused([&] { completions(body(field, value)); }, field,
                    {expected, "but got " + value});
  }
  // max_tokens 0 with echo scores the prompt alone; below 0 it is refused still.
  CHECK(completions(R"({"prompt": "x", "echo": true, "max_tokens": 0})").max_tokens == 0);
  require_refused([] { completions(R"({"prompt": "x", "echo": true, "max_tokens": -1})"); },
                  "max_tokens", {"an integer >= 0 (0 with echo", "got -1"});
  // max_completion_tokens is chat's name for it; given, it is the one read and named.
  const ApiRequest both =
      chat(R"({"messages": [{"role": "user"}], "max_tokens": 9, "max_completion_tokens": 4})");
  CHECK(both.max_tokens == 4);
  CHECK(both.max_tokens_field == "max_completion_tokens");
}

TEST_CASE("stop is a string or up to 16 non-empty strings", "[openai]") {
  CHECK(completions(R"({"prompt": "x", "stop": "END"})").stop == std::vector<std::string>{"END"});
  CHECK(completions(R"({"prompt": "x", "stop": []})").stop.empty());
  std::string sixteen = "[";
  for (int i = 0; i < 16; ++i) sixteen += (i ? ", \"s" : "\"s") + std::to_string(i) + "\"";
  const ApiRequest r = completions(R"({"prompt": "x", "stop": )" + sixteen + "]}");
  CHECK(r.stop.size() == 16);
  CHECK(r.stop[15] == "s15");
  require_refused([&] { completions(R"({"prompt": "x", "stop": )" + sixteen + R"(, "z"]})"); },
                  "stop", {"a string or up to 16 strings"});
  require_refused([] { completions(R"({"prompt": "x", "stop": 3})"); }, "stop", {"got 3"});
  require_refused([] { completions(R"({"prompt": "x", "stop": ""})"); }, "stop[0]",
                  {"a non-empty string", "got \"\""});
  require_refused([] { completions(R"({"prompt": "x", "stop": ["a", 7]})"); }, "stop[1]",
                  {"a string", "got 7"});
}

TEST_CASE("logit_bias maps token ids, as decimal strings, to finite biases", "[openai]") {
  CHECK(completions(R"({"prompt": "x", "logit_bias": {}})").head.logit_bias.empty());
  require_refused([] { completions(R"({"prompt": "x", "logit_bias": [1]})"); }, "logit_bias",
                  {"an object of token ids to biases", "got [1]"});
  for (const std::string key : {"x", "-3", "5a", "", "1.5"}) {
    INFO("key '" << key << "'");
    require_refused([&] { completions(R"({"prompt": "x", "logit_bias": {")" + key + R"(": 1}})"); },
                    "logit_bias", {"token ids (decimal strings) as keys", "got \"" + key + "\""});
  }
  require_refused([] { completions(R"({"prompt": "x", "logit_bias": {"5": "up"}})"); },
                  "logit_bias.5", {"a finite number", "got \"up\""});
}

TEST_CASE("logprobs: completions take 0..20 or a boolean, chat logprobs with top_logprobs",
          "[openai]") {
  const auto completions_logprobs = [](const std::string& value) {
    return completions(R"({"prompt": "x", "logprobs": )" + value + "}").logprobs;
  };
  CHECK(completions_logprobs("0") == 0);
  CHECK(completions_logprobs("20") == 20);
  CHECK(completions_logprobs("true") == 0);  // the chosen token's alone
  CHECK_FALSE(completions_logprobs("false").has_value());
  require_refused([] { completions(R"({"prompt": "x", "logprobs": 21})"); }, "logprobs",
                  {"an integer 0..20", "got 21"});
  require_refused([] { completions(R"({"prompt": "x", "logprobs": -1})"); }, "logprobs",
                  {"an integer 0..20", "got -1"});
  require_refused([] { completions(R"({"prompt": "x", "logprobs": "3"})"); }, "logprobs",
                  {"an integer", "got \"3\""});

  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  const auto chat_with = [&](const std::string& fields) {
    return chat("{" + user + ", " + fields + "}");
  };
  CHECK(chat_with(R"("logprobs": true)").logprobs == 0);
  CHECK(chat_with(R"("logprobs": true, "top_logprobs": 5)").logprobs == 5);
  CHECK_FALSE(chat_with(R"("logprobs": false)").logprobs.has_value());
  CHECK_FALSE(chat_with(R"("top_logprobs": null)").logprobs.has_value());
  require_refused([&] { chat_with(R"("top_logprobs": 2)"); }, "top_logprobs",
                  {"null unless logprobs is true", "got 2"});
  require_refused([&] { chat_with(R"("logprobs": false, "top_logprobs": 2)"); }, "top_logprobs",
                  {"null unless logprobs is true"});
  require_refused([&] { chat_with(R"("logprobs": true, "top_logprobs": 21)"); }, "top_logprobs",
                  {"an integer 0..20", "got 21"});
  require_refused([&] { chat_with(R"("logprobs": 3)"); }, "logprobs", {"a boolean", "got 3"});
}

TEST_CASE("stream and stream_options: usage only for a streamed request", "[openai]") {
  const ApiRequest r = completions(
      R"({"prompt": "x", "stream": true,
          "stream_options": {"include_usage": true, "continuous_usage_stats": true}})");
  CHECK(r.stream);
  CHECK(r.include_usage);
  CHECK(r.continuous_usage);
  const ApiRequest plain = completions(R"({"prompt": "x", "stream": true})");
  CHECK(plain.stream);
  CHECK_FALSE(plain.include_usage);
  CHECK_FALSE(completions(R"({"prompt": "x", "stream": false, "stream_options": null})").stream);
  require_refused([] { completions(R"({"prompt": "x", "stream": "yes"})"); }, "stream",
                  {"a boolean", "got \"yes\""});
  require_refused(
      [] { completions(R"({"prompt": "x", "stream_options": {"include_usage": true}})"); },
      "stream_options", {"null unless stream is true"});
  require_refused([] { completions(R"({"prompt": "x", "stream": true, "stream_options": 1})"); },
                  "stream_options", {"an object", "got 1"});
  require_refused(
      [] {
        completions(R"({"prompt": "x", "stream": true, "stream_options": {"include_usage": "y"}})");
      },
      "stream_options.include_usage", {"a boolean", "got \"y\""});
  // An unknown key of stream_options follows the field policy.
  const std::string odd = R"({"prompt": "x", "stream": true, "stream_options": {"zip": 1}})";
  CHECK(completions(odd).ignored == std::vector<std::string>{"stream_options.zip"});
  require_refused([&] { completions(odd, /*strict=*/true); }, "stream_options.zip",
                  {"no such field (include_usage, continuous_usage_stats)", "got 1"});
  // A prompt's log-probabilities are not streamed.
  require_refused(
      [] { completions(R"({"prompt": "x", "stream": true, "echo": true, "logprobs": 1})"); },
      "echo", {"false with stream and logprobs"});
  CHECK_NOTHROW(completions(R"({"prompt": "x", "stream": true, "echo": true})"));
  CHECK_NOTHROW(completions(R"({"prompt": "x", "echo": true, "logprobs": 1})"));
}

TEST_CASE("fields statickv does not implement are taken only at their neutral values", "[openai]") {
  const std::string user = R"("messages": [{"role": "user", "content": "x"}])";
  // Bookkeeping, on both endpoints: accepted, changes nothing.
  const std::string bookkeeping =
      R"("user": "u1", "metadata": {"k": "v"}, "store": false, "service_tier": "auto")";
  CHECK(completions(R"({"prompt": "x", )" + bookkeeping + "}", true).ignored.empty());
  CHECK(chat("{" + user + ", " + bookkeeping + "}", true).ignored.empty());
  require_refused([] { completions(R"({"prompt": "x", "user": 5})"); }, "user",
                  {"a string", "got 5"});
  require_refused([&] { chat("{" + user + R"(, "metadata": [1]})"); }, "metadata",
                  {"an object", "got [1]"});
  require_refused([] { completions(R"({"prompt": "x", "store": "no"})"); }, "store", {"a boolean"});
  // completions: best_of 1 and suffix "".
  CHECK_NOTHROW(completions(R"({"prompt": "x", "best_of": 1, "suffix": ""})", true));
  CHECK_NOTHROW(completions(R"({"prompt": "x", "best_of": null, "suffix": null})", true));
  require_refused([] { completions(R"({"prompt": "x", "best_of": 2})"); }, "best_of",
                  {"null or 1 (no server-side ranking)", "got 2"});
  require_refused([] { completions(R"({"prompt": "x", "suffix": "end"})"); }, "suffix",
                  {"null or \"\"", "got \"end\""});
  // chat: text responses, no tools.
  CHECK_NOTHROW(chat("{" + user +
                         R"(, "response_format": {"type": "text"}, "tools": [],
                              "tool_choice": "none", "parallel_tool_calls": true})",
                     true));
  CHECK_NOTHROW(chat("{" + user + R"(, "tool_choice": "auto", "tools": null})", true));
  require_refused([&] { chat("{" + user + R"(, "response_format": {"type": "json_object"}})"); },
                  "response_format", {"null or {\"type\": \"text\"}", "json_object"});
  require_refused([&] { chat("{" + user + R"(, "tools": [{"type": "function"}]})"); }, "tools",
                  {"null or [] (no tool calling)"});
  require_refused([&] { chat("{" + user + R"(, "tool_choice": "required"})"); }, "tool_choice",
                  {"null, \"none\" or \"auto\" (no tools)", "got \"required\""});
  require_refused([&] { chat("{" + user + R"(, "parallel_tool_calls": 1})"); },
                  "parallel_tool_calls", {"a boolean", "got 1"});
}

TEST_CASE("unknown fields are ignored and recorded, or with strict refused by name", "[openai]") {
  const std::string body = R"({"prompt": "x", "frobnicate": 1, "temprature": 0.5})";
  const ApiRequest r = completions(body);
  CHECK(r.ignored == std::vector<std::string>{"frobnicate", "temprature"});
  CHECK_FALSE(r.temperature.has_value());  // a typo changes nothing
  require_api_error([&] { completions(body, /*strict=*/true); }, 400, "frobnicate",
                    {"frobnicate: unknown field", "--strict-fields"});
  // Each endpoint's own fields are unknown to the other.
  const ApiRequest c = chat(R"({"messages": [{"role": "user"}], "echo": true, "best_of": 2,
                                "prompt": "x"})");
  CHECK(c.ignored == std::vector<std::string>{"echo", "best_of", "prompt"});
  CHECK_FALSE(c.echo);
  CHECK(completions(R"({"prompt": "x", "top_logprobs": 3, "tools": [1]})").ignored ==
        std::vector<std::string>{"top_logprobs", "tools"});
  require_api_error(
      [] { chat(R"({"messages": [{"role": "user"}], "suffix": "s"})", /*strict=*/true); }, 400,
      "suffix", {"suffix: unknown field"});
}

TEST_CASE("a body that is not a JSON object is refused as body", "[openai]") {
  for (const auto& parse :
       {+[](const std::string& b) { completions(b); }, +[](const std::string& b) { chat(b); },
        +[](const std::string& b) { parse_tokenize(b); },
        +[](const std::string& b) { parse_detokenize(b); }}) {
    require_api_error([&] { parse("{\"prompt\": "); }, 400, "",
                      {"body: expected a JSON object but got malformed JSON ("});
    require_api_error([&] { parse(""); }, 400, "", {"body: expected a JSON object"});
    require_refused([&] { parse("[1, 2]"); }, "body", {"a JSON object", "got [1,2]"});
    require_refused([&] { parse("\"text\""); }, "body", {"got \"text\""});
  }
}

TEST_CASE("parse_tokenize takes a prompt or messages, and add_special_tokens", "[openai]") {
  const TokenizeRequest text = parse_tokenize(R"({"prompt": "Hello"})");
  CHECK(text.prompt == "Hello");
  CHECK(text.messages_json.empty());
  CHECK(text.add_special_tokens);
  CHECK_FALSE(
      parse_tokenize(R"({"prompt": "Hello", "add_special_tokens": false})").add_special_tokens);
  const TokenizeRequest messages = parse_tokenize(
      R"({"messages": [{"role": "user", "content": [{"type": "text", "text": "Hi"}]}],
          "prompt": null})");
  CHECK_FALSE(messages.prompt.has_value());
  CHECK(messages.messages_json == R"([{"role":"user","content":"Hi"}])");

  require_refused([] { parse_tokenize("{}"); }, "prompt",
                  {"exactly one of prompt (a string) and messages", "got {}"});
  require_refused([] { parse_tokenize(R"({"prompt": "a", "messages": [{"role": "user"}]})"); },
                  "prompt", {"exactly one of prompt"});
  require_refused([] { parse_tokenize(R"({"prompt": [1, 2]})"); }, "prompt",
                  {"a string", "got [1,2]"});
  require_refused([] { parse_tokenize(R"({"messages": []})"); }, "messages",
                  {"a non-empty array of messages"});
  require_refused([] { parse_tokenize(R"({"messages": [{"role": 2}]})"); }, "messages[0].role",
                  {"a string", "got 2"});
  require_refused([] { parse_tokenize(R"({"prompt": "a", "add_special_tokens": "no"})"); },
                  "add_special_tokens", {"a boolean", "got \"no\""});
}

TEST_CASE("parse_detokenize takes an array of token ids", "[openai]") {
  CHECK(parse_detokenize(R"({"tokens": [5, 0, 7]})") == std::vector<int64_t>{5, 0, 7});
  CHECK(parse_detokenize(R"({"tokens": []})").empty());
  CHECK(parse_detokenize(R"({"tokens": [-1]})") ==
        std::vector<int64_t>{-1});  // range: the vocabulary's check
  require_refused([] { parse_detokenize("{}"); }, "tokens", {"an array of token ids", "got null"});
  require_refused([] { parse_detokenize(R"({"tokens": "5 6"})"); }, "tokens",
                  {"an array of token ids", "got \"5 6\""});
  require_refused([] { parse_detokenize(R"({"tokens": [1, 2.5]})"); }, "tokens[1]",
                  {"an integer", "got 2.5"});
  require_refused([] { parse_detokenize(R"({"tokens": [18446744073709551615]})"); }, "tokens[0]",
                  {"an integer", "got 18446744073709551615"});
}

TEST_CASE("error_body is OpenAI's error object, null where a part is empty", "[openai]") {
  const auto body = nlohmann::json::parse(error_body(ApiError(400, "n: expected x", "n")));
  CHECK(body == nlohmann::json::parse(
                    R"({"error": {"message": "n: expected x", "type": "invalid_request_error",
                                  "param": "n", "code": null}})"));
  const auto plain = nlohmann::json::parse(error_body(ApiError(500, "oops", "", "server_error")));
  CHECK(plain["error"]["param"].is_null());
  CHECK(plain["error"]["type"] == "server_error");
}
