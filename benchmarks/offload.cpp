// Host offload (CacheConfig::host_offload, Note [host offload]): decode
// tokens/s of the reference model with its cache offloaded to host memory
// against the same cache kept on the device, side by side in one process,
// per (batch, context) cell. First the link itself: pinned host-to-device
// and device-to-host copies (on the CPU, a host copy), which the offloaded
// steps are reported against: bytes moved per step, the fraction of link
// bandwidth reached, and how much of the copy time the overlap hides
// (1 - (offload step - device step) / copy time). Pinning time (building
// the offloaded cache) is reported apart.
//
//   statickv_bench_offload [--device D] [--shape S] [--cells 1x4096,16x8192] ...

#include "bench_model.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <memory>
#include <sstream>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string device = "auto", shape, dtype, json, cells;
  int rounds = 5, calls = 2, threads = 0;
  bool no_graphs = false;
};

struct Cell {
  int64_t batch = 0, context = 0;
};

// "BxC,BxC,...": batch x context cells.
std::vector<Cell> parse_cells(const std::string& text) {
  std::vector<Cell> cells;
  std::stringstream in(text);
  std::string item;
  while (std::getline(in, item, ',')) {
    const size_t x = item.find('x');
    Cell c;
    try {
      if (x != std::string::npos)
        c = {std::stoll(item.substr(0, x)), std::stoll(item.substr(x + 1))};
    } catch (const std::exception&) {
      c = Cell{};  // refused below
    }
    if (c.batch < 1 || c.context < 1) {
      throw flags::FlagError("--cells: expected BATCHxCONTEXT items like 1x4096 but got '" + item +
                             "'");
    }
    cells.push_back(c);
  }
  if (cells.empty()) throw flags::FlagError("--cells: expected at least one BATCHxCONTEXT item");
  return cells;
}

// The sweep for the 8B shape on a GPU (at most 32 GiB pinned); a
// CPU-sized one elsewhere.
std::string default_cells(const at::Device& device) {
  return device.is_cuda() ? "1x4096,1x16384,1x32768,1x65536,1x131072,16x4096,16x8192,16x16384"
                          : "1x256,1x1024,4x512";
}

struct Link {
  double h2d = 0, d2h = 0;  // bytes per second
};

// Best of a few 1 GiB (CPU: 256 MiB) copies each way between pinned host
// memory and the device; on the CPU both are a host copy.
Link link_bandwidth(const at::Device& device) {
  const int64_t bytes = device.is_cuda() ? (int64_t{1} << 30) : (int64_t{1} << 28);
  const auto host_opts = at::TensorOptions().dtype(at::kByte).pinned_memory(device.is_cuda());
  at::Tensor host = at::ones({bytes}, host_opts);
  at::Tensor dev = at::empty({bytes}, at::TensorOptions().dtype(at::kByte).device(device));
  auto best = [&](at::Tensor& dst, const at::Tensor& src) {
    double out = 0;
    for (int i = 0; i < 5; ++i) {
      sync(device);
      const auto start = Clock::now();
      dst.copy_(src, /*non_blocking=*/true);
      out = std::max(out, static_cast<double>(bytes) / seconds_since(start, device));
    }
    return out;
  };
  Link link;
  link.h2d = best(dev, host);
  link.d2h = best(host, dev);
  return link;
}

// A cache, its backend, and one decode step over it (eager or replayed).
struct Subject {
  std::unique_ptr<StaticCache> cache;
  std::unique_ptr<reference::CacheBackend> backend;
  std::unique_ptr<GraphRunner> runner;
  double build_seconds = 0;
};

Subject make_subject(const reference::LlamaModel& model, const Cell& cell, bool offload,
                     bool graphs) {
  Subject s;
  CacheConfig config = model.cache_config(cell.batch, cell.context + 1);
  config.host_offload = offload;
  const auto start = Clock::now();
  s.cache = std::make_unique<StaticCache>(config);
  s.build_seconds = seconds_since(start, config.device);
  fill_cache(*s.cache, cell.batch, cell.context);
  s.backend =
      std::make_unique<reference::CacheBackend>(*s.cache, reference::AttentionKernel::kSdpa);
  if (graphs) {
    s.runner = decode_step_runner(model, *s.backend, config.device, ShapeBuckets::of({cell.batch}),
                                  cell.context + 1);
  }
  return s;
}

Variant decode_variant(const std::string& name, const reference::LlamaModel& model, Subject& s,
                       const at::Tensor& ids, const at::Tensor& pos, int64_t attend) {
  if (s.runner) return {name, [&s, &ids, &pos, attend] { s.runner->run({ids, pos}, attend); }};
  return {name, [&model, &s, &ids, &pos, attend] { model.forward(ids, pos, *s.backend, attend); }};
}

// Note [host offload]'s bytes per decode step: every layer's keys and
// values of the live rows' attended range in, the one written slot out.
struct StepBytes {
  double in = 0, out = 0;
};
StepBytes step_bytes(const CacheConfig& c, int64_t batch, int64_t attend) {
  const double per_slot = 2.0 * static_cast<double>(c.num_layers * batch * c.num_kv_heads *
                                                    c.head_dim * c10::elementSize(c.dtype));
  return {per_slot * static_cast<double>(attend), per_slot};
}

