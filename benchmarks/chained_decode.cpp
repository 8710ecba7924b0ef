// The chained decode step (Note [chained step]): the figure the decode
// kernels and the decoding loops are measured against. Each arm prefills a
// prompt, then takes N dependent steps, each the forward pass, the
// sampling head's pick inside the step and the token and position fed back
// on the device (reference::ChainedDecode): one captured CUDA graph
// replayed N times on a GPU, timed with CUDA events; eager steps timed
// with the host clock elsewhere. Arms are every batch x context x path,
// rotated round by round (A-B-C, B-C-A, C-A-B), each ratio with its
// spread.
//
// Per arm: µs per step, tokens/s, kernels per step (graph nodes on CUDA;
// the launches OpCounter sees elsewhere), bytes read per step against the
// device copy bandwidth measured in the same run. With --inventory DIR, the
// batch-1 arms of the first context also list their kernels: each graph
// node's name and grid, the graph's debug dump (DIR/<arm>.dot) and one
// profiler trace of a chain (DIR/<arm>.json), summed per kernel name.
//
//   statickv_bench_chained_decode [--shape S] [--batch 1,16]
//       [--contexts 32+128,1024+128] [--paths plain,fused] [--inventory DIR] ...

#include "bench_model.hpp"

#include <statickv/engine/chained_decode.hpp>
#include <statickv/kernel_switches.hpp>
#include <statickv/op_counter.hpp>

#include <torch/csrc/autograd/profiler_kineto.h>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <map>
#include <memory>
#include <set>

using namespace statickv;
using namespace statickv::bench;
using reference::DecodePath;

