// Reference-model decode step: batch-prefix cost, eager vs CUDA graphs,
// tokens/s and achieved memory bandwidth.
//
// Variants, measured interleaved in one process (same model, same context):
//   16/1   a cache of max_batch 16 serving live batch 1 (batch-prefix views)
//   1/1    a cache of max_batch 1 (the exact-size baseline)
//   16/16  the max_batch 16 cache serving all 16 rows
// each eager and, on CUDA, replayed from a CUDA graph (GraphRunner); with
// --fused each also through the fused decoder path (Note [fused decode
// path]), side by side, with the kernels a captured batch-1 step launches
// per path counted from its graph (cudaGraphGetNodes). Prints
// the batch-prefix ratio 16/1 : 1/1 (target <= 1.03), graph speed-ups, and
// the bandwidth a step achieves: (weight bytes + KV bytes read per step) /
// step time, against a device copy measured in the same process.
//
//   statickv_bench_model [--device D] [--shape S] [--dtype T] [--context N] ...

#include "bench_model.hpp"

#include <statickv/apps/storage_flags.hpp>

#include <fmt/format.h>

#include <cstdio>
#include <memory>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string device = "auto", shape = "llama-3.2-1b", dtype, json, kv_dtype;
  int64_t context = 1024, max_len = 2048, max_batch = 16;
  int rounds = 15, calls = 2, threads = 0;
  bool no_graphs = false, no_full_batch = false, fused = false;
};

// One cache and the decode step over it, eager or through a GraphRunner,
// for each decoder path ([0] plain, [1] fused).
struct Subject {
  std::unique_ptr<StaticCache> cache;
  std::unique_ptr<reference::CacheBackend> backend[2];
  std::unique_ptr<GraphRunner> runner[2];
};

const reference::DecodePath kPaths[2] = {reference::DecodePath::kPlain,
                                         reference::DecodePath::kFused};

#ifdef STATICKV_HAS_CUDA
// Kernels a captured batch-1 decode step launches, per decoder path; per
// layer = the step's kernels / num_layers (embedding, final norm and LM
// head included, spread over the layers).
Json count_kernels(const reference::LlamaModel& model, Subject& s, const at::Tensor& ids,
                   const at::Tensor& pos, int64_t attend) {
  Json out = Json::object();
  const auto layers = static_cast<double>(model.config().num_hidden_layers);
  for (int p = 0; p < 2; ++p) {
    reference::CacheBackend& backend = *s.backend[p];
    const statickv::detail::GraphNodeCounts n = statickv::detail::count_graph_nodes(
        s.cache->config().device, 2, [&] { model.forward(ids, pos, backend, attend); });
    const char* name = reference::to_string(kPaths[p]);
    fmt::print("kernels per captured batch-1 step, {}: {} ({:.1f} per layer), {} copies, {} sets\n",
               name, n.kernels, static_cast<double>(n.kernels) / layers, n.copies, n.sets);
    out[name] = Json::object({{"kernels", n.kernels},
                              {"copies", n.copies},
                              {"sets", n.sets},
                              {"nodes", n.total},
                              {"kernels_per_layer", static_cast<double>(n.kernels) / layers}});
  }
  return out;
}
#else
Json count_kernels(const reference::LlamaModel&, Subject&, const at::Tensor&, const at::Tensor&,
                   int64_t) {
  return Json();  // no CUDA graphs in this build
}
#endif

Options parse_options(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv_bench_model",
                     "reference-model decode step: batch prefix, eager vs graphs, bandwidth");
  flags.add_device(&o.device);
  add_shape_flag(flags, &o.shape, "model shape (random weights)");
  flags::add_dtype(flags, &o.dtype, at::kBFloat16);
  apps::add_kv_dtype(flags, &o.kv_dtype);  // adds the quantized 1/1 variants, side by side
  flags.add("--context N", &o.context, "tokens cached before the step", /*min=*/1);
  flags.add("--max-len N", &o.max_len, "cache capacity", /*min=*/2);
  flags.add("--max-batch N", &o.max_batch, "rows of the large cache", /*min=*/1);
  flags.add("--rounds N", &o.rounds, "interleaved samples per variant", /*min=*/1);
  flags.add("--calls N", &o.calls, "steps per sample", /*min=*/1);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.add_switch("--no-graphs", &o.no_graphs, "CUDA: eager variants only");
  flags.add_switch("--no-full-batch", &o.no_full_batch, "skip the max-batch/max-batch variants");
  flags.add_switch("--fused", &o.fused,
                   "also run every variant through the fused decoder path, side by side (CUDA: "
                   "and count the kernels of a captured batch-1 step per path)");
  flags.parse(argc, argv);
  check_context(o.context, o.max_len);
  return o;
}

