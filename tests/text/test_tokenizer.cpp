// statickv::tokenizer.
//
// [utf8]: the UTF-8 repair and streaming rules on hand-made and random bytes
// (no files needed).
// [smollm2]: SmolLM2-135M-Instruct's tokenizer (byte-level BPE), converted
// by tools/smollm2/convert.py (ctest's smollm2_convert fixture), against what
// transformers' tokenizer does on the same files (make_expected.py, the
// smollm2_tokenizer_expected fixture): encode ids, decode with and without special
// tokens, streaming decode, the chat prompt and the eos ids.
// STATICKV_SMOLLM2_DIR names the checkpoint, STATICKV_SMOLLM2_TOKENIZER_EXPECTED the
// JSON file make_expected.py wrote.
// [gemma3]: the same for Gemma 3 270M's tokenizer (SentencePiece-style BPE
// with byte fallback, the split and replace normalizers and byte-fallback
// decoders), converted by tools/gemma3/convert.py: STATICKV_GEMMA3_DIR and
// STATICKV_GEMMA3_TOKENIZER_EXPECTED.

#include <statickv/text/chat_template.hpp>
#include <statickv/text/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using statickv::tokenizer::apply_chat;
using statickv::tokenizer::ChatTemplate;
using statickv::tokenizer::is_valid_utf8;
using statickv::tokenizer::StreamDecoder;
using statickv::tokenizer::to_valid_utf8;
using statickv::tokenizer::Tokenizer;
using statickv::tokenizer::user_turn;
using statickv::tokenizer::Utf8Stream;

const std::string kFFFD = "\xEF\xBF\xBD";

/// Requires that `f` throws std::runtime_error whose message holds every piece.
template <typename F>
void require_throws_with(F f, const std::vector<std::string>& pieces) {
  try {
    f();
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    for (const std::string& piece : pieces) CHECK_THAT(e.what(), Catch::Contains(piece));
  }
}

/// Streams `bytes` cut at `cuts` (sorted offsets) and checks every piece.
std::string stream_in_pieces(const std::string& bytes, const std::vector<size_t>& cuts) {
  Utf8Stream stream;
  std::string out;
  size_t begin = 0;
  for (size_t i = 0; i <= cuts.size(); ++i) {
    const size_t end = i < cuts.size() ? cuts[i] : bytes.size();
    const std::string piece = stream.push(std::string_view(bytes).substr(begin, end - begin));
    INFO("piece " << i << " of bytes cut at " << begin << ".." << end);
    CHECK(is_valid_utf8(piece));
    CHECK(stream.pending_bytes() <= 3);
    out += piece;
    begin = end;
  }
  const std::string last = stream.finish();
  CHECK(is_valid_utf8(last));
  CHECK(stream.pending_bytes() == 0);
  return out + last;
}

std::string env_or_fail(const char* name, const char* how) {
  const char* value = std::getenv(name);
  if (value == nullptr || *value == '\0') FAIL(name << " is not set: " << how);
  return value;
}

/// A converted checkpoint's tokenizer and what transformers' does with it.
struct Checked {
  Tokenizer tok;
  json expected;
};

Checked load_checked(const char* dir_var, const char* expected_var, const char* how) {
  Tokenizer tok = Tokenizer::load(env_or_fail(dir_var, how));
  const std::string path = env_or_fail(expected_var, how);
  std::ifstream in(path, std::ios::binary);
  if (!in) FAIL(path << ": cannot open");
  return {std::move(tok), json::parse(in)};
}

/// SmolLM2's, loaded once for all [smollm2] cases.
const Checked& smollm2_checked() {
  static const Checked checked =
      load_checked("STATICKV_SMOLLM2_DIR", "STATICKV_SMOLLM2_TOKENIZER_EXPECTED",
                   "run tools/smollm2/convert.py DIR and tests/text/make_expected.py DIR "
                   "OUT.json, then set STATICKV_SMOLLM2_DIR=DIR and "
                   "STATICKV_SMOLLM2_TOKENIZER_EXPECTED=OUT.json "
                   "(ctest's tokenizer_smollm2 test does all of it)");
  return checked;
}
const Tokenizer& smollm2() { return smollm2_checked().tok; }
const json& expected() { return smollm2_checked().expected; }

