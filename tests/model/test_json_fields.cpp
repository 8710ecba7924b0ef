// The one JSON field reader (reference/json, docs/design.md "One JSON field
// reader"): typed reads for nlohmann::json and ordered_json alike, every
// refusal in one form, each caller's error through its callback.

#include "checkpoint_files.hpp"

#include <statickv/json/field_reader.hpp>
#include <statickv/json/file.hpp>

#include <catch2/catch.hpp>
#include <nlohmann/json.hpp>

#include <fstream>
#include <stdexcept>
#include <string>

namespace {

struct Refused : std::runtime_error {
  std::string field;
  Refused(const std::string& message, std::string f)
      : std::runtime_error(message), field(std::move(f)) {}
};

template <class Json>
statickv::json::FieldReader<Json> reader(statickv::json::ReaderOptions options = {}) {
  return statickv::json::FieldReader<Json>(
      [](const std::string& field, const std::string& expected, const Json& got) {
        throw Refused(statickv::json::refusal(field, expected, got), field);
      },
      options);
}

/// `read` refuses, naming `field`, with exactly `message`.
template <class Read>
void require_refusal(Read read, const std::string& field, const std::string& message) {
  try {
    read();
    FAIL("expected a refusal of " << field);
  } catch (const Refused& e) {
    CHECK(e.field == field);
    CHECK(std::string(e.what()) == message);
  }
}

}  // namespace

TEMPLATE_TEST_CASE("the field reader reads each type and refuses the rest in one form",
                   "[json_fields]", nlohmann::json, nlohmann::ordered_json) {
  using Json = TestType;
  const auto r = reader<Json>();
  const Json body = Json::parse(
      R"({"n": 7, "big": 18446744073709551615, "x": 0.5, "s": "hi", "b": true, "z": null,
          "f": 8192.0})");
  CHECK(r.integer(body["n"], "n") == 7);
  CHECK(r.number(body["x"], "x") == 0.5);
  CHECK(r.number(body["n"], "n") == 7.0);
  CHECK(r.text(body["s"], "s") == "hi");
  CHECK(r.boolean(body["b"], "b"));
  CHECK(r.given(body, "n"));
  CHECK_FALSE(r.given(body, "z"));  // null is not given
  CHECK_FALSE(r.given(body, "absent"));
  CHECK(r.required(body, "s", "s") == "hi");
  require_refusal([&] { r.integer(body["x"], "x"); }, "x", "x: expected an integer but got 0.5");
  require_refusal([&] { r.integer(body["big"], "big"); }, "big",
                  "big: expected an integer but got 18446744073709551615");
  require_refusal([&] { r.integer(body["f"], "f"); }, "f", "f: expected an integer but got 8192.0");
  require_refusal([&] { r.number(body["s"], "s"); }, "s",
                  "s: expected a finite number but got \"hi\"");
  require_refusal([&] { r.text(body["n"], "n"); }, "n", "n: expected a string but got 7");
  require_refusal([&] { r.boolean(body["s"], "s"); }, "s", "s: expected a boolean but got \"hi\"");
  require_refusal([&] { r.required(body, "z", "where.z"); }, "where.z",
                  "where.z: expected a value but got null");
  require_refusal([&] { r.required(body, "absent", "absent"); }, "absent",
                  "absent: expected a value but got null");
}

TEST_CASE("integral_floats takes an integer written as a float, nothing fractional",
          "[json_fields]") {
  const auto r = reader<nlohmann::json>(statickv::json::ReaderOptions{/*integral_floats=*/true});
  CHECK(r.integer(nlohmann::json(8192.0), "max_position_embeddings") == 8192);
  CHECK(r.integer(nlohmann::json(-3.0), "n") == -3);
  require_refusal([&] { r.integer(nlohmann::json(2.5), "n"); }, "n",
                  "n: expected an integer but got 2.5");
  require_refusal([&] { r.integer(nlohmann::json(1e300), "n"); }, "n",
                  "n: expected an integer but got 1e+300");
}

TEST_CASE("a refusal shows invalid UTF-8 replaced, and a callback that returns is a bug",
          "[json_fields]") {
  const auto r = reader<nlohmann::json>();
  require_refusal([&] { r.integer(nlohmann::json(std::string("a\xff")), "t"); }, "t",
                  "t: expected an integer but got \"a\xEF\xBF\xBD\"");
  const statickv::json::FieldReader<nlohmann::json> returns(
      [](const std::string&, const std::string&, const nlohmann::json&) {});
  CHECK_THROWS_AS(returns.integer(nlohmann::json("x"), "x"), std::logic_error);
}

TEST_CASE("the one file opener names the path in every failure, through the caller's callback",
          "[json]") {
  const statickv::test::checkpoint::TempDir tmp;
  const auto write = [&](const char* name, const std::string& text) {
    std::ofstream(tmp.file(name), std::ios::binary) << text;
    return tmp.file(name);
  };
  const std::string good = write("good.json", R"({"a": 1})");
  const std::string broken = write("broken.json", R"({"a": )");
  const std::string list = write("list.json", "[1, 2]");
  const std::string missing = tmp.file("missing.json");
  using statickv::json::fail_with_runtime_error;
  CHECK(statickv::json::read_json_file(good, fail_with_runtime_error)["a"] == 1);
  CHECK(statickv::json::read_text_file(good, fail_with_runtime_error) == R"({"a": 1})");
  const auto fails = [](const std::function<void()>& fn, const std::string& message) {
    try {
      fn();
    } catch (const std::runtime_error& e) {
      CHECK_THAT(e.what(), Catch::StartsWith(message));
      return;
    }
    FAIL("expected std::runtime_error starting " << message);
  };
  fails([&] { statickv::json::read_json_file(missing, fail_with_runtime_error); },
        missing + ": expected an existing file but got none");
  fails([&] { statickv::json::read_text_file(tmp.dir(), fail_with_runtime_error); },
        tmp.dir() + ": expected an existing file but got none");
  fails([&] { statickv::json::read_json_file(broken, fail_with_runtime_error); },
        broken + ": expected a JSON object but got invalid JSON: ");
  fails([&] { statickv::json::read_json_file(list, fail_with_runtime_error); },
        list + ": expected a JSON object but got array");
  // The caller's own error type: the callback decides what is thrown.
  struct Mine {
    std::string message;
  };
  try {
    statickv::json::read_json_file(missing, [](const std::string& m) { throw Mine{m}; });
    FAIL("expected Mine");
  } catch (const Mine& e) {
    CHECK(e.message == missing + ": expected an existing file but got none");
  }
  // A callback that returns is a bug, not a silent empty result.
  const std::string x = "x";
  CHECK_THROWS_AS(
      statickv::json::parse_json(broken, x.data(), x.data() + 1, "JSON", [](const std::string&) {}),
      std::logic_error);
  CHECK_THROWS_AS(statickv::json::read_text_file(missing, [](const std::string&) {}),
                  std::logic_error);
}