// A cache of `max_batch` rows filled to --context, its backend per path
// (plain, and fused with --fused) and, with graphs, their decode runners.
Subject make_subject(const Options& o, const reference::LlamaModel& model, int64_t max_batch,
                     KvStorage kv, bool graphs, int64_t attend, const at::Device& device) {
  Subject s;
  CacheConfig config = model.cache_config(max_batch, o.max_len);
  config.kv_storage = kv;
  s.cache = std::make_unique<StaticCache>(config);
  fill_cache(*s.cache, max_batch, o.context);
  for (int p = 0; p < (o.fused ? 2 : 1); ++p) {
    s.backend[p] = std::make_unique<reference::CacheBackend>(
        *s.cache, reference::AttentionKernel::kSdpa, kPaths[p]);
    if (!graphs) continue;
    s.runner[p] = decode_step_runner(model, *s.backend[p], device,
                                     ShapeBuckets::powers_of_two(max_batch), attend);
  }
  return s;
}

struct Input {
  at::Tensor ids, pos;
};

struct Row {
  std::string name;
  int64_t batch;
  bool graph;
  int path;
};

// The variants to time, in order, and their table rows: each variant, then
// (with --fused) its fused twin right after it.
struct Variants {
  Variants(const reference::LlamaModel* m, int64_t attend_len, bool with_fused)
      : model(m), attend(attend_len), fused(with_fused) {}

  void add(const std::string& name, Subject& s, const Input& in, bool graph) {
    for (int p = 0; p < (fused ? 2 : 1); ++p) add_path(name, s, in, graph, p);
  }
  void add_path(const std::string& name, Subject& s, const Input& in, bool graph, int p) {
    const int64_t b = in.ids.size(0);
    rows.push_back({p == 0 ? name : name + " fused", b, graph, p});
    if (graph) {
      variants.push_back({rows.back().name, [s = &s, in = &in, attend = attend, p] {
                            s->runner[p]->run({in->ids, in->pos}, attend);
                          }});
    } else {
      variants.push_back({rows.back().name, [s = &s, in = &in, m = model, attend = attend, p] {
                            m->forward(in->ids, in->pos, *s->backend[p], attend);
                          }});
    }
  }

  const reference::LlamaModel* model;
  int64_t attend;
  bool fused;
  std::vector<Variant> variants;
  std::vector<Row> rows;
  size_t kv_first = 0;  // the quantized variants, after the plain ones
};

void print_model(const Options& o, const reference::LlamaModel& model, at::ScalarType dtype,
                 const at::Device& device, Clock::time_point load_start) {
  const reference::ModelConfig& mc = model.config();
  fmt::print(
      "statickv model decode: {} ({} layers, hidden {}, {} q / {} kv heads x {}), {} on {}\n",
      o.shape, mc.num_hidden_layers, mc.hidden_size, mc.num_attention_heads, mc.num_key_value_heads,
      mc.head_dim, flags::dtype_name(dtype), device.str());
  fmt::print("context {}, max_len {}, {} CPU threads; model built in {:.1f} s\n", o.context,
             o.max_len, at::get_num_threads(), seconds_since(load_start, device));
}

// Bytes of KV one step reads at batch b (every layer's keys and values).
int64_t kv_bytes(const reference::ModelConfig& mc, at::ScalarType dtype, int64_t attend,
                 int64_t b) {
  const int64_t elem = static_cast<int64_t>(c10::elementSize(dtype));
  return 2 * mc.num_hidden_layers * b * mc.num_key_value_heads * attend * mc.head_dim * elem;
}

// Prints the table of variants; its JSON rows.
Json report_rows(const std::vector<Row>& rows, const std::vector<Stats>& stats,
                 const reference::ModelConfig& mc, at::ScalarType dtype, int64_t attend,
                 double copy_bw) {
  Json json_rows = Json::array();
  fmt::print("\n{:<18} {:>10} {:>10} {:>10} {:>11} {:>9} {:>8}\n", "cache/live mode", "median ms",
             "p10 ms", "p90 ms", "tokens/s", "GB/s", "of copy");
  for (size_t i = 0; i < rows.size(); ++i) {
    const Stats& s = stats[i];
    const double bytes = static_cast<double>(weight_bytes_per_step(mc, dtype, rows[i].batch) +
                                             kv_bytes(mc, dtype, attend, rows[i].batch));
    const double bw = bytes / s.median;
    fmt::print("{:<18} {:>10.3f} {:>10.3f} {:>10.3f} {:>11.1f} {:>9.1f} {:>7.1f}%\n", rows[i].name,
               s.median * 1e3, s.p10 * 1e3, s.p90 * 1e3,
               static_cast<double>(rows[i].batch) / s.median, bw / 1e9, 100.0 * bw / copy_bw);
    json_rows.push_back(
        Json::object({{"name", rows[i].name},
                      {"path", reference::to_string(kPaths[rows[i].path])},
                      {"batch", rows[i].batch},
                      {"graph", rows[i].graph},
                      {"step_s", to_json(s)},
                      {"tokens_per_s", static_cast<double>(rows[i].batch) / s.median},
                      {"bytes_per_step", bytes},
                      {"bandwidth_Bps", bw},
                      {"fraction_of_copy", bw / copy_bw}}));
  }
  fmt::print("\ndevice copy bandwidth (read + write): {:.1f} GB/s\n", copy_bw / 1e9);
  return json_rows;
}

