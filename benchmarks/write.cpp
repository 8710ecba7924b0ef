// Cache write cost: what storing one decode step's keys and values costs per
// layer (K and V together), measured side by side for
//   slice copy      copy_ into a narrowed slice of a preallocated buffer at a
//                   host-known position: the floor (not graph-safe: the
//                   position is baked into the view)
//   static [q]      StaticCache::update with shared positions (index_copy_ dim 2)
//   static [b,q]    StaticCache::update with per-row positions (flat index_copy_)
//   hybrid          HybridCache::update, Gemma-3-like 5 sliding : 1 full layers
//   dynamic cat     torch::cat of the past (context tokens) and the new token
// and, once per step (not per layer), prepare() for the full-only and the
// hybrid cache. Ratios are to the slice copy.
//
//   statickv_bench_write [--device D] [--batches 1,16] [--context N] ...

#include <statickv/statickv.hpp>

#include "bench_util.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <memory>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string device = "auto", dtype, batches = "1,16", json;
  StackShape stack;  // Llama-3.2-1B geometry; heads unused (no attention)
  int64_t context = 512, max_len = 1024, window = 256;
  int rounds = 30, calls = 20, threads = 0;
};

Options parse_options(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv_bench_write",
                     "cache write cost per layer per step, and prepare() cost");
  flags.add_device(&o.device);
  flags::add_dtype(flags, &o.dtype, at::kHalf);
  flags.add("--batches LIST", &o.batches, "comma-separated live batch sizes (max_batch = largest)");
  add_stack_flags(flags, &o.stack, /*with_heads=*/false);
  flags.add("--context N", &o.context, "tokens cached before the step", /*min=*/1);
  flags.add("--max-len N", &o.max_len, "cache capacity", /*min=*/2);
  flags.add("--window N", &o.window, "sliding window of the hybrid cache's sliding layers",
            /*min=*/1);
  flags.add("--rounds N", &o.rounds, "interleaved samples per variant", /*min=*/1);
  flags.add("--calls N", &o.calls, "steps per sample", /*min=*/1);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.parse(argc, argv);
  check_context(o.context, o.max_len);
  return o;
}

// Prints one live batch's table (times per layer, prepare per step); its
// JSON group.
Json report_batch(const std::vector<Variant>& variants, const std::vector<Stats>& stats,
                  int64_t layers, int64_t b, int64_t max_batch) {
  fmt::print("\nlive batch {} (max_batch {})\n", b, max_batch);
  fmt::print("{:<16} {:>14} {:>10} {:>10} {:>24}\n", "variant", "median us", "p10 us", "p90 us",
             "ratio to slice copy");
  Json rows = Json::array();
  for (size_t i = 0; i < variants.size(); ++i) {
    const bool per_step = variants[i].name.rfind("prepare", 0) == 0;
    const double scale = per_step ? 1e6 : 1e6 / static_cast<double>(layers);
    const Stats ratio = paired_ratio(stats[i], stats[0]);
    fmt::print("{:<16} {:>14.2f} {:>10.2f} {:>10.2f} {:>24}\n",
               variants[i].name + (per_step ? " *" : ""), stats[i].median * scale,
               stats[i].p10 * scale, stats[i].p90 * scale, per_step ? "" : ratio_text(ratio));
    rows.push_back(Json::object({{"name", variants[i].name},
                                 {"per", per_step ? "step" : "layer"},
                                 {"median_us", stats[i].median * scale},
                                 {"p10_us", stats[i].p10 * scale},
                                 {"p90_us", stats[i].p90 * scale},
                                 {"ratio_to_slice_copy", to_json(ratio)}}));
  }
  fmt::print("* once per step (all layers), not per layer\n");
  return Json::object({{"live_batch", b}, {"rows", rows}});
}

