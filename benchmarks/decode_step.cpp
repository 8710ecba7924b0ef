// Decode-step benchmark: one decode step (cache write + attention for every
// layer of a model shape), measured side by side for
//   A  a cache of max_batch 16 serving live batch 1 (batch-prefix views),
//   B  a cache of max_batch 1 (the exact-size baseline),
//   C  the same as B but attending all max_len slots (what a static cache
//      without attend_len does),
// and printed as ratios A/B (target <= 1.03) and C/B.
//
//   statickv_bench_decode [--device auto|cpu|cuda] [--dtype fp32|fp16|bf16]
//       [--layers N] [--heads N] [--kv-heads N] [--head-dim N]
//       [--context N] [--max-len N] [--rounds N] [--calls N] [--threads N] [--json FILE]

#include <statickv/statickv.hpp>

#include "bench_util.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <map>
#include <memory>
#include <stdexcept>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string device = "auto";
  std::string dtype;  // default: fp32 on CPU, fp16 on CUDA
  int64_t layers = 16, heads = 32, kv_heads = 8, head_dim = 64;  // Llama-3.2-1B geometry
  int64_t context = 1024, max_len = 4096;
  int rounds = 40, calls = 4;
  int threads = 0;  // 0: LibTorch's default
  std::string json;
};

const char* kUsage = R"(statickv_bench_decode: decode-step cost, batch-prefix and attend_len ratios

  --device auto|cpu|cuda   where to run (auto: cuda when available)
  --dtype fp32|fp16|bf16   cache and activation dtype (default fp32 on cpu, fp16 on cuda)
  --layers N               layers per step (default 16)
  --heads N                query heads (default 32)
  --kv-heads N             key/value heads (default 8)
  --head-dim N             head dimension (default 64)
  --context N              tokens already cached when the step runs (default 1024)
  --max-len N              cache capacity (default 4096)
  --rounds N               interleaved samples per variant (default 40)
  --calls N                steps per sample (default 4)
  --threads N              CPU threads for LibTorch (default: its own choice)
  --json FILE              also write the results as JSON
  --help                   this text
)";

Options parse(int argc, char** argv) {
  Options o;
  std::map<std::string, std::function<void(const std::string&)>> flags = {
      {"--device", [&](const std::string& v) { o.device = v; }},
      {"--dtype", [&](const std::string& v) { o.dtype = v; }},
      {"--layers", [&](const std::string& v) { o.layers = std::stoll(v); }},
      {"--heads", [&](const std::string& v) { o.heads = std::stoll(v); }},
      {"--kv-heads", [&](const std::string& v) { o.kv_heads = std::stoll(v); }},
      {"--head-dim", [&](const std::string& v) { o.head_dim = std::stoll(v); }},
      {"--context", [&](const std::string& v) { o.context = std::stoll(v); }},
      {"--max-len", [&](const std::string& v) { o.max_len = std::stoll(v); }},
      {"--rounds", [&](const std::string& v) { o.rounds = std::stoi(v); }},
      {"--calls", [&](const std::string& v) { o.calls = std::stoi(v); }},
      {"--json", [&](const std::string& v) { o.json = v; }},
      {"--threads", [&](const std::string& v) { o.threads = std::stoi(v); }},
  };
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--help" || arg == "-h") {
      std::fputs(kUsage, stdout);
      std::exit(0);
    }
    auto it = flags.find(arg);
    if (it == flags.end()) throw std::invalid_argument("unknown flag " + arg + " (see --help)");
    if (i + 1 >= argc) throw std::invalid_argument(arg + ": expected a value");
    try {
      it->second(argv[++i]);
    } catch (const std::invalid_argument&) {
      throw std::invalid_argument(arg + ": bad value '" + argv[i] + "'");
    }
  }
  if (o.context < 1 || o.context >= o.max_len) {
    throw std::invalid_argument(fmt::format(
        "--context: expected a value in [1, max_len={}) but got {}", o.max_len, o.context));
  }
  if (o.rounds < 1 || o.calls < 1) throw std::invalid_argument("--rounds/--calls: expected >= 1");
  return o;
}

