// Runs a fuzz target without libFuzzer (any compiler; linked with each
// fuzz_<name>.cpp as statickv_fuzz_<name>_replay): each file argument (or
// every file of a directory argument) is one input, and `--random N` adds N
// inputs of random bytes from a fixed seed. Used by ctest (and the sanitizer
// build) to replay the target's corpus, and to reproduce a crash a fuzz run
// saved:
//   statickv_fuzz_cache_replay build-fuzz/cache-crash-<sha1>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <random>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size);
std::string statickv_fuzz_summary();

namespace {

void run_file(const std::filesystem::path& path) {
  std::ifstream file(path, std::ios::binary);
  const std::vector<char> bytes((std::istreambuf_iterator<char>(file)),
                                std::istreambuf_iterator<char>());
  LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t*>(bytes.data()), bytes.size());
}

}  // namespace

int main(int argc, char** argv) {
  long inputs = 0;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--random" && i + 1 < argc) {
      const long count = std::strtol(argv[++i], nullptr, 10);
      std::mt19937_64 rng(20261201);
      for (long n = 0; n < count; ++n, ++inputs) {
        std::vector<uint8_t> bytes(static_cast<size_t>(rng() % 512));
        for (auto& b : bytes) b = static_cast<uint8_t>(rng());
        LLVMFuzzerTestOneInput(bytes.data(), bytes.size());
      }
    } else if (std::filesystem::is_directory(arg)) {
      for (const auto& entry : std::filesystem::directory_iterator(arg)) {
        if (entry.is_regular_file()) {
          run_file(entry.path());
          ++inputs;
        }
      }
    } else {
      run_file(arg);
      ++inputs;
    }
  }
  std::printf("%s: %ld inputs, no failure; %s\n", argv[0], inputs, statickv_fuzz_summary().c_str());
  return 0;
}