// The graph variants' ratios: batch prefix, speed-ups over eager, bandwidth.
void graph_ratios(const Options& o, const std::vector<Stats>& stats,
                  const reference::ModelConfig& mc, at::ScalarType dtype, int64_t attend,
                  double copy_bw, Json& ratios) {
  const std::string big = std::to_string(o.max_batch);
  const size_t per = o.fused ? 2 : 1;                // rows per variant: plain (and fused)
  const size_t g = per * (o.no_full_batch ? 2 : 3);  // first graph variant
  const Stats gprefix = paired_ratio(stats[g], stats[g + per]);
  fmt::print("batch-prefix ratio {}/1 : 1/1, graph (target <= 1.03): {}  {}\n", big,
             ratio_text(gprefix), gprefix.median <= 1.03 ? "ok" : "ABOVE TARGET");
  const Stats speedup1 = paired_ratio(stats[0], stats[g]);
  fmt::print("graph speed-up, batch 1 (eager / graph):   {}\n", ratio_text(speedup1));
  ratios["batch_prefix_graph"] = to_json(gprefix);
  ratios["graph_speedup_b1"] = to_json(speedup1);
  if (!o.no_full_batch) {
    const Stats speedup16 = paired_ratio(stats[2 * per], stats[g + 2 * per]);
    fmt::print("graph speed-up, batch {} (eager / graph):  {}\n", big, ratio_text(speedup16));
    ratios["graph_speedup_full_batch"] = to_json(speedup16);
  }
  const double frac =
      (static_cast<double>(weight_bytes_per_step(mc, dtype, 1) + kv_bytes(mc, dtype, attend, 1)) /
       stats[g].median) /
      copy_bw;
  fmt::print("bandwidth at batch 1 with graphs: {:.1f}% of copy (target >= 70%)  {}\n",
             100.0 * frac, frac >= 0.70 ? "ok" : "BELOW TARGET");
  ratios["bandwidth_fraction_b1_graph"] = frac;
  if (o.fused) {
    const double fused_frac = frac * stats[g].median / stats[g + 1].median;
    fmt::print("bandwidth at batch 1 with graphs, fused: {:.1f}% of copy (target >= 70%)  {}\n",
               100.0 * fused_frac, fused_frac >= 0.70 ? "ok" : "BELOW TARGET");
    ratios["bandwidth_fraction_b1_graph_fused"] = fused_frac;
  }
}

// The batch-prefix ratio, the graph ratios and (--fused) each fused speed-up.
Json ratios_of(const Options& o, const std::vector<Row>& rows, const std::vector<Stats>& stats,
               const reference::ModelConfig& mc, at::ScalarType dtype, int64_t attend,
               double copy_bw, bool graphs) {
  const size_t per = o.fused ? 2 : 1;  // rows per variant: plain (and fused)
  Json ratios;
  const Stats prefix = paired_ratio(stats[0], stats[per]);
  fmt::print("batch-prefix ratio {}/1 : 1/1, eager (target <= 1.03): {}  {}\n", o.max_batch,
             ratio_text(prefix), prefix.median <= 1.03 ? "ok" : "ABOVE TARGET");
  ratios["batch_prefix_eager"] = to_json(prefix);
  if (graphs) graph_ratios(o, stats, mc, dtype, attend, copy_bw, ratios);
  if (o.fused) {
    // The fused twin of every variant sits right after it.
    for (size_t i = 0; i + 1 < rows.size(); i += 2) {
      const Stats speedup = paired_ratio(stats[i], stats[i + 1]);
      fmt::print("fused speed-up, {} (plain / fused): {}\n", rows[i].name, ratio_text(speedup));
      ratios["fused_speedup " + rows[i].name] = to_json(speedup);
    }
  }
  return ratios;
}

