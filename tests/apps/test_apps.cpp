// The programs' shared parts, in-process: the flag parser refuses what it
// cannot honour by name, and the run comparison behind statickv-demo's
// verdict (Note [comparing with the baseline]) accepts rounding and near
// ties but not a real difference.

#include <statickv/apps/compare.hpp>
#include <statickv/flags/flags.hpp>

// After LibTorch's headers: Catch2's CHECK must win over c10's logging CHECK.
#include <catch2/catch.hpp>

#include <cmath>
#include <string>
#include <vector>

using namespace statickv::apps;
namespace flags = statickv::flags;

namespace {

// Runs `fn` and requires a FlagError whose message holds every fragment.
template <typename Fn>
void require_flag_error(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
  } catch (const flags::FlagError& e) {
    const std::string what = e.what();
    INFO("message: " << what);
    for (const auto& fragment : fragments) CHECK(what.find(fragment) != std::string::npos);
    return;
  }
  FAIL("expected a flags::FlagError mentioning " << fragments.front());
}

// Flags::parse over {"prog", args...}.
void parse(flags::Flags& flags, std::vector<std::string> args) {
  args.insert(args.begin(), "prog");
  std::vector<char*> argv;
  for (auto& a : args) argv.push_back(a.data());
  flags.parse(static_cast<int>(argv.size()), argv.data());
}

}  // namespace

TEST_CASE("integers are taken whole and in range, or refused naming the flag", "[flags]") {
  CHECK(flags::parse_int("--n", "42") == 42);
  CHECK(flags::parse_int("--n", "-7") == -7);
  CHECK(flags::parse_int("--n", "9223372036854775807") == INT64_MAX);
  require_flag_error([] { flags::parse_int("--n", "0.5garbage"); },
                     {"--n: expected an integer but got '0.5garbage'"});
  require_flag_error([] { flags::parse_int("--n", ""); }, {"--n:", "got ''"});
  require_flag_error([] { flags::parse_int("--n", " 3"); }, {"--n:", "got ' 3'"});
  require_flag_error([] { flags::parse_int("--n", "0x10"); }, {"--n:", "got '0x10'"});
  require_flag_error([] { flags::parse_int("--n", "-3", /*min=*/0); },
                     {"--n: expected an integer >= 0 but got -3"});
  require_flag_error([] { flags::parse_int("--n", "9", /*min=*/1, /*max=*/8); },
                     {"--n: expected an integer in [1, 8] but got 9"});
  require_flag_error([] { flags::parse_int("--n", "99999999999999999999"); },
                     {"--n: expected an integer but got 99999999999999999999 (too large)"});
  require_flag_error([] { flags::parse_integer<int>("--n", "4294967297", /*min=*/1); },
                     {"--n: expected an integer >= 1 but got 4294967297 (too large)"});
}

TEST_CASE("numbers must be finite, whole and in range", "[flags]") {
  CHECK(flags::parse_number("--x", "0.25") == 0.25);
  CHECK(flags::parse_number("--x", "1e-3") == 1e-3);
  CHECK(flags::parse_number("--x", "1e-999") == 0.0);  // underflow: the nearest double
  for (const char* bad : {"nan", "inf", "-inf", "1e999"}) {
    INFO(bad);
    require_flag_error([&] { flags::parse_number("--x", bad); },
                       {"--x: expected a finite number but got " + std::string(bad)});
  }
  require_flag_error([] { flags::parse_number("--x", "0.5garbage"); },
                     {"--x:", "got '0.5garbage'"});
  require_flag_error([] { flags::parse_number("--x", "-1", /*min=*/0.0); },
                     {"--x: expected a finite number >= 0 but got -1"});
}

TEST_CASE("integer lists refuse empty items and out-of-range values", "[flags]") {
  CHECK(flags::parse_int_list("--l", "1,16,4") == std::vector<int64_t>({1, 16, 4}));
  require_flag_error([] { flags::parse_int_list("--l", "1,,2"); },
                     {"--l: expected comma-separated"});
  require_flag_error([] { flags::parse_int_list("--l", "1,"); }, {"--l: expected comma-separated"});
  require_flag_error([] { flags::parse_int_list("--l", "2,1", /*min=*/2); },
                     {"--l:", ">= 2", "got 1"});
}

TEST_CASE("flags::Flags sets values, switches and choices, and knows what was given", "[flags]") {
  flags::Flags flags("prog", "a test");
  int64_t n = 5;
  int k = 0;
  double x = 1.5;
  std::string s, c = "a";
  bool on = false;
  flags.add("--n N", &n, "a count", /*min=*/1);
  flags.add("--k", &k, "an int");
  flags.add("--x X", &x, "a number", /*min=*/0.0);
  flags.add("--s", &s, "a string");
  flags.add_choice("--c", &c, {"a", "b"}, "a choice");
  flags.add_switch("--on", &on, "a switch");
  parse(flags, {"--n", "7", "--x=0.5", "--s", "-1", "--c", "b", "--on"});
  CHECK(n == 7);
  CHECK(x == 0.5);
  CHECK(s == "-1");  // a value may start with one dash
  CHECK(c == "b");
  CHECK(on);
  CHECK(flags.given("--n"));
  CHECK_FALSE(flags.given("--k"));
  const std::string usage = flags.usage();
  CHECK(usage.find("--n N") != std::string::npos);
  CHECK(usage.find("a count (default 5)") != std::string::npos);  // the value at add()
  CHECK(usage.find("--k V") != std::string::npos);
}

