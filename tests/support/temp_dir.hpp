#pragma once
// A fresh temporary directory per use, for tests that write files
// (checkpoints, tokenizer and template files).

#include <catch2/catch.hpp>

#include <unistd.h>

#include <atomic>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <system_error>
#include <vector>

namespace statickv::test {

namespace fs = std::filesystem;

/// A fresh directory under the system temp directory, removed with its
/// contents at the end of the test.
class TempDir {
 public:
  TempDir() {
    static std::atomic<int> counter{0};
    std::random_device random;
    path_ =
        fs::temp_directory_path() / ("statickv-test-" + std::to_string(::getpid()) + "-" +
                                     std::to_string(counter++) + "-" + std::to_string(random()));
    fs::create_directories(path_);
  }
  // Not fs::remove_all: the PyPI libtorch.so exports its own copy of
  // std::filesystem, and its remove_all crashes on a non-empty directory.
  // The directory is flat, so removing each entry then the directory is enough.
  ~TempDir() {
    std::error_code ignored;
    std::vector<fs::path> entries;
    for (const auto& entry : fs::directory_iterator(path_, ignored))
      entries.push_back(entry.path());
    for (const fs::path& entry : entries) fs::remove(entry, ignored);
    fs::remove(path_, ignored);
  }
  // Owns the directory on disk.
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;

  std::string dir() const { return path_.string(); }
  std::string file(const std::string& name) const { return (path_ / name).string(); }
  /// Writes `text` to the file `name` in the directory, replacing it.
  void write(const std::string& name, const std::string& text) const {
    std::ofstream out(path_ / name, std::ios::binary | std::ios::trunc);
    out << text;
    REQUIRE(out.good());
  }

 private:
  fs::path path_;
};

}  // namespace statickv::test