/// Gemma 3 270M's, loaded once for all [gemma3] cases.
const Checked& gemma3_checked() {
  static const Checked checked = load_checked(
      "STATICKV_GEMMA3_DIR", "STATICKV_GEMMA3_TOKENIZER_EXPECTED",
      "run tools/gemma3/convert.py DIR and tests/text/make_expected.py DIR "
      "OUT.json, then set STATICKV_GEMMA3_DIR=DIR and STATICKV_GEMMA3_TOKENIZER_EXPECTED=OUT.json "
      "(ctest's tokenizer_gemma3 test does all of it)");
  return checked;
}

std::vector<int64_t> ids_of(const json& entry) {
  return entry.at("ids").get<std::vector<int64_t>>();
}

/// `s` quoted, with bytes outside printable ASCII as \xHH.
std::string shown(const std::string& s) {
  static const char* const hex = "0123456789ABCDEF";
  std::string out = "\"";
  for (const char c : s) {
    const auto b = static_cast<unsigned char>(c);
    if (b >= 0x20 && b < 0x7F && b != '\\' && b != '"') {
      out += c;
    } else {
      out += "\\x";
      out += hex[b >> 4];
      out += hex[b & 15];
    }
  }
  return out + "\"";
}

}  // namespace

TEST_CASE("to_valid_utf8 replaces maximal ill-formed subparts as from_utf8_lossy", "[utf8]") {
  struct Case {
    std::string in, out;
  };
  const std::vector<Case> cases = {
      {"", ""},
      {"plain ASCII", "plain ASCII"},
      {"\xC3\xA9t\xC3\xA9", "\xC3\xA9t\xC3\xA9"},  // été
      {"\xF0\x9F\x99\x82", "\xF0\x9F\x99\x82"},    // U+1F642
      {"\xF0\x9F\x99", kFFFD},                     // truncated: one
      {"a\xF0\x9F\x99"
       "b",
       "a" + kFFFD + "b"},                                  // cut short: one
      {"\x80", kFFFD},                                      // lone continuation
      {"\x80\x80", kFFFD + kFFFD},                          // one each
      {"\xC0\xAF", kFFFD + kFFFD},                          // overlong lead
      {"\xE0\x80\xAF", kFFFD + kFFFD + kFFFD},              // overlong E0
      {"\xED\xA0\x80", kFFFD + kFFFD + kFFFD},              // surrogate
      {"\xF4\x90\x80\x80", kFFFD + kFFFD + kFFFD + kFFFD},  // above U+10FFFF
      {"\xF5\xFF", kFFFD + kFFFD},                          // never leads
      {"\xE2\x82"
       "A",
       kFFFD + "A"},                             // E2 82 then ASCII
      {"\xF0\x9F\xC3\xA9", kFFFD + "\xC3\xA9"},  // restarts at C3
      {"\xF4\x8F\xBF\xBF", "\xF4\x8F\xBF\xBF"},  // U+10FFFF
  };
  for (const auto& c : cases) {
    INFO("input " << shown(c.in));
    CHECK(to_valid_utf8(c.in) == c.out);
    CHECK(is_valid_utf8(c.out));
    CHECK(is_valid_utf8(c.in) == (c.in == c.out));
  }
}

