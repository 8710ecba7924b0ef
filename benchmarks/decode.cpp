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

#include <memory>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string device = "auto";
  std::string dtype;  // default: fp32 on CPU, fp16 on CUDA
  StackShape stack;
  int64_t context = 1024, max_len = 4096;
  int rounds = 40, calls = 4;
  int threads = 0;  // 0: LibTorch's default
  std::string json;
};

Options parse(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv_bench_decode",
                     "decode-step cost, batch-prefix and attend_len ratios");
  flags.add_device(&o.device);
  flags::add_dtype(flags, &o.dtype, at::kHalf);
  add_stack_flags(flags, &o.stack);
  flags.add("--context N", &o.context, "tokens already cached when the step runs", /*min=*/1);
  flags.add("--max-len N", &o.max_len, "cache capacity", /*min=*/2);
  flags.add("--rounds N", &o.rounds, "interleaved samples per variant", /*min=*/1);
  flags.add("--calls N", &o.calls, "steps per sample", /*min=*/1);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.parse(argc, argv);
  check_stack(o.stack);
  check_context(o.context, o.max_len);
  return o;
}

// One cache prefilled with `context` tokens, and the decode step over it.
struct Subject {
  std::unique_ptr<StaticCache> cache;
  int64_t attend_len;
};

// A cache of `max_batch` rows whose first row holds --context random tokens;
// its steps attend to the length (follow_length) or to all max_len slots.
Subject make_subject(const Options& o, at::ScalarType dtype, const at::Device& device,
                     int64_t max_batch, bool follow_length) {
  const StackShape& shape = o.stack;
  const auto opts = at::TensorOptions().dtype(dtype).device(device);
  CacheConfig c;
  c.num_layers = shape.layers;
  c.num_kv_heads = shape.kv_heads;
  c.head_dim = shape.head_dim;
  c.max_batch = max_batch;
  c.max_len = o.max_len;
  c.dtype = dtype;
  c.device = device;
  Subject s{std::make_unique<StaticCache>(c), follow_length ? o.context + 1 : -1};
  at::manual_seed(0);
  StepPlan prefill = s.cache->prepare(at::arange(o.context, opts.dtype(at::kLong)), 1);
  for (int64_t l = 0; l < shape.layers; ++l) {
    const at::Tensor kv = at::randn({1, shape.kv_heads, o.context, shape.head_dim}, opts);
    s.cache->update(l, kv, kv, prefill);
  }
  return s;
}

// Prints the variants' table and the two ratios (median over rounds of the
// paired, same-round ratio, p10..p90), which it returns in `prefix_stats`
// (A/B) and `full_stats` (C/B).
void print_results(const std::vector<Variant>& variants, const std::vector<Stats>& stats,
                   Stats* prefix_stats, Stats* full_stats) {
  fmt::print("{:<46} {:>12} {:>12} {:>12}\n", "variant", "median ms", "p10 ms", "p90 ms");
  for (size_t i = 0; i < variants.size(); ++i) {
    fmt::print("{:<46} {:>12.4f} {:>12.4f} {:>12.4f}\n", variants[i].name, stats[i].median * 1e3,
               stats[i].p10 * 1e3, stats[i].p90 * 1e3);
  }
  // Ratios: median over rounds of the paired (same-round) ratio, p10..p90.
  *prefix_stats = paired_ratio(stats[0], stats[1]);
  *full_stats = paired_ratio(stats[2], stats[1]);
  const double prefix_ratio = prefix_stats->median;
  const double full_ratio = full_stats->median;
  fmt::print("\nbatch-prefix ratio A/B (target <= 1.03): {:.3f}  [p10 {:.3f}, p90 {:.3f}]  {}\n",
             prefix_ratio, prefix_stats->p10, prefix_stats->p90,
             prefix_ratio <= 1.03 ? "ok" : "ABOVE TARGET");
  fmt::print("attend max_len vs length C/B:            {:.3f}  [p10 {:.3f}, p90 {:.3f}]\n",
             full_ratio, full_stats->p10, full_stats->p90);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  flags::set_threads(o.threads);
  c10::InferenceMode inference;  // as inference code runs: no autograd bookkeeping per op
  const at::Device device = flags::parse_device(o.device);
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kHalf);
  const StackShape& shape = o.stack;
  const auto opts = at::TensorOptions().dtype(dtype).device(device);

  Subject prefix = make_subject(o, dtype, device, /*max_batch=*/16, /*follow_length=*/true);
  Subject exact = make_subject(o, dtype, device, /*max_batch=*/1, /*follow_length=*/true);
  Subject full = make_subject(o, dtype, device, /*max_batch=*/1, /*follow_length=*/false);

  const at::Tensor pos = at::full({1}, o.context, opts.dtype(at::kLong));
  const at::Tensor q = at::randn({1, shape.heads, 1, shape.head_dim}, opts);
  const at::Tensor k = at::randn({1, shape.kv_heads, 1, shape.head_dim}, opts);
  const at::Tensor v = at::randn({1, shape.kv_heads, 1, shape.head_dim}, opts);
  auto step = [&](Subject& s) {
    return [&s, &pos, &q, &k, &v, layers = shape.layers] {
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
      shape.layers, shape.heads, shape.kv_heads, shape.head_dim, o.context, o.max_len,
      flags::dtype_name(dtype), device.str());
  fmt::print("{} interleaved rounds x {} steps per variant, {} CPU threads\n\n", o.rounds, o.calls,
             at::get_num_threads());
  const std::vector<Stats> stats =
      measure_interleaved(variants, device, o.rounds, o.calls, /*warmup=*/3);

  Stats prefix_stats, full_stats;
  print_results(variants, stats, &prefix_stats, &full_stats);

  Json json_variants = Json::array();
  for (size_t i = 0; i < variants.size(); ++i) {
    json_variants.push_back(
        Json::object({{"name", variants[i].name}, {"step_s", to_json(stats[i])}}));
  }
  write_json(o.json, Json::object({{"benchmark", "decode_step"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"dtype", flags::dtype_name(dtype)},
                                   {"layers", shape.layers},
                                   {"heads", shape.heads},
                                   {"kv_heads", shape.kv_heads},
                                   {"head_dim", shape.head_dim},
                                   {"context", o.context},
                                   {"max_len", o.max_len},
                                   {"rounds", o.rounds},
                                   {"calls", o.calls},
                                   {"variants", json_variants},
                                   {"batch_prefix_ratio", to_json(prefix_stats)},
                                   {"full_len_ratio", to_json(full_stats)}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_decode");
}
