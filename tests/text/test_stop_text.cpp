// StopText (stop_text.hpp): stop strings on streamed text, whatever the cuts.

#include <statickv/text/stop_text.hpp>

#include <catch2/catch.hpp>

#include <random>
#include <string>
#include <vector>

using statickv::reference::StopText;

namespace {

/// The answer read one character at a time: at the first character that
/// completes a stop string, cut before that stop string (the longest of
/// those it completes).
std::string cut_at_first(const std::string& text, const std::vector<std::string>& stops,
                         bool* stopped) {
  for (size_t end = 1; end <= text.size(); ++end) {
    size_t start = std::string::npos;
    for (const std::string& s : stops) {
      if (s.size() <= end && text.compare(end - s.size(), s.size(), s) == 0) {
        start = std::min(start, end - s.size());
      }
    }
    if (start != std::string::npos) {
      *stopped = true;
      return text.substr(0, start);
    }
  }
  *stopped = false;
  return text;
}

std::string random_text(std::mt19937& rng, size_t n) {
  std::string s;
  for (size_t i = 0; i < n; ++i) s.push_back("abc\n"[rng() % 4]);
  return s;
}

}  // namespace

TEST_CASE("StopText equals a search of the whole text for every cut into pieces", "[stop]") {
  std::mt19937 rng(7);
  for (int trial = 0; trial < 3000; ++trial) {
    const std::string text = random_text(rng, 1 + rng() % 40);
    std::vector<std::string> stops;
    for (size_t k = 0, n = 1 + rng() % 3; k < n; ++k)
      stops.push_back(random_text(rng, 1 + rng() % 4));
    bool want_stopped = false;
    const std::string want = cut_at_first(text, stops, &want_stopped);
    StopText stop(stops);
    std::string sent;
    bool stopped = false;
    for (size_t at = 0; at < text.size() && !stopped;) {
      const size_t len = std::min(text.size() - at, size_t{1} + rng() % 5);
      const StopText::Out out = stop.push(std::string_view(text).substr(at, len));
      sent += out.text, stopped = out.stopped, at += len;
      // Nothing sent is ever taken back: it is a prefix of the answer.
      REQUIRE(want.compare(0, sent.size(), sent) == 0);
    }
    if (!stopped) sent += stop.finish();
    INFO("text " << text << " stops " << stops.size());
    CHECK(stopped == want_stopped);
    CHECK(sent == want);
  }
}

TEST_CASE("StopText holds back a partial match and drops the stop text", "[stop]") {
  StopText stop({"User:", "\n\n"});
  CHECK(stop.push("Hello Us").text == "Hello ");  // "Us" may start "User:"
  const StopText::Out out = stop.push("er: next");
  CHECK(out.stopped);
  CHECK(out.text.empty());
  CHECK(stop.push("more").text.empty());  // after a match, nothing
  StopText none({"zz"});
  CHECK(none.push("abz").text == "ab");
  CHECK(none.finish() == "z");  // the end: what was held goes out
  // Multi-byte characters: a held suffix starts on a character boundary.
  StopText utf8({"\xC3\xA9t\xC3\xA9"});  // "été"
  CHECK(utf8.push("caf\xC3\xA9").text == "caf");
  CHECK(utf8.push("s").text == "\xC3\xA9s");
  // The stop string completed first wins, even if another began earlier.
  StopText order({"bcd", "c"});
  const StopText::Out both = order.push("abcd");
  CHECK(both.stopped);
  CHECK(both.text == "ab");
  CHECK_THROWS_WITH(StopText({"a", ""}), Catch::Contains("stop[1]: expected a non-empty string"));
}