TEST_CASE("Utf8Stream gives whole characters and the same text at every cut", "[utf8]") {
  const std::vector<std::string> inputs = {
      "Qu'est-ce que la tour Eiffel ? R\xC3\xA9ponds en fran\xC3\xA7"
      "ais.",
      "\xE6\x97\xA5\xE6\x9C\xAC\xE3\x81\xAE\xE9\xA6\x96\xE9\x83\xBD",  // 日本の首都
      "\xF0\x9F\x99\x82\xF0\x9F\x91\x8D\xF0\x9F\x8F\xBD",              // 🙂👍🏽
      "a\xF0\x9F\x99"
      "b\x80\xC3",  // ill-formed in the middle and at the end
      "\xED\xA0\x80\xE0\x80\xF4\x90",
  };
  for (const auto& in : inputs) {
    INFO("input " << shown(in));
    const std::string want = to_valid_utf8(in);
    // Every single cut and every byte on its own.
    for (size_t cut = 0; cut <= in.size(); ++cut) CHECK(stream_in_pieces(in, {cut}) == want);
    std::vector<size_t> every;
    for (size_t i = 1; i < in.size(); ++i) every.push_back(i);
    CHECK(stream_in_pieces(in, every) == want);
  }
  SECTION("a character is held until its last byte") {
    Utf8Stream stream;
    CHECK(stream.push("\xF0\x9F") == "");
    CHECK(stream.pending_bytes() == 2);
    CHECK(stream.push("\x99") == "");
    CHECK(stream.push("\x82!") == "\xF0\x9F\x99\x82!");
    CHECK(stream.pending_bytes() == 0);
    CHECK(stream.push("\xC3") == "");
    CHECK(stream.finish() == kFFFD);
  }
}

TEST_CASE("Utf8Stream agrees with to_valid_utf8 on random bytes", "[utf8]") {
  std::mt19937 rng(13);
  // Mostly bytes that start or continue multi-byte characters.
  const std::string alphabet =
      "a \x80\x8F\x90\x9F\xA0\xBF\xC2\xC3\xDF\xE0\xE2\xED\xEF\xF0\xF4\xF5\xFF";
  for (int n = 0; n < 2000; ++n) {
    std::string in(rng() % 16, '\0');
    for (char& c : in) c = alphabet[rng() % alphabet.size()];
    std::vector<size_t> cuts;
    for (size_t i = 1; i < in.size(); ++i) {
      if (rng() % 3 == 0) cuts.push_back(i);
    }
    INFO("input " << shown(in));
    const std::string want = to_valid_utf8(in);
    REQUIRE(is_valid_utf8(want));
    REQUIRE(stream_in_pieces(in, cuts) == want);
  }
}

TEST_CASE("Tokenizer::load names what is missing", "[tokenizer]") {
  const fs::path dir = fs::temp_directory_path() / "statickv_tokenizer_missing";
  fs::remove_all(dir);
  fs::create_directories(dir);
  try {
    Tokenizer::load(dir.string());
    FAIL("load of a directory without tokenizer.json did not throw");
  } catch (const std::runtime_error& e) {
    CHECK_THAT(e.what(), Catch::Contains("tokenizer.json"));
  }
  { std::ofstream(dir / "tokenizer.json") << "{ not json"; }
  CHECK_THROWS_AS(Tokenizer::load(dir.string()), std::runtime_error);
  fs::remove_all(dir);
}

