// Cache memory by layer pattern: bytes a HybridCache owns for real models'
// layer patterns against a StaticCache with every layer full, computed with
// estimate_memory_bytes (nothing is allocated, so any size can be shown).
//
//   statickv_bench_memory [--max-len N] [--max-batch N] [--max-chunk N] [--json FILE]

#include <statickv/statickv.hpp>

#include "bench_util.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <string>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Pattern {
  std::string name;
  int64_t layers, kv_heads, head_dim, window;
  std::vector<LayerType> types;
};

}  // namespace

int main(int argc, char** argv) try {
  int64_t max_len = 32768, max_batch = 1, max_chunk = 0;
  std::string json_path;
  flags::Flags flags("statickv_bench_memory", "cache bytes, hybrid vs all-full");
  flags.add("--max-len N", &max_len, "positions per row", /*min=*/1);
  flags.add("--max-batch N", &max_batch, "rows", /*min=*/1);
  flags.add("--max-chunk N", &max_chunk,
            "largest prefill chunk; rings hold window + chunk - 1 (default 0: min(512, max-len))",
            /*min=*/0);
  add_json_flag(flags, &json_path);
  flags.parse(argc, argv);
  if (max_chunk > max_len) {
    throw flags::FlagError(
        fmt::format("--max-chunk: expected at most max_len={} but got {}", max_len, max_chunk));
  }
  if (max_chunk == 0) max_chunk = std::min<int64_t>(512, max_len);
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
    c.max_chunk = max_chunk;
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
  write_json(json_path, Json::object({{"benchmark", "memory"},
                                      {"command", command_line(argc, argv)},
                                      {"environment", environment(at::kCPU)},
                                      {"dtype", "bf16"},
                                      {"max_batch", max_batch},
                                      {"max_len", max_len},
                                      {"max_chunk", max_chunk},
                                      {"patterns", rows}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_memory");
}
