// The sampling head's pick alone (Note [sampling head]): µs per pick of
// every row, as the captured step runs it (SamplingHead::pick_all), for
// greedy, temperature + top-p, and + top-k rows, at each batch, the fused
// kernel against the tensor composition it replaced, side by side in
// rotated rounds. On CUDA a graph of --calls picks is captured per arm and
// replayed, timed with CUDA events (the kernels, not their launches);
// elsewhere the picks run eagerly under the host clock.
//
//   statickv_bench_pick [--device D] [--vocab 128256] [--batch 1,16] ...

#include "bench_util.hpp"

#include <statickv/graph_runner.hpp>
#include <statickv/kernel_switches.hpp>
#include <statickv/sampling/head.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

using namespace statickv;
using namespace statickv::bench;
using reference::Sampling;
using reference::SamplingHead;

namespace {

struct Options {
  std::string device = "auto", batches = "1,16", json;
  int64_t vocab = 128256;
  int rounds = 7, calls = 50, threads = 0;
};

// Goals in µs (the decode-measure issue): greedy and top-p, batch 1 / 16.
struct Setting {
  std::string name;
  Sampling sampling;
  double goal_b1_us, goal_b16_us;
};

const std::vector<Setting>& settings() {
  static const std::vector<Setting> all = [] {
    Sampling greedy;
    Sampling top_p;
    top_p.temperature = 0.8;
    top_p.top_p = 0.9;
    top_p.seed = 7;
    Sampling top_k = top_p;
    top_k.top_k = 50;
    return std::vector<Setting>{
        {"greedy", greedy, 4, 8}, {"temp+top-p", top_p, 15, 30}, {"+top-k", top_k, 0, 0}};
  }();
  return all;
}

struct Arm {
  std::string name;
  int64_t batch = 1;
  size_t setting = 0;
  bool fused = true;
  std::unique_ptr<SamplingHead> head;
  at::Tensor logits, takes;
  std::unique_ptr<statickv::detail::DeviceGraph> graph;  // CUDA: --calls picks
};

Arm make_arm(const Options& o, int64_t batch, size_t s, bool fused, const at::Device& device) {
  Arm a;
  const Setting& setting = settings()[s];
  a.name = fmt::format("b{} {} {}", batch, setting.name, fused ? "fused" : "composition");
  a.batch = batch;
  a.setting = s;
  a.fused = fused;
  reference::SamplingHeadOptions ho;
  ho.max_batch = batch;
  ho.vocab_size = o.vocab;
  ho.device = device;
  ho.max_logprobs = 0;
  ho.fused = fused;
  a.head = std::make_unique<SamplingHead>(ho);
  for (int64_t r = 0; r < batch; ++r) a.head->set_row(r, setting.sampling, {1, 2, 3}, {});
  // Logits of a trained model's spread: a few clear leaders, a long tail.
  a.logits = at::randn({batch, o.vocab}, at::TensorOptions().device(device)).mul_(3);
  a.takes = at::ones({batch}, at::TensorOptions().dtype(at::kLong).device(device));
#ifdef STATICKV_HAS_CUDA
  if (device.is_cuda()) {
    SamplingHead* head = a.head.get();
    const at::Tensor logits = a.logits, takes = a.takes;
    const int calls = o.calls;
    a.graph =
        statickv::detail::capture_cuda_graph(device, statickv::detail::new_graph_pool(), 1, [=] {
          for (int c = 0; c < calls; ++c) head->pick_all(logits, takes);
        });
  }
#endif
  return a;
}

// Seconds per pick of one sample: --calls picks.
double time_arm(Arm& a, const Options& o, const at::Device& device) {
#ifdef STATICKV_HAS_CUDA
  if (a.graph)
    return statickv::detail::stream_seconds(device, [&] { a.graph->replay(); }) / o.calls;
#endif
  sync(device);
  const auto start = Clock::now();
  for (int c = 0; c < o.calls; ++c) a.head->pick_all(a.logits, a.takes);
  return seconds_since(start, device) / o.calls;
}

Options parse_options(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv_bench_pick",
                     "the sampling head's pick alone: fused against composition");
  flags.add_device(&o.device);
  flags.add("--vocab N", &o.vocab, "vocabulary (128256: Llama 3's)", /*min=*/2);
  flags.add("--batch LIST", &o.batches, "rows per pick, comma-separated");
  flags.add("--rounds N", &o.rounds, "rotated rounds", /*min=*/1);
  flags.add("--calls N", &o.calls, "picks per sample", /*min=*/1);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.parse(argc, argv);
  return o;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  flags::set_threads(o.threads);
  c10::InferenceMode inference;
  const at::Device device = flags::parse_device(o.device);
  std::vector<Arm> arms;
  for (int64_t b : flags::parse_int_list("--batch", o.batches, 1)) {
    for (size_t s = 0; s < settings().size(); ++s) {
      for (bool fused : {true, false}) arms.push_back(make_arm(o, b, s, fused, device));
    }
  }
  fmt::print("statickv pick: vocab {} on {}; {} rounds x {} picks; kernels off: {}\n", o.vocab,
             device.str(), o.rounds, o.calls, fmt::join(disabled_kernels(), ","));
  const std::vector<Stats> stats =
      rotated_rounds(arms.size(), o.rounds, [&](size_t i) { return time_arm(arms[i], o, device); });
  Json rows = Json::array();
  fmt::print("\n{:<34} {:>9} {:>9} {:>9} {:>9}\n", "arm", "µs/pick", "p10", "p90", "goal");
  for (size_t i = 0; i < arms.size(); ++i) {
    const Stats& s = stats[i];
    const Setting& setting = settings()[arms[i].setting];
    const double goal = arms[i].batch == 1    ? setting.goal_b1_us
                        : arms[i].batch == 16 ? setting.goal_b16_us
                                              : 0;
    const bool judged = arms[i].fused && goal > 0 && device.is_cuda();
    fmt::print("{:<34} {:>9.2f} {:>9.2f} {:>9.2f} {:>9}\n", arms[i].name, s.median * 1e6,
               s.p10 * 1e6, s.p90 * 1e6,
               judged ? fmt::format("{}{}", goal, s.median * 1e6 <= goal ? " ok" : " MISS") : "-");
    rows.push_back(Json::object({{"name", arms[i].name},
                                 {"batch", arms[i].batch},
                                 {"setting", setting.name},
                                 {"fused", arms[i].fused},
                                 {"pick_s", to_json(s)},
                                 {"goal_us", goal}}));
  }
  write_json(o.json, Json::object({{"benchmark", "pick"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"vocab", o.vocab},
                                   {"disabled_kernels", disabled_kernels()},
                                   {"arms", rows}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_pick");
}
