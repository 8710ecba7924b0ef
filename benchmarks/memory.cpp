// Cache memory by layer pattern: bytes a HybridCache owns for real models'
// layer patterns against a StaticCache with every layer full, computed with
// estimate_memory_bytes (nothing is allocated, so any size can be shown).
//
//   statickv_bench_memory [--max-len N] [--max-batch N] [--max-chunk N] [--json FILE]

#include <statickv/statickv.hpp>

#include "bench_util.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <string>

using namespace statickv;
using statickv::bench::Json;

namespace {

struct Pattern {
  std::string name;
  int64_t layers, kv_heads, head_dim, window;
  std::vector<LayerType> types;
};

}  // namespace

int main(int argc, char** argv) try {
  int64_t max_len = 32768, max_batch = 1, max_chunk = 512;
  std::string json_path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::puts(
          "statickv_bench_memory: cache bytes, hybrid vs all-full\n"
          "  --max-len N    positions per row (default 32768)\n"
          "  --max-batch N  rows (default 1)\n"
          "  --max-chunk N  largest prefill chunk; rings hold window + chunk - 1 (default 512)\n"
          "  --json FILE    also write the results as JSON");
      return 0;
    }
    if (i + 1 >= argc) throw std::invalid_argument(arg + ": expected a value (see --help)");
    if (arg == "--json") {
      json_path = argv[++i];
      continue;
    }
    const int64_t value = std::stoll(argv[++i]);
    if (arg == "--max-len") {
      max_len = value;
    } else if (arg == "--max-batch") {
      max_batch = value;
    } else if (arg == "--max-chunk") {
      max_chunk = value;
    } else {
      throw std::invalid_argument("unknown flag " + arg + " (see --help)");
    }
  }
  const std::vector<Pattern> patterns = {
      {"Gemma-3-4B-like (5 sliding : 1 full, window 1024)", 34, 4, 256, 1024,
       sliding_then_full(34, 5)},
      {"Gemma-2-9B-like (alternating, window 4096)", 42, 8, 256, 4096, alternating(42)},
      {"Mistral-7B-like (all sliding, window 4096)", 32, 8, 128, 4096, all_sliding(32)},
  };
  fmt::print("cache memory, bf16, max_batch {}, max_len {}, max_chunk {}\n\n", max_batch, max_len,
             max_chunk);
  fmt::print("{:<52} {:>12} {:>12} {:>8}\n", "pattern", "all full", "hybrid", "ratio");
  Json rows = Json::array();
  for (const Pattern& p : patterns) {
    CacheConfig c;
    c.num_layers = p.layers;
    c.num_kv_heads = p.kv_heads;
    c.head_dim = p.head_dim;
    c.max_batch = max_batch;
    c.max_len = max_len;
    c.dtype = at::kBFloat16;
    c.sliding_window = p.window;
    c.max_chunk = std::min(max_chunk, max_len);
    CacheConfig full = c;
    c.layer_types = p.types;
    const double gib = 1024.0 * 1024.0 * 1024.0;
    const double dense = static_cast<double>(estimate_memory_bytes(full));
    const double hybrid = static_cast<double>(estimate_memory_bytes(c));
    fmt::print("{:<52} {:>8.3f} GiB {:>8.3f} GiB {:>8.3f}\n", p.name, dense / gib, hybrid / gib,
               hybrid / dense);
    rows.push_back(Json::object({{"pattern", p.name},
                                 {"layers", p.layers},
                                 {"kv_heads", p.kv_heads},
                                 {"head_dim", p.head_dim},
                                 {"window", p.window},
                                 {"all_full_bytes", dense},
                                 {"hybrid_bytes", hybrid},
                                 {"ratio", hybrid / dense}}));
  }
  statickv::bench::write_json(json_path,
                              Json::object({{"benchmark", "memory"},
                                            {"command", statickv::bench::command_line(argc, argv)},
                                            {"environment", statickv::bench::environment(at::kCPU)},
                                            {"dtype", "bf16"},
                                            {"max_batch", max_batch},
                                            {"max_len", max_len},
                                            {"max_chunk", max_chunk},
                                            {"patterns", rows}}));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "statickv_bench_memory: %s\n", e.what());
  return 2;
}
