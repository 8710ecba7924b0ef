// The flag parser's bodies (flags/include/statickv/flags/parser.hpp).

#include <statickv/flags/parser.hpp>

#include <algorithm>
#include <array>
#include <cctype>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <filesystem>

namespace statickv::flags {

namespace detail {

std::string number_text(double value) {
  std::array<char, 32> buffer{};
  const auto result = std::to_chars(buffer.data(), buffer.data() + buffer.size(), value);
  return std::string(buffer.data(), result.ptr);
}

bool starts_with_space(const std::string& text) {
  return !text.empty() && std::isspace(static_cast<unsigned char>(text[0]));
}

}  // namespace detail

int64_t parse_int(const std::string& flag, const std::string& text, int64_t min, int64_t max) {
  return parse_integer<int64_t>(flag, text, min, max);
}

double parse_number(const std::string& flag, const std::string& text, double min, double max) {
  const std::string expected = "expected a finite number" + detail::range_text(min, max);
  char* end = nullptr;
  errno = 0;
  const double value = std::strtod(text.c_str(), &end);
  if (text.empty() || detail::starts_with_space(text) || end != text.c_str() + text.size()) {
    throw FlagError(flag + ": " + expected + " but got '" + text + "'");
  }
  if (!std::isfinite(value) || value < min || value > max) {
    throw FlagError(flag + ": " + expected + " but got " + text);
  }
  return value;
}

std::vector<std::string> split_list(const std::string& text) {
  std::vector<std::string> items;
  size_t begin = 0;
  while (begin <= text.size()) {
    const size_t end = std::min(text.find(',', begin), text.size());
    items.push_back(text.substr(begin, end - begin));
    begin = end + 1;
  }
  return items;
}

std::vector<int64_t> parse_int_list(const std::string& flag, const std::string& text, int64_t min,
                                    int64_t max) {
  std::vector<int64_t> out;
  for (const std::string& item : split_list(text)) {
    if (item.empty()) {
      throw FlagError(flag + ": expected comma-separated integers but got '" + text + "'");
    }
    out.push_back(parse_int(flag, item, min, max));
  }
  return out;
}

namespace {

// "  --name V   help", the help wrapped at 100 columns under itself.
std::string entry(const std::string& name, const std::string& help) {
  constexpr size_t kIndent = 25, kWidth = 100;  // "  " + 22 columns of name + " "
  std::vector<std::string> lines(1);
  size_t begin = 0;
  while (begin < help.size()) {
    const size_t end = std::min(help.find(' ', begin), help.size());
    const std::string word = help.substr(begin, end - begin);
    if (!lines.back().empty() && kIndent + lines.back().size() + 1 + word.size() > kWidth) {
      lines.emplace_back();
    }
    lines.back() += (lines.back().empty() ? "" : " ") + word;
    begin = end + 1;
  }
  std::string out = "  " + name;
  out += std::string(name.size() < 22 ? 22 - name.size() : 0, ' ') + " " + lines[0] + "\n";
  for (size_t i = 1; i < lines.size(); ++i) out += std::string(kIndent, ' ') + lines[i] + "\n";
  return out;
}

std::string one_of(const std::vector<std::string>& choices) {
  std::string out;
  for (size_t i = 0; i < choices.size(); ++i) {
    out += i == 0 ? "" : (i + 1 == choices.size() ? " or " : ", ");
    out += choices[i];
  }
  return out;
}

}  // namespace

Flags::Flags(std::string program, std::string summary)
    : program_(std::move(program)), summary_(std::move(summary)) {}

void Flags::add(const std::string& name, std::string* target, const std::string& help,
                Check check) {
  add_setter(name, help, target->empty() ? "" : "'" + *target + "'",
             [target, check](const std::string& flag, const std::string& v) {
               if (v.empty()) throw FlagError(flag + ": expected a value but got ''");
               if (check) check(flag, v);
               *target = v;
             });
}

void Flags::add(const std::string& name, int64_t* target, const std::string& help, int64_t min,
                int64_t max) {
  add_setter(name, help, std::to_string(*target),
             [target, min, max](const std::string& flag, const std::string& v) {
               *target = parse_int(flag, v, min, max);
             });
}

void Flags::add(const std::string& name, int* target, const std::string& help, int min, int max) {
  add_setter(name, help, std::to_string(*target),
             [target, min, max](const std::string& flag, const std::string& v) {
               *target = parse_integer<int>(flag, v, min, max);
             });
}

void Flags::add(const std::string& name, double* target, const std::string& help, double min,
                double max) {
  add_setter(name, help, detail::number_text(*target),
             [target, min, max](const std::string& flag, const std::string& v) {
               *target = parse_number(flag, v, min, max);
             });
}

void Flags::add_list(const std::string& name, std::vector<std::string>* target,
                     const std::string& help) {
  add_setter(name, help, "", [target](const std::string& flag, const std::string& v) {
    if (v.empty()) throw FlagError(flag + ": expected a value but got ''");
    target->push_back(v);
  });
}

void Flags::add_choice(const std::string& name, std::string* target,
                       std::vector<std::string> choices, const std::string& help) {
  add_setter(name, help, target->empty() ? "" : *target,
             [target, choices](const std::string& flag, const std::string& v) {
               if (std::find(choices.begin(), choices.end(), v) == choices.end()) {
                 throw FlagError(flag + ": expected " + one_of(choices) + " but got '" + v + "'");
               }
               *target = v;
             });
}

void Flags::add_device(std::string* target) {
  add_choice("--device D", target, {"auto", "cpu", "cuda"},
             "auto (cuda when available), cpu or cuda");
}

void Flags::add_output_file(const std::string& name, std::string* target, const std::string& help) {
  add(name, target, help, [](const std::string& flag, const std::string& value) {
    const std::filesystem::path file(value);
    const std::filesystem::path folder = file.has_parent_path() ? file.parent_path() : ".";
    if (!file.has_filename() || !std::filesystem::is_directory(folder)) {
      throw FlagError(flag + ": expected a file in an existing folder but got '" + value + "'");
    }
  });
}

void Flags::add_threads(int* target) {
  add("--threads N", target, "CPU threads for LibTorch (default 0: its own choice)", /*min=*/0);
}

void Flags::add_switch(const std::string& name, bool* target, const std::string& help) {
  switches_[name] = target;
  usage_.push_back({name, help});
}

void Flags::parse(int argc, char** argv) {
  for (int i = 1; i < argc; ++i) take(i, argc, argv);
}

void Flags::take(int& i, int argc, char** argv) {
  std::string arg = argv[i];
  if (arg == "--help" || arg == "-h") {
    std::fputs(usage().c_str(), stdout);
    std::exit(0);
  }
  if (arg.rfind("--", 0) != 0) {
    throw FlagError("unexpected argument '" + arg + "': flags are --name value (see --help)");
  }
  std::string value;
  const size_t eq = arg.find('=');
  const bool inline_value = eq != std::string::npos;
  if (inline_value) {
    value = arg.substr(eq + 1);
    arg.resize(eq);
  }
  if (auto s = switches_.find(arg); s != switches_.end()) {
    if (inline_value)
      throw FlagError(arg + ": expected no value (a switch) but got '" + value + "'");
    *s->second = true;
    given_.insert(arg);
    return;
  }
  auto it = setters_.find(arg);
  if (it == setters_.end()) throw FlagError("unknown flag '" + arg + "' (see --help)");
  if (!inline_value) {
    if (i + 1 >= argc) throw FlagError(arg + ": expected a value but got none");
    value = argv[++i];
    if (value.rfind("--", 0) == 0) {
      throw FlagError(arg + ": expected a value but got the flag '" + value + "'");
    }
  }
  it->second(arg, value);
  given_.insert(arg);
}

std::string Flags::usage() const {
  std::string out = program_ + ": " + summary_ + "\n\nusage: " + program_ + " [flags]\n\n";
  for (const auto& [name, help] : usage_) out += entry(name, help);
  out += entry("--help", "this text");
  return out + notes_;
}

void Flags::add_setter(const std::string& name, const std::string& help, const std::string& value,
                       Setter set) {
  const size_t space = name.find(' ');
  const std::string flag = name.substr(0, space);
  const std::string shown = space == std::string::npos ? name + " V" : name;
  const bool says_default = help.find("default") != std::string::npos;
  setters_[flag] = std::move(set);
  usage_.push_back(
      {shown, help + (says_default || value.empty() ? "" : " (default " + value + ")")});
}

}  // namespace statickv::flags
