// The decode step's projections on the CPU (Note [CPU projections]): one
// model's weight matrices (the fused path's q/k/v, o, gate/up, down and the
// LM head) times 1 to 16 rows (a decode step) or more (a prefill chunk),
// through each GEMM a CPU build can reach, side by side in rotated rounds:
//   gemm    at::linear in float32 (the torch wheel's MKL sgemm);
//   onednn  oneDNN's linear (mkldnn::_linear_pointwise) in float32;
//   stream  statickv's stream loop (each weight row read once; 1 to 16 rows);
//   bf16    at::linear in bfloat16 (oneDNN; fast only with bf16 dot products).
// Each arm times a whole step's projections; the table gives µs per step,
// the weights' GB/s and that as a share of the measured copy bandwidth, and
// each arm's time over the base arm's at its row count (paired per round):
// the stream loop's, or the GEMM's beyond the stream loop's rows. The first
// line says which routes cpu_linear measured fastest in this process.
//
//   statickv_bench_linear [--model smollm2-135m] [--rows 1,4,16,64] [--threads N]

#include "bench_util.hpp"

#include <optional>

#include <statickv/kernel_switches.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/model/cpu_linear.hpp>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <memory>

using namespace statickv;
using namespace statickv::bench;

namespace {

constexpr int64_t kRowsMax = 4096;

struct Options {
  std::string model = "smollm2-135m", rows = "1,2,4,8,16", arms = "gemm,onednn,stream,bf16";
  std::string json;
  int rounds = 7, calls = 20, threads = 0;
};

/// The fused path's weight shapes of one layer, times the layers, and the LM head.
struct Shapes {
  std::vector<std::pair<int64_t, int64_t>> matrices;  // [out, in]
  int64_t layers = 1;
  int64_t vocab = 0, hidden = 0;
};

Shapes shapes_of(const reference::ModelConfig& c) {
  const int64_t d = c.head_dim, h = c.hidden_size;
  Shapes s;
  s.matrices = {{(c.num_attention_heads + 2 * c.num_key_value_heads) * d, h},
                {h, c.num_attention_heads * d},
                {2 * c.intermediate_size, h},
                {h, c.intermediate_size}};
  s.layers = c.num_hidden_layers;
  s.vocab = c.vocab_size;
  s.hidden = h;
  return s;
}

/// Every layer's projection weights and the LM head, in one dtype: a step
/// reads each once, as the model does (no layer's weights stay in cache
/// for the next).
struct WeightSet {
  std::vector<std::vector<at::Tensor>> layers;
  at::Tensor lm_head;
  int64_t widest = 0;
  double bytes = 0;  // weight bytes a step reads
};

std::shared_ptr<WeightSet> make_weights(const Shapes& s, at::ScalarType dtype) {
  auto w = std::make_shared<WeightSet>();
  const auto opts = at::TensorOptions().dtype(dtype);
  for (int64_t l = 0; l < s.layers; ++l) {
    std::vector<at::Tensor> layer;
    for (const auto& [out, in] : s.matrices) {
      layer.push_back(at::randn({out, in}, opts).mul_(0.02));
      w->widest = std::max(w->widest, in);
    }
    w->layers.push_back(std::move(layer));
  }
  w->lm_head = at::randn({s.vocab, s.hidden}, opts).mul_(0.02);
  const double elem = dtype == at::kFloat ? 4.0 : 2.0;
  for (const auto& layer : w->layers) {
    for (const at::Tensor& t : layer) w->bytes += elem * static_cast<double>(t.numel());
  }
  w->bytes += elem * static_cast<double>(w->lm_head.numel());
  return w;
}

struct Arm {
  std::string name, kind;
  int64_t rows = 1;
  std::shared_ptr<WeightSet> weights;
  at::Tensor x_hidden, x_wide;  // [rows, hidden], [rows, widest in]
};

at::Tensor project(const Arm& a, const at::Tensor& x, const at::Tensor& w) {
  if (a.kind == "stream") return reference::linear_by(reference::LinearRoute::kStream, x, w);
  if (a.kind == "onednn") return reference::linear_by(reference::LinearRoute::kOneDnn, x, w);
  return at::linear(x, w);
}

/// One step's projections: every layer's matrices, then the LM head.
void run_step(const Arm& a) {
  for (const auto& layer : a.weights->layers) {
    for (const at::Tensor& w : layer) {
      project(a, w.size(1) == a.x_hidden.size(1) ? a.x_hidden : a.x_wide.narrow(1, 0, w.size(1)),
              w);
    }
  }
  project(a, a.x_hidden, a.weights->lm_head);
}

/// The arm each arm at `rows` is compared with: the stream loop's where it
/// takes that many rows, else the GEMM's.
std::optional<size_t> base_arm(const std::vector<Arm>& arms, int64_t rows) {
  std::optional<size_t> gemm;
  for (size_t j = 0; j < arms.size(); ++j) {
    if (arms[j].rows != rows) continue;
    if (arms[j].kind == "stream") return j;
    if (arms[j].kind == "gemm") gemm = j;
  }
  return gemm;
}

Arm make_arm(const std::string& kind, int64_t rows, const Shapes& s,
             const std::shared_ptr<WeightSet>& weights) {
  Arm a;
  a.kind = kind;
  a.rows = rows;
  a.name = fmt::format("{} rows {}", kind, rows);
  const auto opts = at::TensorOptions().dtype(weights->lm_head.scalar_type());
  a.weights = weights;
  a.x_hidden = at::randn({rows, s.hidden}, opts);
  a.x_wide = at::randn({rows, weights->widest}, opts);
  return a;
}

Options parse_options(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv_bench_linear",
                     "a decode step's projections on the CPU: each route cpu_linear can take");
  flags.add("--model NAME", &o.model, "named shapes (reference::named_config)");
  flags.add("--rows LIST", &o.rows, "rows per projection (batch * query), comma-separated");
  flags.add("--arms LIST", &o.arms, "among gemm, onednn, stream, bf16");
  flags.add("--rounds N", &o.rounds, "rotated rounds", /*min=*/1);
  flags.add("--calls N", &o.calls, "steps per sample", /*min=*/1);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.parse(argc, argv);
  return o;
}