// Every write variant at live batch b, interleaved; prints and returns its group.
Json measure_batch(const Options& o, const CacheConfig& base, const CacheConfig& hybrid_config,
                   int64_t b) {
  const auto opts = at::TensorOptions().dtype(base.dtype).device(base.device);
  const auto long_opts = opts.dtype(at::kLong);
  const int64_t L = o.stack.layers;
  const int64_t p = o.context;  // the position each step writes
  StaticCache shared(base), per_row(base), prep_full(base);
  HybridCache hybrid(hybrid_config), prep_hybrid(hybrid_config);
  const at::Tensor k = at::randn({b, o.stack.kv_heads, 1, o.stack.head_dim}, opts);
  const at::Tensor v = at::randn({b, o.stack.kv_heads, 1, o.stack.head_dim}, opts);
  const at::Tensor pos = at::full({1}, p, long_opts);
  const at::Tensor row_pos = at::full({b, 1}, p, long_opts);
  // Steps are planned once; update() then only writes (what is timed).
  const StepPlan shared_step = shared.prepare(pos, b, p + 1);
  const StepPlan row_step = per_row.prepare(row_pos, b, p + 1);
  const StepPlan hybrid_step = hybrid.prepare(pos, b, p + 1);
  std::vector<at::Tensor> slice_k, slice_v, past_k, past_v;
  for (int64_t l = 0; l < L; ++l) {
    slice_k.push_back(
        at::zeros({base.max_batch, o.stack.kv_heads, o.max_len, o.stack.head_dim}, opts));
    slice_v.push_back(at::zeros_like(slice_k.back()));
    past_k.push_back(at::randn({b, o.stack.kv_heads, o.context, o.stack.head_dim}, opts));
    past_v.push_back(at::randn({b, o.stack.kv_heads, o.context, o.stack.head_dim}, opts));
  }
  auto per_layer = [&](auto&& write) {
    return [&, write] {
      for (int64_t l = 0; l < L; ++l) write(l);
    };
  };
  std::vector<Variant> variants = {
      {"slice copy", per_layer([&](int64_t l) {
         slice_k[l].narrow(0, 0, b).narrow(2, p, 1).copy_(k);
         slice_v[l].narrow(0, 0, b).narrow(2, p, 1).copy_(v);
       })},
      {"static [q]", per_layer([&](int64_t l) { shared.update(l, k, v, shared_step); })},
      {"static [b,q]", per_layer([&](int64_t l) { per_row.update(l, k, v, row_step); })},
      {"hybrid 5:1", per_layer([&](int64_t l) { hybrid.update(l, k, v, hybrid_step); })},
      {"dynamic cat", per_layer([&](int64_t l) {
         at::cat({past_k[l], k}, 2);
         at::cat({past_v[l], v}, 2);
       })},
      // Once per step; reported per step.
      {"prepare full", [&] { prep_full.prepare(pos, b, p + 1); }},
      {"prepare hybrid", [&] { prep_hybrid.prepare(pos, b, p + 1); }},
  };
  const std::vector<Stats> stats =
      measure_interleaved(variants, base.device, o.rounds, o.calls, /*warmup=*/3);
  return report_batch(variants, stats, L, b, base.max_batch);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  const std::vector<int64_t> batches = flags::parse_int_list("--batches", o.batches, /*min=*/1);
  flags::set_threads(o.threads);
  c10::InferenceMode inference;  // as inference code runs: no autograd bookkeeping per op
  const at::Device device = flags::parse_device(o.device);
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kHalf);
  const int64_t max_batch = *std::max_element(batches.begin(), batches.end());
  const int64_t L = o.stack.layers;

  CacheConfig base;
  base.num_layers = L;
  base.num_kv_heads = o.stack.kv_heads;
  base.head_dim = o.stack.head_dim;
  base.max_batch = max_batch;
  base.max_len = o.max_len;
  base.dtype = dtype;
  base.device = device;
  base.max_chunk = 1;  // decode only: rings hold exactly the window
  CacheConfig hybrid_config = base;
  hybrid_config.layer_types = sliding_then_full(L, 5);
  hybrid_config.sliding_window = o.window;

  fmt::print(
      "statickv write cost: {} layers, {} kv heads x {}, context {}, max_len {}, {} on {}, {} CPU "
      "threads\n",
      L, o.stack.kv_heads, o.stack.head_dim, o.context, o.max_len, flags::dtype_name(dtype),
      device.str(), at::get_num_threads());
  fmt::print("{} interleaved rounds x {} steps per variant; times per layer per step (K and V)\n",
             o.rounds, o.calls);

  Json groups = Json::array();
  for (int64_t b : batches) groups.push_back(measure_batch(o, base, hybrid_config, b));

  write_json(o.json, Json::object({{"benchmark", "write_cost"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"dtype", flags::dtype_name(dtype)},
                                   {"layers", L},
                                   {"kv_heads", o.stack.kv_heads},
                                   {"head_dim", o.stack.head_dim},
                                   {"context", o.context},
                                   {"max_len", o.max_len},
                                   {"window", o.window},
                                   {"max_batch", max_batch},
                                   {"rounds", o.rounds},
                                   {"calls", o.calls},
                                   {"batches", groups}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_write");
}
