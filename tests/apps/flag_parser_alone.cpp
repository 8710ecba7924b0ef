// The flag parser links and runs without LibTorch (flags/: the parser is
// torch-free; devices and dtypes are statickv_flags' torch half). Built
// against statickv_flag_parser alone, so a torch header reaching parser.hpp
// fails the build; the run checks a few values and one refusal, and exits
// 0. The parser's behaviour in full: test_apps.cpp.

#include <statickv/flags/parser.hpp>

#include <cstdio>
#include <string>

int main() {
  using statickv::flags::FlagError;
  using statickv::flags::Flags;
  int64_t len = 8;
  double temperature = 1.0;
  bool quiet = false;
  Flags flags("flag_parser_alone", "the parser without LibTorch");
  flags.add("--max-len N", &len, "capacity", /*min=*/1);
  flags.add("--temperature T", &temperature, "sampling temperature", /*min=*/0.0);
  flags.add_switch("--quiet", &quiet, "print nothing");
  char* good[] = {const_cast<char*>("p"), const_cast<char*>("--max-len=64"),
                  const_cast<char*>("--temperature"), const_cast<char*>("0.5"),
                  const_cast<char*>("--quiet")};
  flags.parse(5, good);
  if (len != 64 || temperature != 0.5 || !quiet) {
    std::fprintf(stderr, "parsed %lld %g %d\n", static_cast<long long>(len), temperature, quiet);
    return 1;
  }
  char* bad[] = {const_cast<char*>("p"), const_cast<char*>("--max-len"), const_cast<char*>("0")};
  try {
    flags.parse(3, bad);
  } catch (const FlagError& e) {
    const std::string want = "--max-len: expected an integer >= 1 but got 0";
    if (e.what() == want) return 0;
    std::fprintf(stderr, "message: %s\n", e.what());
    return 1;
  }
  std::fprintf(stderr, "--max-len 0 was accepted\n");
  return 1;
}