TEST_CASE("flags::Flags refuses unknown flags, missing values and values for switches", "[flags]") {
  flags::Flags flags("prog", "a test");
  int64_t n = 5;
  std::string c;
  bool on = false;
  flags.add("--n", &n, "a count", /*min=*/1);
  flags.add_choice("--c", &c, {"a", "b"}, "a choice");
  flags.add_switch("--on", &on, "a switch");
  require_flag_error([&] { parse(flags, {"--m", "1"}); }, {"unknown flag '--m'"});
  require_flag_error([&] { parse(flags, {"--n"}); }, {"--n: expected a value but got none"});
  require_flag_error(
      [&] {
        parse(flags, {"--n", "--on"});
      },
      {"--n: expected a value but got the flag '--on'"});
  require_flag_error([&] { parse(flags, {"--n", "0"}); }, {"--n: expected an integer >= 1"});
  require_flag_error([&] { parse(flags, {"--on=1"}); }, {"--on: expected no value", "'1'"});
  require_flag_error([&] { parse(flags, {"--c", "d"}); }, {"--c: expected a or b but got 'd'"});
  require_flag_error([&] { parse(flags, {"loose"}); }, {"unexpected argument 'loose'"});
  std::string text;
  flags.add("--text", &text, "a string");
  require_flag_error(
      [&] {
        parse(flags, {"--text", ""});
      },
      {"--text: expected a value but got ''"});
}

TEST_CASE("dtypes default by device and refuse unknown names", "[flags]") {
  CHECK(flags::parse_dtype("", at::kCPU, at::kHalf) == at::kFloat);
  CHECK(flags::parse_dtype("", at::Device(at::kCUDA, 0), at::kHalf) == at::kHalf);
  CHECK(flags::parse_dtype("bf16", at::kCPU) == at::kBFloat16);
  CHECK(flags::parse_dtype("float16", at::kCPU) == at::kHalf);
  require_flag_error([] { flags::parse_dtype("fp8", at::kCPU); }, {"--dtype:", "got 'fp8'"});
  require_flag_error([] { flags::parse_device("gpu"); }, {"--device: expected auto, cpu or cuda"});
  CHECK(flags::dtype_name(at::kBFloat16) == "bf16");
}

namespace {

// One prompt's logits [steps, 3] from rows of three values.
at::Tensor logits_of(const std::vector<std::vector<float>>& rows) {
  std::vector<float> flat;
  for (const auto& r : rows) flat.insert(flat.end(), r.begin(), r.end());
  return at::tensor(flat).view({static_cast<int64_t>(rows.size()), 3});
}

}  // namespace

TEST_CASE("identical runs agree at every step", "[compare]") {
  const at::Tensor l = logits_of({{1, 0, 0}, {0, 2, 0}});
  const Comparison c = compare_runs({{0, 1}}, {l}, {{0, 1}}, {l.clone()});
  CHECK(c.max_diff == 0.0);
  CHECK(c.steps == 2);
  CHECK(c.divergences.empty());
  CHECK(judge(c, tolerance_for(at::kFloat), /*greedy=*/true).ok());
}

TEST_CASE("a token flipped at a near tie is rounding and later steps are not compared",
          "[compare]") {
  // Step 1 nearly ties tokens 1 and 2 (margin 0.05 in the baseline); from
  // step 2 on the runs decode different sequences, whose logits differ a lot.
  const at::Tensor ours = logits_of({{3, 0, 0}, {0, 1.0f, 1.04f}, {9, -9, 0}});
  const at::Tensor base = logits_of({{3.1f, 0, 0}, {0, 1.05f, 1.0f}, {-9, 9, 0}});
  const Comparison c = compare_runs({{0, 2, 0}}, {ours}, {{0, 1, 1}}, {base});
  CHECK(c.steps == 2);  // through the first differing step, not past it
  CHECK(c.max_diff == Approx(0.1).margin(1e-6));
  REQUIRE(c.divergences.size() == 1);
  CHECK(c.divergences[0].step == 1);
  CHECK(c.divergences[0].ours == 2);
  CHECK(c.divergences[0].baseline == 1);
  CHECK(c.divergences[0].margin == Approx(0.05).margin(1e-6));
  CHECK(judge(c, tolerance_for(at::kBFloat16), /*greedy=*/true).ok());
  // In fp32 the same numbers are far outside rounding.
  CHECK_FALSE(judge(c, tolerance_for(at::kFloat), /*greedy=*/true).ok());
}

TEST_CASE("a greedy token that differs past a near tie is a mismatch", "[compare]") {
  // Logits within bf16's tolerance, but the baseline prefers its token by 0.3.
  const at::Tensor ours = logits_of({{1.0f, 1.2f, 0}});
  const at::Tensor base = logits_of({{1.3f, 1.0f, 0}});
  const Comparison c = compare_runs({{1}}, {ours}, {{0}}, {base});
  const Verdict v = judge(c, tolerance_for(at::kBFloat16), /*greedy=*/true);
  CHECK(v.logits_ok);
  REQUIRE(v.unexplained);
  CHECK(v.unexplained->margin == Approx(0.3).margin(1e-6));
  CHECK_FALSE(v.ok());
  // Sampling draws near any boundary: agreeing logits are all it can show.
  CHECK(judge(c, tolerance_for(at::kBFloat16), /*greedy=*/false).ok());
}

TEST_CASE("logits past the tolerance or NaN are a mismatch", "[compare]") {
  const at::Tensor base = logits_of({{1, 0, 0}});
  const Comparison far = compare_runs({{0}}, {logits_of({{1.0f, 0, 0.6f}})}, {{0}}, {base});
  CHECK_FALSE(judge(far, tolerance_for(at::kBFloat16), /*greedy=*/true).ok());
  const Comparison nan = compare_runs({{0}}, {logits_of({{1.0f, NAN, 0}})}, {{0}}, {base});
  CHECK(std::isnan(nan.max_diff));
  CHECK_FALSE(judge(nan, tolerance_for(at::kFloat), /*greedy=*/true).logits_ok);
}