std::vector<std::string> split_arms(const std::string& text) {
  std::vector<std::string> out = flags::split_list(text);
  for (const std::string& kind : out) {
    if (kind != "gemm" && kind != "onednn" && kind != "stream" && kind != "bf16") {
      throw FlagError("--arms: expected names among gemm, onednn, stream, bf16 but got '" + kind +
                      "'");
    }
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  flags::set_threads(o.threads);
  c10::InferenceMode inference;
  const Shapes shapes = shapes_of(reference::named_config(o.model));
  const std::vector<std::string> kinds = split_arms(o.arms);
  const std::vector<int64_t> row_counts = parse_int_list("--rows", o.rows, 1, kRowsMax);
  std::shared_ptr<WeightSet> f32, bf16;
  for (const std::string& kind : kinds) {
    std::shared_ptr<WeightSet>& set = kind == "bf16" ? bf16 : f32;
    if (!set) set = make_weights(shapes, kind == "bf16" ? at::kBFloat16 : at::kFloat);
  }
  std::vector<Arm> arms;
  for (int64_t rows : row_counts) {
    for (const std::string& kind : kinds) {
      if (kind == "stream" && rows > reference::kStreamRows) continue;  // beyond its rows
      arms.push_back(make_arm(kind, rows, shapes, kind == "bf16" ? bf16 : f32));
    }
  }
  const double copy = copy_bandwidth(at::kCPU);
  const std::string route = reference::route_name(reference::linear_route());
  const std::string many = reference::route_name(reference::many_rows_route());
  fmt::print(
      "statickv linear: {} on {} ({} threads); cpu_linear measured {} fastest for 1 to {} rows, "
      "{} for more; stream loop {}; copy {:.1f} GB/s; {} rounds x {} steps; kernels off: {}\n",
      o.model, cpu_model(), at::get_num_threads(), route, reference::kStreamRows, many,
      reference::stream_loop_isa(), copy / 1e9, o.rounds, o.calls,
      fmt::join(disabled_kernels(), ","));
  const std::vector<Stats> stats = rotated_rounds(arms.size(), o.rounds, [&](size_t i) {
    const auto start = Clock::now();
    for (int c = 0; c < o.calls; ++c) run_step(arms[i]);
    return seconds_since(start, at::kCPU) / o.calls;
  });
  Json rows = Json::array();
  fmt::print("\n{:<18} {:>10} {:>8} {:>8} {:>22}\n", "arm", "µs/step", "GB/s", "of copy",
             "over base [p10,p90]");
  for (size_t i = 0; i < arms.size(); ++i) {
    const Arm& a = arms[i];
    const double gbs = a.weights->bytes / stats[i].median / 1e9;
    const std::optional<size_t> base = base_arm(arms, a.rows);
    const Stats over = base ? paired_ratio(stats[i], stats[*base]) : Stats{};
    fmt::print("{:<18} {:>10.1f} {:>8.1f} {:>7.0f}% {:>22}\n", a.name, stats[i].median * 1e6, gbs,
               100 * gbs * 1e9 / copy, over.median == 0 ? "-" : ratio_text(over));
    rows.push_back(Json::object({{"name", a.name},
                                 {"kind", a.kind},
                                 {"rows", a.rows},
                                 {"step_s", to_json(stats[i])},
                                 {"weight_bytes", a.weights->bytes},
                                 {"gb_per_s", gbs},
                                 {"share_of_copy", gbs * 1e9 / copy},
                                 {"over_stream", to_json(over)}}));
  }
  write_json(o.json, Json::object({{"benchmark", "linear"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(at::kCPU)},
                                   {"model", o.model},
                                   {"measured_route", route},
                                   {"measured_many_rows_route", many},
                                   {"stream_loop", reference::stream_loop_isa()},
                                   {"copy_bytes_per_s", copy},
                                   {"disabled_kernels", disabled_kernels()},
                                   {"arms", rows}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_linear");
}