// --kv-dtype: the quantized 1/1 variants against the plain ones.
void kv_ratios(const Options& o, const Subject& small, const Subject& small_kv, KvStorage storage,
               const Variants& v, const std::vector<Stats>& stats, bool graphs, Json& ratios) {
  const std::string kv_name = std::string(" ") + to_string(storage);
  fmt::print("cache bytes, 1 row: plain {}, {} {} (of which staging {})\n",
             small.cache->memory_bytes(), to_string(storage), small_kv.cache->memory_bytes(),
             small_kv.cache->staging_bytes());
  const Stats eager_kv = paired_ratio(stats[v.kv_first], stats[1]);
  fmt::print("1/1 eager{} : 1/1 eager: {}\n", kv_name, ratio_text(eager_kv));
  ratios["kv_storage_eager"] = to_json(eager_kv);
  if (graphs) {
    const Stats graph_kv = paired_ratio(stats[v.kv_first + 1], stats[o.no_full_batch ? 3 : 4]);
    fmt::print("1/1 graph{} : 1/1 graph: {}\n", kv_name, ratio_text(graph_kv));
    ratios["kv_storage_graph"] = to_json(graph_kv);
  }
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  flags::set_threads(o.threads);
  c10::InferenceMode inference;  // as inference code runs: no autograd bookkeeping per op
  const at::Device device = flags::parse_device(o.device);
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kBFloat16);
  const bool graphs = device.is_cuda() && !o.no_graphs;

  const auto load_start = Clock::now();
  auto model = device.is_cuda() ? device_random_model(o.shape, dtype, device)
                                : random_model(o.shape, dtype, device);
  const reference::ModelConfig& mc = model->config();
  print_model(o, *model, dtype, device, load_start);

  const int64_t attend = o.context + 1;  // the step writes position `context`
  const KvStorage storage = apps::parse_kv_storage(o.kv_dtype);
  Subject large = make_subject(o, *model, o.max_batch, KvStorage::kCompute, graphs, attend, device);
  Subject small = make_subject(o, *model, 1, KvStorage::kCompute, graphs, attend, device);
  const bool quantized = storage != KvStorage::kCompute;
  Subject small_kv =
      quantized ? make_subject(o, *model, 1, storage, graphs, attend, device) : Subject{};

  const auto long_opts = at::TensorOptions().dtype(at::kLong).device(device);
  auto input = [&](int64_t b) {
    return Input{at::randint(0, mc.vocab_size, {b, 1}, long_opts),
                 at::full({b, 1}, o.context, long_opts)};
  };
  const Input one = input(1), all = input(o.max_batch);

  Variants v(model.get(), attend, o.fused);
  const std::string big = std::to_string(o.max_batch);
  v.add(big + "/1 eager", large, one, false);
  v.add("1/1 eager", small, one, false);
  if (!o.no_full_batch) v.add(big + "/" + big + " eager", large, all, false);
  if (graphs) {
    v.add(big + "/1 graph", large, one, true);
    v.add("1/1 graph", small, one, true);
    if (!o.no_full_batch) v.add(big + "/" + big + " graph", large, all, true);
  }
  v.kv_first = v.rows.size();
  const std::string kv_name = std::string(" ") + to_string(storage);
  if (quantized) v.add("1/1 eager" + kv_name, small_kv, one, false);
  if (quantized && graphs) v.add("1/1 graph" + kv_name, small_kv, one, true);

  fmt::print("{} interleaved rounds x {} steps per variant\n", o.rounds, o.calls);
  const std::vector<Stats> stats = measure_interleaved(v.variants, device, o.rounds, o.calls, 2);
  const double copy_bw = copy_bandwidth(device);
  const Json json_rows = report_rows(v.rows, stats, mc, dtype, attend, copy_bw);
  Json ratios = ratios_of(o, v.rows, stats, mc, dtype, attend, copy_bw, graphs);
  const Json kernels =
      o.fused && graphs ? count_kernels(*model, small, one.ids, one.pos, attend) : Json();
  if (quantized) kv_ratios(o, small, small_kv, storage, v, stats, graphs, ratios);

  write_json(o.json, Json::object({{"benchmark", "model_decode"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"shape", o.shape},
                                   {"dtype", flags::dtype_name(dtype)},
                                   {"context", o.context},
                                   {"max_len", o.max_len},
                                   {"max_batch", o.max_batch},
                                   {"rounds", o.rounds},
                                   {"calls", o.calls},
                                   {"copy_bandwidth_Bps", copy_bw},
                                   {"variants", json_rows},
                                   {"kernels", kernels},
                                   {"ratios", ratios}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_model");
}