TEST_CASE("ChatTemplate runs Jinja2 as transformers does, from either file", "[tokenizer][chat]") {
  const fs::path dir = fs::temp_directory_path() / "statickv_chat_template";
  fs::remove_all(dir);
  fs::create_directories(dir);
  require_throws_with([&] { ChatTemplate::load(dir.string()); },
                      {"chat_template.jinja", "tokenizer_config.json", "neither"});
  // tokenizer_config.json: named templates (the default one), the special
  // tokens as strings or added-token objects, trim_blocks/lstrip_blocks,
  // loop controls, namespace(), tojson without HTML escaping or ASCII.
  const json config = {
      {"bos_token", "<s>"},
      {"eos_token", {{"content", "</s>"}, {"special", true}}},
      {"chat_template",
       json::array(
           {{{"name", "tool_use"}, {"template", "unused"}},
            {{"name", "default"},
             {"template",
              "{{ bos_token }}{% set ns = namespace(n=0) %}\n"
              "{% for m in messages %}\n  {% if m.role == 'skip' %}{% continue %}{% endif %}\n"
              "{% set ns.n = ns.n + 1 %}[{{ m.role }}] {{ m.content | tojson }}\n"
              "{% endfor %}\n{% if add_generation_prompt %}[assistant]{% endif %}"
              "{{ ns.n }}{{ eos_token }}"}}})}};
  { std::ofstream(dir / "tokenizer_config.json") << config.dump(); }
  REQUIRE(ChatTemplate::available(dir.string()));
  const ChatTemplate chat = ChatTemplate::load(dir.string());
  const json messages = json::array({{{"role", "user"}, {"content", "<b>é</b>"}},
                                     {{"role", "skip"}, {"content", "x"}},
                                     {{"role", "assistant"}, {"content", "ok"}}});
  CHECK(chat.render(messages.dump(), true) ==
        "<s>[user] \"<b>é</b>\"\n[assistant] \"ok\"\n[assistant]2</s>");
  CHECK(chat.render(messages.dump(), false) == "<s>[user] \"<b>é</b>\"\n[assistant] \"ok\"\n2</s>");
  // chat_template.jinja wins over tokenizer_config.json; raise_exception's
  // message reaches the caller; the sandbox refuses attribute escapes.
  {
    std::ofstream(dir / "chat_template.jinja")
        << "{{ raise_exception('only ' + messages[0].role) }}";
  }
  const ChatTemplate raising = ChatTemplate::load(dir.string());
  CHECK_THAT(raising.source(), Catch::Contains("chat_template.jinja"));
  require_throws_with([&] { raising.render(user_turn("hi"), true); }, {"only user"});
  { std::ofstream(dir / "chat_template.jinja") << "{{ messages.__class__.__mro__ }}"; }
  require_throws_with([&] { ChatTemplate::load(dir.string()).render(user_turn("hi"), true); },
                      {"SecurityError"});
  { std::ofstream(dir / "chat_template.jinja") << "{% for m in messages %}{{ m.content }"; }
  require_throws_with([&] { ChatTemplate::load(dir.string()); },
                      {"chat_template.jinja", "does not compile"});
  fs::remove_all(dir);
}

namespace {

void require_encode(const Tokenizer& tok, const json& expected) {
  CHECK(tok.vocab_size() == expected.at("vocab_size").get<int64_t>());
  for (const auto& entry : expected.at("texts")) {
    const std::string text = entry.at("text");
    INFO("text " << shown(text.substr(0, 200)) << " (" << text.size() << " bytes)");
    CHECK(tok.encode(text) == ids_of(entry));
    CHECK(tok.encode_prompt(text) == entry.at("prompt_ids").get<std::vector<int64_t>>());
  }
}

void require_decode(const Tokenizer& tok, const json& expected) {
  for (const char* list : {"texts", "random"}) {
    for (const auto& entry : expected.at(list)) {
      const auto ids = ids_of(entry);
      INFO(list << " ids " << json(ids).dump());
      CHECK(tok.decode(ids, /*skip_special_tokens=*/true) == entry.at("decoded_skip"));
      CHECK(tok.decode(ids, /*skip_special_tokens=*/false) == entry.at("decoded"));
    }
  }
  CHECK_THROWS_AS(tok.decode({tok.vocab_size()}), std::out_of_range);
  CHECK_THROWS_AS(tok.decode({-1}), std::out_of_range);
  CHECK_THROWS_AS(tok.token_bytes(tok.vocab_size()), std::out_of_range);
}

/// min_held_back: pushes that must have held bytes back (characters cut
/// across tokens), else the inputs prove little.
void require_stream(const Tokenizer& tok, const json& expected, int64_t min_held_back) {
  int64_t held_back = 0;  // pushes that returned less than their token's bytes
  for (const char* list : {"texts", "random"}) {
    for (const auto& entry : expected.at(list)) {
      const auto ids = ids_of(entry);
      INFO(list << " ids " << json(ids).dump());
      for (const bool skip : {true, false}) {
        StreamDecoder stream = tok.stream(skip);
        std::string text;
        for (const int64_t id : ids) {
          const std::string piece = stream.push(id);
          REQUIRE(is_valid_utf8(piece));
          held_back += stream.pending_bytes() > 0;
          text += piece;
        }
        const std::string last = stream.finish();
        REQUIRE(is_valid_utf8(last));
        text += last;
        CHECK(text == entry.at(skip ? "decoded_skip" : "decoded").get<std::string>());
      }
    }
  }
  CHECK(held_back > min_held_back);
}

}  // namespace