Json run_cell(const reference::LlamaModel& model, const Cell& cell, const Link& link,
              const Options& o, bool graphs) {
  Subject plain = make_subject(model, cell, false, graphs);
  Subject offload = make_subject(model, cell, true, graphs);
  const at::Device device = plain.cache->config().device;
  const auto long_opts = at::TensorOptions().dtype(at::kLong).device(device);
  const at::Tensor ids = at::randint(0, model.config().vocab_size, {cell.batch, 1}, long_opts);
  const at::Tensor pos = at::full({cell.batch, 1}, cell.context, long_opts);
  const int64_t attend = cell.context + 1;
  const std::vector<Stats> stats =
      measure_interleaved({decode_variant("device", model, plain, ids, pos, attend),
                           decode_variant("offload", model, offload, ids, pos, attend)},
                          device, o.rounds, o.calls, 2);
  const StepBytes bytes = step_bytes(offload.cache->config(), cell.batch, attend);
  const double t_plain = stats[0].median, t_off = stats[1].median;
  const double copy_s = bytes.in / link.h2d + bytes.out / link.d2h;
  // On the CPU the copies are synchronous: nothing can be hidden.
  const bool overlaps = device.is_cuda();
  const double hidden = overlaps ? std::clamp(1.0 - (t_off - t_plain) / copy_s, 0.0, 1.0) : 0.0;
  const double link_fraction = bytes.in / t_off / link.h2d;
  const Stats ratio = paired_ratio(stats[1], stats[0]);
  fmt::print("{:>5} {:>7} {:>10.1f} {:>10.1f}  {:<24} {:>9.1f} {:>8.1f}% {:>9} {:>8.2f} {:>9.0f}\n",
             cell.batch, cell.context, cell.batch / t_plain, cell.batch / t_off, ratio_text(ratio),
             bytes.in / 1e6, 100.0 * link_fraction,
             overlaps ? fmt::format("{:.1f}%", 100.0 * hidden) : "n/a", offload.build_seconds,
             offload.cache->device_memory_bytes() / 1048576.0);
  return Json::object({{"batch", cell.batch},
                       {"context", cell.context},
                       {"device_step_s", to_json(stats[0])},
                       {"offload_step_s", to_json(stats[1])},
                       {"offload_over_device", to_json(ratio)},
                       {"tokens_per_s_device", cell.batch / t_plain},
                       {"tokens_per_s_offload", cell.batch / t_off},
                       {"bytes_in_per_step", bytes.in},
                       {"bytes_out_per_step", bytes.out},
                       {"link_fraction", link_fraction},
                       {"copy_hidden_fraction", overlaps ? Json(hidden) : Json()},
                       {"pin_seconds", offload.build_seconds},
                       {"device_bytes_offload", offload.cache->device_memory_bytes()},
                       {"host_bytes_offload", offload.cache->host_memory_bytes()},
                       {"device_bytes_plain", plain.cache->device_memory_bytes()}});
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  flags::Flags flags("statickv_bench_offload",
                     "decode with the KV cache offloaded to host memory against the device cache");
  flags.add_device(&o.device);
  add_shape_flag(flags, &o.shape,
                 "model shape, random weights (default: llama-3.1-8b on cuda, "
                 "small on cpu)");
  flags::add_dtype(flags, &o.dtype, at::kBFloat16);
  flags.add("--cells L", &o.cells,
            "batch x context cells, e.g. 1x4096,16x8192 (default: the 8B sweep on cuda: batch 1 "
            "at 4k..128k, batch 16 at 4k..16k; 1x256,1x1024,4x512 on cpu)");
  flags.add("--rounds N", &o.rounds, "interleaved samples per variant", /*min=*/1);
  flags.add("--calls N", &o.calls, "steps per sample", /*min=*/1);
  flags.add_switch("--no-graphs", &o.no_graphs, "CUDA: eager steps only");
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.parse(argc, argv);
  flags::set_threads(o.threads);
  c10::InferenceMode inference;
  const at::Device device = flags::parse_device(o.device);
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kBFloat16);
  const std::string shape = !o.shape.empty()   ? o.shape
                            : device.is_cuda() ? "llama-3.1-8b"
                                               : "small";
  const std::vector<Cell> cells = parse_cells(o.cells.empty() ? default_cells(device) : o.cells);
  const bool graphs = device.is_cuda() && !o.no_graphs;

  const Link link = link_bandwidth(device);
  fmt::print(
      "statickv offload decode: {} {} on {}, {}; link: host-to-device {:.1f} GB/s, "
      "device-to-host {:.1f} GB/s ({})\n",
      shape, flags::dtype_name(dtype), device.str(), graphs ? "CUDA graphs" : "eager",
      link.h2d / 1e9, link.d2h / 1e9, device.is_cuda() ? "pinned, plain copy" : "host copy");
  auto model = device.is_cuda() ? device_random_model(shape, dtype, device)
                                : random_model(shape, dtype, device);
  fmt::print("{:>5} {:>7} {:>10} {:>10}  {:<24} {:>9} {:>9} {:>9} {:>8} {:>9}\n", "batch",
             "context", "dev tok/s", "off tok/s", "offload/device step", "MB in", "of link",
             "hidden", "pin s", "dev MiB");
  Json rows = Json::array();
  for (const Cell& cell : cells) rows.push_back(run_cell(*model, cell, link, o, graphs));
  write_json(o.json, Json::object({{"benchmark", "offload"},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"shape", shape},
                                   {"dtype", flags::dtype_name(dtype)},
                                   {"graphs", graphs},
                                   {"link_h2d_Bps", link.h2d},
                                   {"link_d2h_Bps", link.d2h},
                                   {"cells", rows}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_offload");
}
