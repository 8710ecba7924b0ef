// The kernel switches (include/statickv/kernel_switches.hpp; Note [kernel
// switches], docs/design.md): the list of switchable kernels, and
// STATICKV_DISABLE_KERNELS, read once per process. A process's switches
// are fixed when first read, so the variable's effect is checked in child
// processes of this executable started with it set; in this one it is
// only changed inside a test, and put back as it was.

#include "support.hpp"
#include "support/process.hpp"

#include <statickv/kernel_switches.hpp>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <optional>
#include <string>
#include <vector>

using namespace statickv;
namespace sd = statickv::detail;
using statickv::test::CommandRun;
using statickv::test::require_error;
using statickv::test::run_command;

namespace {

constexpr const char* kVariable = "STATICKV_DISABLE_KERNELS";

// Sets an environment variable (nullptr: unsets it) for its scope, then
// puts back what was there.
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    if (const char* old = std::getenv(name)) old_ = old;
    set(value);
  }
  ~ScopedEnv() { set(old_ ? old_->c_str() : nullptr); }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

  void set(const char* value) {
    if (value != nullptr) {
      setenv(name_, value, /*overwrite=*/1);
    } else {
      unsetenv(name_);
    }
  }

 private:
  const char* name_;
  std::optional<std::string> old_;
};

std::string joined(const std::vector<std::string>& names, const char* separator) {
  std::string out;
  for (const std::string& n : names) out += (out.empty() ? "" : separator) + n;
  return out;
}

// This executable's test `test_name`, run in a child process whose
// STATICKV_DISABLE_KERNELS is `value`.
CommandRun run_child(const std::string& test_name, const std::string& value) {
  const std::string self = std::filesystem::read_symlink("/proc/self/exe").string();
  return run_command("env " + std::string(kVariable) + "='" + value + "' '" + self +
                     "' --reporter compact \"" + test_name + "\" 2>&1");
}

// The name of the test that reports its process's switches (below).
constexpr const char* kChildTest =
    "disabled_kernels and kernel_enabled agree with the STATICKV_DISABLE_KERNELS this process "
    "started with";

}  // namespace

TEST_CASE("kernel_names lists each switchable kernel once, the same list on every call",
          "[kernel_switches]") {
  const std::vector<std::string>& names = kernel_names();
  CHECK(&kernel_names() == &names);
  std::vector<std::string> sorted = names;
  std::sort(sorted.begin(), sorted.end());
  const std::vector<std::string> want = {"act_mul",        "cpu_linear",  "decode_attention",
                                         "decode_prepare", "fp32_logits", "pick_grid",
                                         "rotary_write",   "sample_pick"};
  CHECK(sorted == want);
  for (const std::string& n : names) {
    INFO(n);
    CHECK_FALSE(n.empty());
    CHECK(n.find(',') == std::string::npos);  // usable in the variable's comma list
  }
}

// Run by the next two tests in child processes, with kChildTest's name.
TEST_CASE(
    "disabled_kernels and kernel_enabled agree with the STATICKV_DISABLE_KERNELS this process "
    "started with",
    "[kernel_switches]") {
  const std::vector<std::string>& off = disabled_kernels();
  CHECK(&disabled_kernels() == &off);
  const char* value = std::getenv(kVariable);
  CHECK(off == sd::parse_disabled_kernels(value));
  for (const std::string& n : off) {
    INFO(n);
    CHECK(std::find(kernel_names().begin(), kernel_names().end(), n) != kernel_names().end());
  }
  for (const std::string& n : kernel_names()) {
    INFO(n);
    CHECK(kernel_enabled(n) == (std::find(off.begin(), off.end(), n) == off.end()));
  }
  // What the parent test reads.
  std::printf("kernels switched off: [%s]\n", joined(off, ",").c_str());
}

TEST_CASE(
    "a process started with STATICKV_DISABLE_KERNELS has the named kernels off, the others "
    "on",
    "[kernel_switches]") {
  const CommandRun two = run_child(kChildTest, "act_mul,,cpu_linear,");  // empty items are skipped
  INFO(two.output);
  CHECK(two.status == 0);
  CHECK(two.output.find("kernels switched off: [act_mul,cpu_linear]") != std::string::npos);
  CHECK(two.output.find("1 test case") != std::string::npos);
  const CommandRun none = run_child(kChildTest, "");
  INFO(none.output);
  CHECK(none.status == 0);
  CHECK(none.output.find("kernels switched off: []") != std::string::npos);
}

TEST_CASE(
    "a process started with an unknown name in STATICKV_DISABLE_KERNELS refuses it, naming "
    "the known ones",
    "[kernel_switches][errors]") {
  const CommandRun run = run_child(kChildTest, "act_mul,no_such_kernel");
  INFO(run.output);
  CHECK(run.status != 0);
  CHECK(run.output.find("STATICKV_DISABLE_KERNELS: expected names among " +
                        joined(kernel_names(), ", ") + " but got 'no_such_kernel'") !=
        std::string::npos);
  CHECK(run.output.find("kernels switched off:") == std::string::npos);
  require_error([] { sd::parse_disabled_kernels("decode_prepare,bogus"); },
                {kVariable, "decode_prepare", "cpu_linear", "'bogus'"});
}

TEST_CASE("STATICKV_DISABLE_KERNELS is read once: changing it later switches nothing",
          "[kernel_switches]") {
  const char* original = std::getenv(kVariable);
  const std::optional<std::string> before_value =
      original ? std::optional<std::string>(original) : std::nullopt;
  const std::vector<std::string> before = disabled_kernels();  // read by now at the latest
  const bool act_mul_on = kernel_enabled("act_mul");
  {
    ScopedEnv env(kVariable, act_mul_on ? "act_mul" : "");
    CHECK(disabled_kernels() == before);
    CHECK(kernel_enabled("act_mul") == act_mul_on);
    env.set("no_such_kernel");  // not refused either: nothing reads it again
    CHECK_NOTHROW(disabled_kernels());
    CHECK(disabled_kernels() == before);
  }
  const char* after = std::getenv(kVariable);
  const bool restored =
      after != nullptr ? std::optional<std::string>(after) == before_value : !before_value;
  CHECK(restored);
}
