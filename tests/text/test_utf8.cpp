// utf8.hpp (statickv::text, header-only): is_valid_utf8 at the edges of
// each encoded length and of the excluded ranges, to_valid_utf8's
// replacement of ill-formed and truncated bytes, and Utf8Stream's push,
// finish and pending_bytes contract. The random and every-cut comparisons
// of the stream with to_valid_utf8 are the [utf8] cases of test_tokenizer.cpp.

#include <statickv/text/utf8.hpp>

#include <catch2/catch.hpp>

#include <string>
#include <vector>

using statickv::tokenizer::is_valid_utf8;
using statickv::tokenizer::to_valid_utf8;
using statickv::tokenizer::Utf8Stream;

namespace {

const std::string kFFFD = "\xEF\xBF\xBD";

}  // namespace

TEST_CASE("is_valid_utf8 accepts every encoded length up to U+10FFFF and nothing else", "[utf8]") {
  const std::vector<std::string> valid = {
      "",
      std::string("a\0b", 3),  // NUL is a character
      "\x7F",                  // U+007F, the last single byte
      "\xC2\x80",
      "\xDF\xBF",  // U+0080, U+07FF
      "\xE0\xA0\x80",
      "\xED\x9F\xBF",  // U+0800, U+D7FF
      "\xEE\x80\x80",
      "\xEF\xBF\xBF",  // U+E000, U+FFFF
      "\xF0\x90\x80\x80",
      "\xF4\x8F\xBF\xBF",  // U+10000, U+10FFFF
  };
  for (const std::string& s : valid) {
    INFO("bytes of size " << s.size());
    CHECK(is_valid_utf8(s));
  }
  const std::vector<std::string> invalid = {
      "\x80",              // a continuation byte alone
      "\xC1\xBF",          // overlong U+007F
      "\xE0\x9F\xBF",      // overlong U+07FF
      "\xED\xA0\x80",      // U+D800, a surrogate
      "\xF0\x8F\xBF\xBF",  // overlong U+FFFF
      "\xF4\x90\x80\x80",  // U+110000
      "\xF8\x88\x80\x80",  // F8 never starts a character
      "\xC3",              // truncated at the end
      "\xE2\x82",          // truncated at the end
      "a\xC3(",            // a lead byte without its continuation
  };
  for (const std::string& s : invalid) {
    INFO("bytes of size " << s.size() << " starting " << static_cast<int>(s[0] & 0xFF));
    CHECK_FALSE(is_valid_utf8(s));
  }
}

TEST_CASE("to_valid_utf8 keeps valid text and replaces a truncated character with one U+FFFD",
          "[utf8]") {
  const std::string text = std::string("caf\xC3\xA9 \xE6\x97\xA5 \xF0\x9F\x99\x82 \0!", 17);
  CHECK(to_valid_utf8(text) == text);
  CHECK(to_valid_utf8("") == "");
  // A character cut at each of its bytes: one replacement for what is there.
  for (size_t n = 1; n < 4; ++n) {
    INFO(n << " of the emoji's 4 bytes");
    CHECK(to_valid_utf8("x" + std::string("\xF0\x9F\x99\x82", n)) == "x" + kFFFD);
  }
  // The output is always valid, and valid output is a fixed point.
  const std::string repaired = to_valid_utf8("\xFF\xC3(\xED\xA0\x80z");
  CHECK(repaired == kFFFD + kFFFD + "(" + kFFFD + kFFFD + kFFFD + "z");
  CHECK(is_valid_utf8(repaired));
  CHECK(to_valid_utf8(repaired) == repaired);
}

TEST_CASE("Utf8Stream push holds a partial character and finish replaces what is held", "[utf8]") {
  Utf8Stream stream;
  CHECK(stream.pending_bytes() == 0);
  CHECK(stream.finish().empty());  // nothing held: nothing to replace
  CHECK(stream.push("ab\xE2") == "ab");
  CHECK(stream.pending_bytes() == 1);
  CHECK(stream.push("\x82") == "");
  CHECK(stream.pending_bytes() == 2);
  CHECK(stream.push("\xAC!") == "\xE2\x82\xAC!");  // U+20AC once its last byte came
  CHECK(stream.pending_bytes() == 0);
  // A held lead that the next byte does not continue is one U+FFFD, at once.
  CHECK(stream.push("\xF0\x9F\x99") == "");
  CHECK(stream.pending_bytes() == 3);
  CHECK(stream.push("A") == kFFFD + "A");
  CHECK(stream.pending_bytes() == 0);
  // finish() ends the stream and leaves it empty for the next one.
  CHECK(stream.push("\xC3") == "");
  CHECK(stream.finish() == kFFFD);
  CHECK(stream.pending_bytes() == 0);
  CHECK(stream.push("\xC3\xA9") == "\xC3\xA9");
  CHECK(stream.finish().empty());
  // Ill-formed bytes with nothing held are replaced at once.
  CHECK(stream.push("\x80\x80") == kFFFD + kFFFD);
  CHECK(stream.pending_bytes() == 0);
}