// One cache prefilled with `context` tokens, and the decode step over it.
struct Subject {
  std::unique_ptr<StaticCache> cache;
  int64_t attend_len;
};

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  if (o.threads > 0) at::set_num_threads(o.threads);
  c10::InferenceMode inference;  // as inference code runs: no autograd bookkeeping per op
  const at::Device device = parse_device(o.device);
  const at::ScalarType dtype =
      parse_dtype(o.dtype.empty() ? (device.is_cuda() ? "fp16" : "fp32") : o.dtype);
  const auto opts = at::TensorOptions().dtype(dtype).device(device);

  auto make = [&](int64_t max_batch, bool follow_length) {
    CacheConfig c;
    c.num_layers = o.layers;
    c.num_kv_heads = o.kv_heads;
    c.head_dim = o.head_dim;
    c.max_batch = max_batch;
    c.max_len = o.max_len;
    c.dtype = dtype;
    c.device = device;
    Subject s{std::make_unique<StaticCache>(c), follow_length ? o.context + 1 : -1};
    at::manual_seed(0);
    StepPlan prefill = s.cache->prepare(at::arange(o.context, opts.dtype(at::kLong)), 1);
    for (int64_t l = 0; l < o.layers; ++l) {
      const at::Tensor kv = at::randn({1, o.kv_heads, o.context, o.head_dim}, opts);
      s.cache->update(l, kv, kv, prefill);
    }
    return s;
  };
  Subject prefix = make(/*max_batch=*/16, /*follow_length=*/true);
  Subject exact = make(/*max_batch=*/1, /*follow_length=*/true);
  Subject full = make(/*max_batch=*/1, /*follow_length=*/false);

  const at::Tensor pos = at::full({1}, o.context, opts.dtype(at::kLong));
  const at::Tensor q = at::randn({1, o.heads, 1, o.head_dim}, opts);
  const at::Tensor k = at::randn({1, o.kv_heads, 1, o.head_dim}, opts);
  const at::Tensor v = at::randn({1, o.kv_heads, 1, o.head_dim}, opts);
  auto step = [&](Subject& s) {
    return [&s, &pos, &q, &k, &v, layers = o.layers] {
      // Rewrites position `context` every call, so the length stays fixed.
      StepPlan plan = s.cache->prepare(pos, /*live_batch=*/1, s.attend_len);
      for (int64_t l = 0; l < layers; ++l) {
        KV kv = s.cache->update(l, k, v, plan);
        sdpa_attention(q, kv.keys, kv.values, plan.additive_mask(l));
      }
    };
  };
  const std::vector<Variant> variants = {
      {"max_batch 16, live 1, attend_len = length", step(prefix)},
      {"max_batch 1,  live 1, attend_len = length", step(exact)},
      {"max_batch 1,  live 1, attend_len = max_len", step(full)},
  };

  fmt::print(
      "statickv decode step: {} layers, {} q / {} kv heads x {}, context {}, max_len {}, {} on "
      "{}\n",
      o.layers, o.heads, o.kv_heads, o.head_dim, o.context, o.max_len, dtype_name(dtype),
      device.str());
  fmt::print("{} interleaved rounds x {} steps per variant, {} CPU threads\n\n", o.rounds, o.calls,
             at::get_num_threads());
  const std::vector<Stats> stats =
      measure_interleaved(variants, device, o.rounds, o.calls, /*warmup=*/3);

  fmt::print("{:<46} {:>12} {:>12} {:>12}\n", "variant", "median ms", "p10 ms", "p90 ms");
  for (size_t i = 0; i < variants.size(); ++i) {
    fmt::print("{:<46} {:>12.4f} {:>12.4f} {:>12.4f}\n", variants[i].name, stats[i].median * 1e3,
               stats[i].p10 * 1e3, stats[i].p90 * 1e3);
  }
  // Ratios: median over rounds of the paired (same-round) ratio, p10..p90.
  const Stats prefix_stats = paired_ratio(stats[0], stats[1]);
  const Stats full_stats = paired_ratio(stats[2], stats[1]);
  const double prefix_ratio = prefix_stats.median;
  const double full_ratio = full_stats.median;
  fmt::print("\nbatch-prefix ratio A/B (target <= 1.03): {:.3f}  [p10 {:.3f}, p90 {:.3f}]  {}\n",
             prefix_ratio, prefix_stats.p10, prefix_stats.p90,
             prefix_ratio <= 1.03 ? "ok" : "ABOVE TARGET");
  fmt::print("attend max_len vs length C/B:            {:.3f}  [p10 {:.3f}, p90 {:.3f}]\n",
             full_ratio, full_stats.p10, full_stats.p90);

  Json json_variants = Json::array();
  for (size_t i = 0; i < variants.size(); ++i) {
    json_variants.push_back(
        Json::object({{"name", variants[i].name}, {"step_s", to_json(stats[i])}}));
  }
  write_json(o.json, Json::object({{"benchmark", "decode_step"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"dtype", dtype_name(dtype)},
                                   {"layers", o.layers},
                                   {"heads", o.heads},
                                   {"kv_heads", o.kv_heads},
                                   {"head_dim", o.head_dim},
                                   {"context", o.context},
                                   {"max_len", o.max_len},
                                   {"rounds", o.rounds},
                                   {"calls", o.calls},
                                   {"variants", json_variants},
                                   {"batch_prefix_ratio", to_json(prefix_stats)},
                                   {"full_len_ratio", to_json(full_stats)}}));
  return 0;
} catch (const std::exception& e) {
  std::fprintf(stderr, "statickv_bench_decode: %s\n", e.what());
  return 2;
}