TEST_CASE("SmolLM2: encode gives transformers' ids", "[smollm2]") {
  require_encode(smollm2(), expected());
}

TEST_CASE("SmolLM2: decode gives transformers' text", "[smollm2]") {
  require_decode(smollm2(), expected());
}

TEST_CASE("SmolLM2: streaming decode gives whole characters and decode's text", "[smollm2]") {
  require_stream(smollm2(), expected(), 100);
}

TEST_CASE("Gemma 3: encode gives transformers' ids", "[gemma3]") {
  require_encode(gemma3_checked().tok, gemma3_checked().expected);
}

TEST_CASE("Gemma 3: decode gives transformers' text", "[gemma3]") {
  require_decode(gemma3_checked().tok, gemma3_checked().expected);
}

TEST_CASE("Gemma 3: streaming decode gives whole characters and decode's text", "[gemma3]") {
  // Gemma holds most characters whole; its byte-fallback tokens split some.
  require_stream(gemma3_checked().tok, gemma3_checked().expected, 10);
}

TEST_CASE("Gemma 3: eos ids are transformers', <bos> and <eos> are special", "[gemma3]") {
  const Tokenizer& tok = gemma3_checked().tok;
  CHECK(tok.eos_ids() == gemma3_checked().expected.at("eos_ids").get<std::vector<int64_t>>());
  CHECK(tok.is_eos(1));
  // The base model has no chat template: loading one names both places.
  CHECK_FALSE(ChatTemplate::available(tok.dir()));
  require_throws_with([&] { ChatTemplate::load(tok.dir()); },
                      {"chat_template.jinja", "tokenizer_config.json", "neither"});
  CHECK(tok.encode("<bos>") == std::vector<int64_t>{2});
  CHECK(tok.token_bytes(2, /*skip_special_tokens=*/true).empty());
}

TEST_CASE("SmolLM2: chat prompts (its Jinja template) and eos ids are transformers'", "[smollm2]") {
  const Tokenizer& tok = smollm2();
  const ChatTemplate chat = ChatTemplate::load(tok.dir());
  REQUIRE(expected().at("chat").size() >= 6);
  for (const auto& entry : expected().at("chat")) {
    const std::string messages = entry.at("messages").dump();
    INFO("messages " << shown(messages));
    CHECK(chat.render(messages, true) == entry.at("text").get<std::string>());
    CHECK(apply_chat(tok, chat, messages) == ids_of(entry));
  }
  const std::string one = expected().at("chat").at(0).at("messages").at(0).at("content");
  CHECK(apply_chat(tok, chat, user_turn(one)) == ids_of(expected().at("chat").at(0)));
  // Without the generation prompt the assistant header is not there.
  CHECK(chat.render(user_turn(one), false).size() < chat.render(user_turn(one), true).size());
  require_throws_with([&] { chat.render("{\"role\": \"user\"}", true); },
                      {"messages", "JSON array of objects"});
  CHECK(tok.eos_ids() == expected().at("eos_ids").get<std::vector<int64_t>>());
  for (const int64_t id : tok.eos_ids()) CHECK(tok.is_eos(id));
  CHECK_FALSE(tok.is_eos(tok.encode("Paris").at(0)));
  // SmolLM2's eos is <|im_end|>, a special token: a stream skips it.
  const int64_t im_end = tok.encode("<|im_end|>").at(0);
  CHECK(tok.is_eos(im_end));
  CHECK(tok.token_bytes(im_end, /*skip_special_tokens=*/true).empty());
  CHECK(tok.token_bytes(im_end, /*skip_special_tokens=*/false) == "<|im_end|>");
}
