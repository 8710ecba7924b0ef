// field_error.hpp (statickv::support): FieldError, a c10::Error that carries
// the refused field's name as data beside its usual message; refused_field,
// which reads it back from any c10::Error; and STATICKV_CHECK_FIELD /
// STATICKV_CHECK_FIELD_AT, TORCH_CHECK's form for one field and one element
// of a list field. The head's refusals through them are in test_head.cpp.

#include "support.hpp"
#include "support/sampling.hpp"

#include <statickv/support/field_error.hpp>

#include <string>

using statickv::reference::FieldError;
using statickv::reference::refused_field;

namespace {

/// What `fn` throws, caught as the c10::Error every caller sees.
template <typename Fn>
std::string thrown_field(Fn&& fn, std::string* message) {
  try {
    fn();
  } catch (const c10::Error& e) {
    *message = e.what_without_backtrace();
    return refused_field(e);
  }
  FAIL("expected a c10::Error");
  return {};
}

void check_temperature(double t, int* formatted) {
  const auto counted = [&] {
    ++*formatted;
    return t;
  };
  STATICKV_CHECK_FIELD(t >= 0, "temperature", "expected >= 0 but got ", counted());
}

void check_prompt(const std::vector<int64_t>& prompt, int64_t vocab) {
  for (size_t i = 0; i < prompt.size(); ++i) {
    STATICKV_CHECK_FIELD_AT(prompt[i] < vocab, "prompt", i, "expected a token id below ", vocab,
                            " but got ", prompt[i]);
  }
}

}  // namespace

TEST_CASE("FieldError is a c10::Error with the whole message and the field alone",
          "[sampling][errors]") {
  const c10::SourceLocation where{"fn", "file.cpp", 7};
  const FieldError e("prompt", "prompt[3]: expected a token id but got -1", where);
  CHECK(e.field() == "prompt");
  CHECK(e.msg() == "prompt[3]: expected a token id but got -1");
  CHECK(std::string(e.what_without_backtrace()).rfind("prompt[3]: expected", 0) == 0);
  const c10::Error& as_c10 = e;
  CHECK(refused_field(as_c10) == "prompt");
  // Thrown, it is caught as a plain c10::Error (and std::exception).
  CHECK_THROWS_AS(throw FieldError("top_p", "top_p: expected (0, 1]", where), c10::Error);
  CHECK_THROWS_AS(throw FieldError("top_p", "top_p: expected (0, 1]", where), std::exception);
}

TEST_CASE("refused_field is empty for a refusal that names no one field", "[sampling][errors]") {
  std::string message;
  CHECK(thrown_field([] { TORCH_CHECK(false, "temperature: expected >= 0"); }, &message).empty());
  CHECK(message.find("temperature: expected >= 0") != std::string::npos);
  CHECK(thrown_field(
            [] {
              throw FieldError("n", "n: expected 1", {"f", "g.cpp", 1});
            },
            &message) == "n");
}

TEST_CASE(
    "STATICKV_CHECK_FIELD refuses with the field first in the text and as data, only on failure",
    "[sampling][errors]") {
  int formatted = 0;
  check_temperature(0.5, &formatted);
  check_temperature(0.0, &formatted);
  CHECK(formatted == 0);  // the message is built only for a refusal
  std::string message;
  CHECK(thrown_field([&] { check_temperature(-1.5, &formatted); }, &message) == "temperature");
  CHECK(formatted == 1);
  CHECK(message.rfind("temperature: expected >= 0 but got -1.5", 0) == 0);
  // The same through the tests' shared check (tests/support/sampling.hpp).
  statickv::test::require_field_error([&] { check_temperature(-2, &formatted); }, "temperature",
                                      {"temperature: expected >= 0", "-2"});
}

TEST_CASE("STATICKV_CHECK_FIELD_AT names the element and gives the list field as data",
          "[sampling][errors]") {
  check_prompt({0, 5, 9}, 10);
  std::string message;
  CHECK(thrown_field([] { check_prompt({0, 5, 9, 12}, 10); }, &message) == "prompt");
  CHECK(message.rfind("prompt[3]: expected a token id below 10 but got 12", 0) == 0);
  CHECK(thrown_field([] { check_prompt({10}, 10); }, &message) == "prompt");
  CHECK(message.rfind("prompt[0]: ", 0) == 0);
}

TEST_CASE("the field checks are one statement, so an else after them pairs with the caller's if",
          "[sampling][errors]") {
  const auto check = [](bool outer, int64_t value) {
    std::string path = "none";
    if (outer)
      STATICKV_CHECK_FIELD(value >= 0, "value", "expected >= 0 but got ", value);
    else
      path = "else";
    if (outer) path = "checked";
    return path;
  };
  CHECK(check(true, 1) == "checked");
  CHECK(check(false, -1) == "else");  // the caller's else, not the macro's
  std::string message;
  CHECK(thrown_field([&] { check(true, -1); }, &message) == "value");
  CHECK(message == "value: expected >= 0 but got -1");
}
