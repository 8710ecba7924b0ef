// chat_template.hpp: ChatTemplate's available, load (which file wins, the
// error naming both), render with and without the generation prompt,
// source, moves; user_turn's JSON; and apply_chat, the rendered text encoded
// with nothing added, on a byte-level tokenizer written here (no checkpoint
// needed). Jinja2's settings and refusals in depth are the [chat] case of
// test_tokenizer.cpp; SmolLM2's own template against transformers' is its
// [smollm2] case.

#include "support/temp_dir.hpp"

#include <statickv/text/chat_template.hpp>
#include <statickv/text/tokenizer.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

namespace {

namespace fs = std::filesystem;
using json = nlohmann::json;
using statickv::test::TempDir;
using statickv::tokenizer::apply_chat;
using statickv::tokenizer::ChatTemplate;
using statickv::tokenizer::Tokenizer;
using statickv::tokenizer::user_turn;

// ChatML-like, with one special token (<|im_end|>) the tokenizer below knows.
const char* const kTemplate =
    "{% for m in messages %}<|im_start|>{{ m.role }}\n{{ m.content }}<|im_end|>\n{% endfor %}"
    "{% if add_generation_prompt %}<|im_start|>assistant\n{% endif %}";

/// GPT-2's byte-level alphabet: byte b's character, UTF-8 encoded.
std::string byte_char(int b) {
  const auto direct = [](int c) {
    return (c >= 0x21 && c <= 0x7E) || (c >= 0xA1 && c <= 0xAC) || (c >= 0xAE && c <= 0xFF);
  };
  int code = b;
  if (!direct(b)) {
    code = 256;
    for (int c = 0; c < b; ++c) code += direct(c) ? 0 : 1;
  }
  if (code < 0x80) return std::string(1, static_cast<char>(code));
  return {static_cast<char>(0xC0 | (code >> 6)), static_cast<char>(0x80 | (code & 0x3F))};
}

/// A byte-level BPE tokenizer.json: byte b is id b, <|im_end|> is 256 (a
/// special token), <s> 257, which the post-processor puts before a prompt.
json byte_tokenizer() {
  json vocab = json::object();
  for (int b = 0; b < 256; ++b) vocab[byte_char(b)] = b;
  vocab["\xC4\xA0\xC4\xA0"] = 258;  // "ĠĠ": two spaces, from the one merge
  const auto added = [](int id, const char* content) {
    return json{{"id", id},        {"content", content},  {"single_word", false}, {"lstrip", false},
                {"rstrip", false}, {"normalized", false}, {"special", true}};
  };
  const json byte_level = {{"type", "ByteLevel"},
                           {"add_prefix_space", false},
                           {"trim_offsets", true},
                           {"use_regex", true}};
  return {{"version", "1.0"},
          {"added_tokens", {added(256, "<|im_end|>"), added(257, "<s>")}},
          {"normalizer", nullptr},
          {"pre_tokenizer", byte_level},
          {"post_processor",
           {{"type", "TemplateProcessing"},
            {"single",
             {{{"SpecialToken", {{"id", "<s>"}, {"type_id", 0}}}},
              {{"Sequence", {{"id", "A"}, {"type_id", 0}}}}}},
            {"pair", json::array()},
            {"special_tokens", {{"<s>", {{"id", "<s>"}, {"ids", {257}}, {"tokens", {"<s>"}}}}}}}},
          {"decoder", byte_level},
          {"model",
           {{"type", "BPE"},
            {"dropout", nullptr},
            {"unk_token", nullptr},
            {"fuse_unk", false},
            {"byte_fallback", false},
            {"vocab", vocab},
            {"merges", json::array({json::array({"\xC4\xA0", "\xC4\xA0"})})}}}};
}

/// The ids byte_tokenizer() gives `text`, <|im_end|> where it is written.
std::vector<int64_t> byte_ids(const std::string& text) {
  const std::string special = "<|im_end|>";
  std::vector<int64_t> ids;
  for (size_t i = 0; i < text.size();) {
    if (text.compare(i, special.size(), special) == 0) {
      ids.push_back(256);
      i += special.size();
    } else {
      ids.push_back(static_cast<unsigned char>(text[i++]));
    }
  }
  return ids;
}

template <typename F>
void require_runtime_error(F f, const std::vector<std::string>& pieces) {
  try {
    f();
    FAIL("no exception");
  } catch (const std::runtime_error& e) {
    for (const std::string& piece : pieces) CHECK_THAT(e.what(), Catch::Contains(piece));
  }
}

}  // namespace

TEST_CASE("ChatTemplate::available sees either file without loading it", "[tokenizer][chat]") {
  const TempDir dir;
  CHECK_FALSE(ChatTemplate::available(dir.dir()));
  CHECK_FALSE(ChatTemplate::available(dir.file("missing")));
  dir.write("tokenizer_config.json", json{{"eos_token", "</s>"}}.dump());
  CHECK_FALSE(ChatTemplate::available(dir.dir()));  // a config without a template
  dir.write("tokenizer_config.json", json{{"chat_template", kTemplate}}.dump());
  CHECK(ChatTemplate::available(dir.dir()));
  fs::remove(dir.file("tokenizer_config.json"));
  dir.write("chat_template.jinja", "{{ messages[0].content }}");
  CHECK(ChatTemplate::available(dir.dir()));
}