namespace {

struct Options {
  std::string device = "auto", shape = "llama-3.2-1b", dtype, json, inventory, checkpoint;
  std::string batches = "1,16", contexts = "32+128,1024+128", paths = "plain,fused";
  int rounds = 5, threads = 0;
  bool no_graphs = false;
  double temperature = 0, top_p = 1;
  int64_t top_k = 0;
};

// One workload: a prompt of `prompt` tokens, then `steps` dependent steps.
struct Context {
  int64_t prompt = 0, steps = 0;
  std::string name() const { return fmt::format("{}+{}", prompt, steps); }
};

std::vector<Context> parse_contexts(const std::string& text) {
  std::vector<Context> out;
  for (const std::string& item : flags::split_list(text)) {
    const size_t plus = item.find('+');
    const auto prompt = flags::parse_int_list("--contexts", item.substr(0, plus), 1);
    const auto steps = plus == std::string::npos
                           ? std::vector<int64_t>{}
                           : flags::parse_int_list("--contexts", item.substr(plus + 1), 1);
    if (prompt.size() != 1 || steps.size() != 1) {
      throw flags::FlagError("--contexts: expected PROMPT+STEPS items such as 32+128 but got '" +
                             item + "'");
    }
    out.push_back({prompt[0], steps[0]});
  }
  return out;
}

std::vector<DecodePath> parse_paths(const std::string& text) {
  std::vector<DecodePath> out;
  for (const std::string& item : flags::split_list(text)) {
    if (item != "plain" && item != "fused") {
      throw flags::FlagError("--paths: expected plain and/or fused, comma-separated, but got '" +
                             item + "'");
    }
    out.push_back(reference::parse_decode_path(item, "--paths"));
  }
  return out;
}

Options parse_options(int argc, char** argv) {
  Options o;
  flags::Flags flags(
      "statickv_bench_chained_decode",
      "the chained decode step: dependent steps, the pick inside, fed back on the device");
  flags.add_device(&o.device);
  add_shape_flag(flags, &o.shape, "model shape (random weights)");
  flags.add("--checkpoint DIR", &o.checkpoint,
            "a checkpoint's weights instead of --shape's random ones (benchmarks/chained_arms.py "
            "steps every arm on one)");
  flags::add_dtype(flags, &o.dtype, at::kBFloat16);
  flags.add("--batch LIST", &o.batches, "live rows per arm, comma-separated");
  flags.add("--contexts LIST", &o.contexts,
            "PROMPT+STEPS workloads, comma-separated (32+128: the anchor's)");
  flags.add("--paths LIST", &o.paths, "decoder paths: plain,fused");
  flags.add("--rounds N", &o.rounds, "rotated rounds; one chain per arm each", /*min=*/1);
  flags.add("--temperature T", &o.temperature, "every row's pick (0: greedy)", /*min=*/0.0);
  flags.add("--top-p P", &o.top_p, "with --temperature", /*min=*/0.0, /*max=*/1.0);
  flags.add("--top-k K", &o.top_k, "with --temperature", /*min=*/0);
  flags.add("--inventory DIR", &o.inventory,
            "list the batch-1 arms' kernels (first context): graph nodes, DOT dump, profile");
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.add_switch("--no-graphs", &o.no_graphs, "CUDA: eager steps");
  flags.parse(argc, argv);
  return o;
}

struct Arm {
  std::string name;
  int64_t batch = 1;
  Context context;
  DecodePath path = DecodePath::kFused;
  std::unique_ptr<reference::ChainedDecode> chain;
  int64_t kernels = -1;  // graph kernel nodes per step (CUDA graphs), else -1
  int64_t launches = 0;  // launches per step OpCounter sees (the proxy)
};

// Seconds per step of one chain from its rewound start.
double time_chain(reference::ChainedDecode& chain, const at::Device& device) {
  chain.rewind();
  const int64_t n = chain.options().steps;
  auto run = [&] {
    for (int64_t i = 0; i < n; ++i) chain.step();
  };
#ifdef STATICKV_HAS_CUDA
  if (device.is_cuda())
    return statickv::detail::stream_seconds(device, run) / static_cast<double>(n);
#endif
  sync(device);
  const auto start = Clock::now();
  run();
  return seconds_since(start, device) / static_cast<double>(n);
}

// Launches of one step: graph kernel nodes on CUDA with graphs; the
// OpCounter proxy always. Each leaves the chain rewound.
void count_step(Arm& a, const at::Device& device) {
  reference::ChainedDecode& chain = *a.chain;
  chain.rewind();
  {
    OpCounter counter(device);
    chain.body()();
    a.launches = counter.launches();
  }
#ifdef STATICKV_HAS_CUDA
  chain.rewind();
  if (chain.captured()) {
    a.kernels = statickv::detail::count_graph_nodes(device, 0, chain.body()).kernels;
  }
#endif
  chain.rewind();
}

std::vector<Arm> make_arms(const Options& o, const reference::LlamaModel& model) {
  std::vector<Arm> arms;
  reference::Sampling sampling;
  sampling.temperature = o.temperature;
  sampling.top_p = o.top_p;
  sampling.top_k = o.top_k;
  for (const Context& c : parse_contexts(o.contexts)) {
    for (int64_t b : flags::parse_int_list("--batch", o.batches, 1)) {
      for (DecodePath path : parse_paths(o.paths)) {
        reference::ChainedOptions co;
        co.path = path;
        co.batch = b;
        co.prompt = c.prompt;
        co.steps = c.steps;
        co.sampling = sampling;
        co.graphs = !o.no_graphs;
        Arm a;
        a.name = fmt::format("b{} {} {}", b, c.name(), reference::to_string(path));
        a.batch = b;
        a.context = c;
        a.path = path;
        a.chain = std::make_unique<reference::ChainedDecode>(model, co);
        arms.push_back(std::move(a));
      }
    }
  }
  return arms;
}

// Bytes a step reads: every weight once (bench_model.hpp) and each row's
// live keys and values, on average prompt + (steps + 1) / 2 positions.
double step_bytes(const reference::ModelConfig& mc, at::ScalarType dtype, const Arm& a) {
  const double live = static_cast<double>(a.context.prompt) + (a.context.steps + 1) / 2.0;
  const double kv = 2.0 * mc.num_hidden_layers * a.batch * mc.num_key_value_heads * live *
                    mc.head_dim * static_cast<double>(c10::elementSize(dtype));
  return static_cast<double>(weight_bytes_per_step(mc, dtype, a.batch)) + kv;
}

Json report(const std::vector<Arm>& arms, const std::vector<Stats>& stats,
            const reference::ModelConfig& mc, at::ScalarType dtype, double copy_bw) {
  Json rows = Json::array();
  fmt::print("\n{:<26} {:>9} {:>9} {:>9} {:>10} {:>8} {:>9} {:>8} {:>8}\n", "arm", "µs/step", "p10",
             "p90", "tokens/s", "kernels", "launches", "GB/s", "of copy");
  for (size_t i = 0; i < arms.size(); ++i) {
    const Arm& a = arms[i];
    const Stats& s = stats[i];
    const double bw = step_bytes(mc, dtype, a) / s.median;
    fmt::print("{:<26} {:>9.1f} {:>9.1f} {:>9.1f} {:>10.1f} {:>8} {:>9} {:>8.1f} {:>7.1f}%\n",
               a.name, s.median * 1e6, s.p10 * 1e6, s.p90 * 1e6,
               static_cast<double>(a.batch) / s.median,
               a.kernels >= 0 ? std::to_string(a.kernels) : "-", a.launches, bw / 1e9,
               100.0 * bw / copy_bw);
    rows.push_back(Json::object({{"name", a.name},
                                 {"batch", a.batch},
                                 {"prompt", a.context.prompt},
                                 {"steps", a.context.steps},
                                 {"path", reference::to_string(a.path)},
                                 {"graph", a.chain->captured()},
                                 {"step_s", to_json(s)},
                                 {"tokens_per_s", static_cast<double>(a.batch) / s.median},
                                 {"kernels_per_step", a.kernels},
                                 {"launches_per_step", a.launches},
                                 {"bytes_per_step", step_bytes(mc, dtype, a)},
                                 {"fraction_of_copy", bw / copy_bw}}));
  }
  fmt::print("\ndevice copy bandwidth (read + write): {:.1f} GB/s\n", copy_bw / 1e9);
  return rows;
}

// Paired ratios: fused against plain for each batch and context, and each
// batch against batch 1 for each path and context.
Json ratios(const std::vector<Arm>& arms, const std::vector<Stats>& stats) {
  Json out = Json::object();
  for (size_t i = 0; i < arms.size(); ++i) {
    for (size_t j = 0; j < arms.size(); ++j) {
      const Arm &a = arms[i], &b = arms[j];
      if (a.context.name() != b.context.name()) continue;
      std::string name;
      if (a.batch == b.batch && a.path == DecodePath::kPlain && b.path == DecodePath::kFused) {
        name = fmt::format("plain / fused, b{} {}", a.batch, a.context.name());
      } else if (a.path == b.path && b.batch == 1 && a.batch > 1) {
        name = fmt::format("b{} / b1 step, {} {}", a.batch, a.context.name(),
                           reference::to_string(a.path));
      } else {
        continue;
      }
      const Stats r = paired_ratio(stats[i], stats[j]);
      fmt::print("{:<40} {}\n", name, ratio_text(r));
      out[name] = to_json(r);
    }
  }
  return out;
}

// One profiled chain: the device's kernels (CUDA) or operators (CPU,
// nested), summed per name, per step. Writes the trace to `trace` if set.
Json profile_chain(reference::ChainedDecode& chain, const at::Device& device,
                   const std::string& trace) {
  namespace prof = torch::autograd::profiler;
  using torch::profiler::impl::ActivityType;
  const torch::profiler::impl::ProfilerConfig config(torch::profiler::impl::ProfilerState::KINETO);
  std::set<ActivityType> activities{ActivityType::CPU};
  if (device.is_cuda()) activities.insert(ActivityType::CUDA);
  chain.rewind();
  sync(device);
  prof::prepareProfiler(config, activities);
  prof::enableProfiler(config, activities);
  const int64_t n = chain.options().steps;
  for (int64_t i = 0; i < n; ++i) chain.step();
  sync(device);
  std::unique_ptr<prof::ProfilerResult> result = prof::disableProfiler();
  chain.rewind();
  if (!trace.empty()) result->save(trace);
  const c10::DeviceType kind = device.is_cuda() ? c10::DeviceType::CUDA : c10::DeviceType::CPU;
  std::map<std::string, std::pair<int64_t, uint64_t>> by_name;  // count, ns
  for (const prof::KinetoEvent& e : result->events()) {
    if (e.deviceType() != kind) continue;
    auto& [count, ns] = by_name[e.name()];
    ++count;
    ns += e.durationNs();
  }
  std::vector<std::pair<uint64_t, std::string>> order;
  for (const auto& [name, v] : by_name) order.push_back({v.second, name});
  std::sort(order.rbegin(), order.rend());
  Json rows = Json::array();
  for (const auto& [ns, name] : order) {
    const auto [count, total] = by_name.at(name);
    rows.push_back(Json::object({{"name", name},
                                 {"per_step", static_cast<double>(count) / n},
                                 {"us_per_step", static_cast<double>(total) * 1e-3 / n}}));
  }
  return rows;
}

#ifdef STATICKV_HAS_CUDA
// Every kernel node of the arm's captured step, with its grid and block.
Json graph_nodes(Arm& a, const at::Device& device, const std::string& dot) {
  a.chain->rewind();
  const auto kernels = statickv::detail::graph_kernels(device, 0, a.chain->body(), dot);
  a.chain->rewind();
  Json rows = Json::array();
  for (const statickv::detail::GraphKernel& k : kernels) {
    rows.push_back(Json::object({{"name", k.name},
                                 {"grid", {k.grid[0], k.grid[1], k.grid[2]}},
                                 {"block", {k.block[0], k.block[1], k.block[2]}},
                                 {"shared_bytes", k.shared_bytes}}));
  }
  return rows;
}
#endif

// --inventory DIR: the batch-1 arms of the first context, listed.
Json inventory(std::vector<Arm>& arms, const at::Device& device, const std::string& dir) {
  Json out = Json::object();
  if (dir.empty()) return out;
  std::filesystem::create_directories(dir);
  for (Arm& a : arms) {
    if (a.batch != 1 || a.context.name() != arms.front().context.name()) continue;
    const std::string stem =
        fmt::format("{}/b1-{}-{}", dir, a.context.name(), reference::to_string(a.path));
    Json entry = Json::object();
#ifdef STATICKV_HAS_CUDA
    if (a.chain->captured()) entry["graph_kernels"] = graph_nodes(a, device, stem + ".dot");
#endif
    entry["profile"] = profile_chain(*a.chain, device, stem + ".json");
    fmt::print("\nkernels of one step, {} (profiled, per step, most time first):\n", a.name);
    for (const Json& row : entry["profile"]) {
      fmt::print("  {:>8.2f} µs  x{:<5.3g} {}\n", row["us_per_step"].get<double>(),
                 row["per_step"].get<double>(), row["name"].get<std::string>().substr(0, 90));
    }
    out[a.name] = entry;
  }
  return out;
}

std::unique_ptr<reference::LlamaModel> load_model(const Options& o, at::ScalarType dtype,
                                                  const at::Device& device) {
  if (!o.checkpoint.empty()) {
    reference::Checkpoint c = reference::load_checkpoint(o.checkpoint, dtype, device);
    return std::make_unique<reference::LlamaModel>(std::move(c.config), std::move(c.weights));
  }
  return device.is_cuda() ? device_random_model(o.shape, dtype, device)
                          : random_model(o.shape, dtype, device);
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  flags::set_threads(o.threads);
  c10::InferenceMode inference;
  const at::Device device = flags::parse_device(o.device);
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kBFloat16);
  auto model = load_model(o, dtype, device);
  const reference::ModelConfig& mc = model->config();
  fmt::print(
      "statickv chained decode: {} ({} layers, hidden {}), {} on {}; {} CPU threads; kernels "
      "off: {}\n",
      o.checkpoint.empty() ? o.shape : o.checkpoint, mc.num_hidden_layers, mc.hidden_size,
      flags::dtype_name(dtype), device.str(), at::get_num_threads(),
      fmt::join(disabled_kernels(), ","));
  std::vector<Arm> arms = make_arms(o, *model);
  for (Arm& a : arms) count_step(a, device);
  fmt::print("{} rotated rounds, one chain per arm each; pick: {}\n", o.rounds,
             o.temperature > 0 ? "sampled" : "greedy");
  const std::vector<Stats> stats = rotated_rounds(
      arms.size(), o.rounds, [&](size_t i) { return time_chain(*arms[i].chain, device); });
  const double copy_bw = copy_bandwidth(device);
  const Json rows = report(arms, stats, mc, dtype, copy_bw);
  const Json paired = ratios(arms, stats);
  const Json kernels = inventory(arms, device, o.inventory);
  write_json(o.json, Json::object({{"benchmark", "chained_decode"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"shape", o.checkpoint.empty() ? o.shape : o.checkpoint},
                                   {"dtype", flags::dtype_name(dtype)},
                                   {"rounds", o.rounds},
                                   {"temperature", o.temperature},
                                   {"disabled_kernels", disabled_kernels()},
                                   {"copy_bandwidth_Bps", copy_bw},
                                   {"arms", rows},
                                   {"ratios", paired},
                                   {"inventory", kernels}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_chained_decode");
}