TEST_CASE("ChatTemplate::load takes chat_template.jinja first and source names the file",
          "[tokenizer][chat]") {
  const TempDir dir;
  require_runtime_error([&] { ChatTemplate::load(dir.dir()); },
                        {"chat_template.jinja", "tokenizer_config.json"});
  dir.write("tokenizer_config.json", json{{"chat_template", kTemplate}}.dump());
  const ChatTemplate from_config = ChatTemplate::load(dir.dir());
  CHECK_THAT(from_config.source(), Catch::EndsWith("tokenizer_config.json"));
  dir.write("chat_template.jinja", "[{{ messages | length }}]");
  const ChatTemplate from_jinja = ChatTemplate::load(dir.dir());
  CHECK_THAT(from_jinja.source(), Catch::EndsWith("chat_template.jinja"));
  CHECK(from_jinja.render(user_turn("Hi"), true) == "[1]");
  // Each keeps its own template: the first still renders the config's.
  CHECK(from_config.render(user_turn("Hi"), false) == "<|im_start|>user\nHi<|im_end|>\n");
}

TEST_CASE("ChatTemplate::render adds the assistant opening only with add_generation_prompt",
          "[tokenizer][chat]") {
  const TempDir dir;
  dir.write("chat_template.jinja", kTemplate);
  const ChatTemplate chat = ChatTemplate::load(dir.dir());
  const json messages = json::array(
      {{{"role", "system"}, {"content", "Be brief."}}, {{"role", "user"}, {"content", "Hi"}}});
  const std::string turns =
      "<|im_start|>system\nBe brief.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n";
  CHECK(chat.render(messages.dump(), false) == turns);
  CHECK(chat.render(messages.dump(), true) == turns + "<|im_start|>assistant\n");
  CHECK(chat.render("[]", true) == "<|im_start|>assistant\n");
  for (const char* bad : {"{\"role\": \"user\"}", "[1, 2]"}) {
    INFO("messages " << bad);
    require_runtime_error([&] { chat.render(bad, true); }, {"messages", "JSON array of objects"});
  }
  require_runtime_error([&] { chat.render("not json", true); }, {"chat template"});
}

TEST_CASE("ChatTemplate moves keep the loaded template", "[tokenizer][chat]") {
  const TempDir first, second;
  first.write("chat_template.jinja", "A{{ messages[0].content }}");
  second.write("chat_template.jinja", "B{{ messages[0].content }}");
  ChatTemplate a = ChatTemplate::load(first.dir());
  ChatTemplate moved(std::move(a));
  CHECK(moved.render(user_turn("x"), false) == "Ax");
  ChatTemplate b = ChatTemplate::load(second.dir());
  CHECK(b.render(user_turn("x"), false) == "Bx");
  b = std::move(moved);
  CHECK(b.render(user_turn("x"), false) == "Ax");
  CHECK(b.source() == first.file("chat_template.jinja"));
}

TEST_CASE("user_turn is the JSON array of one user message, any text escaped",
          "[tokenizer][chat]") {
  const std::string text = "say \"hi\"\n\\ \xC3\xA9t\xC3\xA9 {{ not a template }}";
  const json parsed = json::parse(user_turn(text));
  CHECK(parsed == json::array({{{"role", "user"}, {"content", text}}}));
  CHECK(json::parse(user_turn("")) == json::array({{{"role", "user"}, {"content", ""}}}));
  // The template sees the content as written, not as template text.
  const TempDir dir;
  dir.write("chat_template.jinja", kTemplate);
  CHECK(ChatTemplate::load(dir.dir()).render(user_turn(text), false) ==
        "<|im_start|>user\n" + text + "<|im_end|>\n");
}

TEST_CASE("apply_chat encodes the rendered prompt with nothing added", "[tokenizer][chat]") {
  const TempDir dir;
  dir.write("tokenizer.json", byte_tokenizer().dump());
  dir.write("chat_template.jinja", kTemplate);
  const Tokenizer tok = Tokenizer::load(dir.dir());
  const ChatTemplate chat = ChatTemplate::load(dir.dir());
  const std::string messages = user_turn("Hi there");
  const std::string prompt = chat.render(messages, true);
  // The tokenizer is what it claims: bytes, the special, <s> on a prompt.
  REQUIRE(tok.encode(prompt) == byte_ids(prompt));
  REQUIRE(tok.encode_prompt("Hi").front() == 257);
  const std::vector<int64_t> ids = apply_chat(tok, chat, messages);
  CHECK(ids == byte_ids(prompt));  // the template's own <|im_end|>, no <s>
  CHECK(ids == tok.encode(prompt));
  CHECK(apply_chat(tok, chat, messages, false) == byte_ids(chat.render(messages, false)));
  CHECK(apply_chat(tok, chat, messages, false).size() < ids.size());
}
