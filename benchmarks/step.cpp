// The decode step, counted (Note [counted step]): launches per layer and
// outside the layers, copies to the host and host syncs of one greedy
// decode step, plain and fused, per batch; with --time, the two paths' step
// times measured interleaved, side by side.
//
// Default: a 2-layer model of the llama-3.2-1b shape (per layer, scaled to
// its 16 layers plus what runs outside them) and Gemma 3 270M, random
// weights (--shape NAME[:LAYERS],...). --checkpoint DIR counts (and times)
// a real model instead. On CUDA it also counts the kernel, memcpy and
// memset nodes of a captured step (forward and argmax) per path.
//
// With --time it also times the sampling head against the host sampler.
//
//   statickv_bench_step [--device D] [--dtype T] [--batch 1,16] [--time] ...

#include "bench_model.hpp"

#include <statickv/engine/step_count.hpp>
#include <statickv/sampling/host_sampling.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <fmt/format.h>

#include <algorithm>
#include <memory>

using namespace statickv;
using namespace statickv::bench;
using reference::DecodePath;

namespace {

struct Options {
  std::string device = "auto", dtype, checkpoint, json, batches = "1,16";
  std::string shapes = "llama-3.2-1b:2,gemma3-270m";
  int64_t context = 64;
  int rounds = 9, calls = 4, threads = 0;
  bool time = false;
};

// Goals (docs/design.md, Note [counted step]): a fused Llama layer,
// attention and cache write included, and the step outside the layers.
constexpr double kLayerGoal = 8;
constexpr int64_t kOutsideGoal = 16;
// Note [sampling head]: launches the head may add to a step.
constexpr int64_t kHeadGoal = 12;

struct Subject {
  std::string name;
  std::unique_ptr<reference::LlamaModel> model;
  int64_t full_layers = 0;  // the shape's own layer count, for the scaled step
};

Subject random_subject(const std::string& shape, int64_t layers, at::ScalarType dtype,
                       const at::Device& device) {
  reference::ModelConfig config = reference::named_config(shape);
  Subject s;
  s.full_layers = config.num_hidden_layers;
  if (layers > 0 && layers < config.num_hidden_layers) {
    config.num_hidden_layers = layers;
    config.layer_types.resize(static_cast<size_t>(layers));
  }
  config.validate();
  s.name = layers > 0 ? fmt::format("{} ({} layers)", shape, config.num_hidden_layers) : shape;
  s.model = device_random_model(std::move(config), dtype, device);
  return s;
}

// "name" or "name:layers".
Subject subject_of(const std::string& spec, at::ScalarType dtype, const at::Device& device) {
  const size_t colon = spec.find(':');
  const std::string name = spec.substr(0, colon);
  const std::vector<std::string> names = reference::named_config_names();
  if (std::find(names.begin(), names.end(), name) == names.end()) {
    std::string known;
    for (const std::string& n : names) known += (known.empty() ? "" : ", ") + n;
    throw flags::FlagError("--shape: expected names of " + known +
                           " (each NAME or NAME:LAYERS) but got '" + spec + "'");
  }
  if (colon == std::string::npos) return random_subject(name, 0, dtype, device);
  const std::vector<int64_t> layers = flags::parse_int_list("--shape", spec.substr(colon + 1), 1);
  return random_subject(name, layers.front(), dtype, device);
}

#ifdef STATICKV_HAS_CUDA
// Kernel, memcpy and memset nodes of one captured step (forward + argmax).
Json graph_nodes(reference::DecodeStep& step, const at::Device& device) {
  const statickv::detail::GraphNodeCounts n =
      statickv::detail::count_graph_nodes(device, 2, [&] { step.device_step(); });
  return Json::object(
      {{"kernels", n.kernels}, {"copies", n.copies}, {"sets", n.sets}, {"nodes", n.total}});
}
#endif

// The operators launched in `region`, each per `per` (a layer), most first.
std::string region_ops(const reference::StepCount& n, const std::string& region, int64_t per) {
  std::vector<std::pair<int64_t, std::string>> ops;
  const auto it = n.counts.launched.find(region);
  if (it == n.counts.launched.end()) return "";
  for (const auto& [name, count] : it->second) ops.push_back({count, name});
  std::sort(ops.rbegin(), ops.rend());
  std::string out;
  for (const auto& [count, name] : ops) {
    out += fmt::format("{}{} {:.4g}", out.empty() ? "" : ", ", name,
                       static_cast<double>(count) / static_cast<double>(per));
  }
  return out;
}

Json count_subject(const Subject& s, const std::vector<int64_t>& batches, int64_t context,
                   const at::Device& device) {
  Json rows = Json::array();
  fmt::print("\n{}: launches per decode step\n", s.name);
  fmt::print("{:>6} {:>6} {:>10} {:>8} {:>12} {:>11} {:>6}\n", "path", "batch", "per layer",
             "outside", fmt::format("{} layers", s.full_layers), "host copies", "syncs");
  for (DecodePath path : {DecodePath::kPlain, DecodePath::kFused}) {
    for (int64_t batch : batches) {
      const reference::StepCount n = reference::count_decode_step(*s.model, path, batch, context);
      const double scaled =
          n.per_layer() * static_cast<double>(s.full_layers) + static_cast<double>(n.outside);
      fmt::print("{:>6} {:>6} {:>10.4g} {:>8} {:>12.5g} {:>11} {:>6}\n", reference::to_string(path),
                 batch, n.per_layer(), n.outside, scaled, n.host_copies, n.syncs);
      if (batch == batches.front()) {
        fmt::print("       per layer: {}\n", region_ops(n, reference::kLayerRegion, n.layers));
      }
      Json row = {{"path", reference::to_string(path)},
                  {"batch", batch},
                  {"per_layer", n.per_layer()},
                  {"outside", n.outside},
                  {"scaled_step", scaled},
                  {"host_copies", n.host_copies},
                  {"syncs", n.syncs}};
#ifdef STATICKV_HAS_CUDA
      if (device.is_cuda()) {
        reference::DecodeStep step(*s.model, path, batch, context);
        row["graph"] = graph_nodes(step, device);
        fmt::print("       captured step: {} kernels ({:.1f} per layer), {} memcpy, {} memset\n",
                   row["graph"]["kernels"].get<int64_t>(),
                   static_cast<double>(row["graph"]["kernels"].get<int64_t>()) /
                       static_cast<double>(n.layers),
                   row["graph"]["copies"].get<int64_t>(), row["graph"]["sets"].get<int64_t>());
      }
#else
      (void)device;
#endif
      rows.push_back(row);
      if (path == DecodePath::kFused && batch == batches.front()) {
        fmt::print("       goals: <= {} per layer ({}), <= {} outside ({})\n", kLayerGoal,
                   n.per_layer() <= kLayerGoal ? "met" : "missed", kOutsideGoal,
                   n.outside <= kOutsideGoal ? "met" : "missed");
      }
    }
  }
  return rows;
}

// The settings the head's rows are counted with: what each stage costs.
std::vector<std::pair<std::string, reference::Sampling>> head_settings() {
  reference::Sampling greedy, sampled, scored;
  sampled.temperature = 0.8, sampled.top_p = 0.95, sampled.presence_penalty = 0.5;
  scored = sampled;
  scored.top_k = 40, scored.min_p = 0.05, scored.repetition_penalty = 1.1;
  scored.logit_bias = {{1, 2.0}}, scored.min_tokens = 2, scored.logprobs = 5;
  return {{"greedy", greedy},
          {"sampled (t 0.8, top_p 0.95, presence 0.5)", sampled},
          {"everything (+ top_k, min_p, repetition, bias, min_tokens, logprobs 5)", scored}};
}

// Note [sampling head]: the launches the head adds to a step (over the
// greedy step's one argmax), per settings and batch.
Json count_head(const Subject& s, const std::vector<int64_t>& batches, const at::Device& device) {
  Json rows = Json::array();
  const int64_t vocab = s.model->config().vocab_size;
  fmt::print("       sampling head, replacing the argmax (goal: adds <= {}):\n", kHeadGoal);
  for (const auto& [name, settings] : head_settings()) {
    for (int64_t batch : batches) {
      const reference::StepCount n = reference::count_head_pick(vocab, batch, settings, device);
      // The tensor composition the fused kernel replaces.
      const reference::StepCount c =
          reference::count_head_pick(vocab, batch, settings, device, /*fused=*/false);
      fmt::print(
          "       {:<72} batch {:>3}: {:>3} launches (adds {:>3}; composition {:>3}), {} host "
          "copy, {} syncs\n",
          name, batch, n.outside, n.outside - 1, c.outside, n.host_copies, n.syncs);
      if (batch == batches.front() && n.outside > 1) {
        fmt::print("         {}\n", region_ops(n, "", 1));
      }
      rows.push_back({{"settings", name},
                      {"batch", batch},
                      {"launches", n.outside},
                      {"added", n.outside - 1},
                      {"composition_launches", c.outside},
                      {"host_copies", n.host_copies},
                      {"syncs", n.syncs}});
    }
  }
  return rows;
}

// Plain against fused per batch, interleaved: ms per step and plain/fused.
Json time_subject(const Subject& s, const std::vector<int64_t>& batches, const Options& o,
                  const at::Device& device) {
  Json rows = Json::array();
  fmt::print("\n{}: decode step time, {} cached tokens ({} rounds x {} calls)\n", s.name, o.context,
             o.rounds, o.calls);
  for (int64_t batch : batches) {
    reference::DecodeStep plain(*s.model, DecodePath::kPlain, batch, o.context);
    reference::DecodeStep fused(*s.model, DecodePath::kFused, batch, o.context);
    const std::vector<Stats> t =
        measure_interleaved({{"plain", [&] { plain.run(); }}, {"fused", [&] { fused.run(); }}},
                            device, o.rounds, o.calls, /*warmup=*/2);
    const Stats ratio = paired_ratio(t[0], t[1]);
    fmt::print("batch {:>3}: plain {:.2f} ms, fused {:.2f} ms, plain/fused {}\n", batch,
               t[0].median * 1e3, t[1].median * 1e3, ratio_text(ratio));
    rows.push_back({{"batch", batch},
                    {"plain", to_json(t[0])},
                    {"fused", to_json(t[1])},
                    {"plain_over_fused", to_json(ratio)}});
  }
  return rows;
}

// Note [sampling head]: the head against the host sampler it replaced, on
// the same logits [batch, vocab], every row sampled (temperature 0.8, top_p
// 0.95): the host sampler filters and draws each row on the CPU from a
// seeded generator; the head picks every row at once and copies the ids once.
Json time_head(const Subject& s, const std::vector<int64_t>& batches, const Options& o,
               const at::Device& device) {
  Json rows = Json::array();
  const int64_t vocab = s.model->config().vocab_size;
  fmt::print("\n{}: sampling every row (t 0.8, top_p 0.95), vocab {}\n", s.name, vocab);
  reference::Sampling sampled;
  sampled.temperature = 0.8, sampled.top_p = 0.95;
  for (int64_t batch : batches) {
    reference::SamplingHeadOptions h;
    h.max_batch = batch, h.vocab_size = vocab, h.device = device;
    reference::SamplingHead head(h);
    for (int64_t r = 0; r < batch; ++r) head.set_row(r, sampled, {}, {});
    const at::Tensor logits = at::randn({batch, vocab}, at::TensorOptions().device(device));
    const std::vector<bool> takes(static_cast<size_t>(batch), true);
    at::Generator generator = at::make_generator<at::CPUGeneratorImpl>(0);
    const auto host = [&] {
      for (int64_t r = 0; r < batch; ++r) {
        reference::host_sample_tokens(logits[r].unsqueeze(0), 0.8, 0, 0.95, generator)
            .item<int64_t>();
      }
    };
    const auto on_device = [&] {
      head.pick(logits, takes);
      head.fetch(batch);
    };
    const std::vector<Stats> t = measure_interleaved({{"host", host}, {"head", on_device}}, device,
                                                     o.rounds, o.calls, /*warmup=*/2);
    const Stats ratio = paired_ratio(t[0], t[1]);
    fmt::print("batch {:>3}: host sampler {:.3f} ms, head {:.3f} ms, host/head {}\n", batch,
               t[0].median * 1e3, t[1].median * 1e3, ratio_text(ratio));
    rows.push_back({{"batch", batch},
                    {"host", to_json(t[0])},
                    {"head", to_json(t[1])},
                    {"host_over_head", to_json(ratio)}});
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) try {
  Options o;
  flags::Flags flags("statickv_bench_step",
                     "one decode step counted (launches, host copies, syncs), plain and fused");
  flags.add_device(&o.device);
  flags::add_dtype(flags, &o.dtype, at::kBFloat16);  // bf16 on the CPU too (see below)
  flags.add("--shape LIST", &o.shapes,
            "comma-separated named shapes, each NAME or NAME:LAYERS (random weights; default "
            "llama-3.2-1b:2,gemma3-270m)");
  flags.add("--checkpoint DIR", &o.checkpoint,
            "count (and time) this checkpoint instead of --shape");
  flags.add("--batch LIST", &o.batches, "comma-separated batch sizes (default 1,16)");
  flags.add("--context N", &o.context, "tokens cached before the step", /*min=*/1);
  flags.add_switch("--time", &o.time, "also time plain against fused, interleaved");
  flags.add("--rounds N", &o.rounds, "--time: interleaved samples per path", /*min=*/1);
  flags.add("--calls N", &o.calls, "--time: steps per sample", /*min=*/1);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.parse(argc, argv);
  flags::set_threads(o.threads);
  const at::Device device = flags::parse_device(o.device);
  // bfloat16 by default on the CPU too: the plain path's casts count.
  const at::ScalarType dtype =
      o.dtype.empty() ? at::kBFloat16 : flags::parse_dtype(o.dtype, device);
  const std::vector<int64_t> batches = flags::parse_int_list("--batch", o.batches, 1);

  std::vector<Subject> subjects;
  if (!o.checkpoint.empty()) {
    reference::Checkpoint ckpt = reference::load_checkpoint(o.checkpoint, dtype, device);
    Subject s;
    s.name = o.checkpoint;
    s.full_layers = ckpt.config.num_hidden_layers;
    s.model = std::make_unique<reference::LlamaModel>(ckpt.config, std::move(ckpt.weights));
    subjects.push_back(std::move(s));
  } else {
    for (const std::string& spec : flags::split_list(o.shapes)) {
      subjects.push_back(subject_of(spec, dtype, device));
    }
  }
  fmt::print("statickv_bench_step: {} on {}, launches counted by OpCounter{}\n",
             flags::dtype_name(dtype), device.str(),
             device.is_cpu() ? " (the CPU proxy: one launch per operator that does work)" : "");
  Json json = Json::object({{"benchmark", "step_ops"},
                            {"command", command_line(argc, argv)},
                            {"environment", environment(device)},
                            {"dtype", flags::dtype_name(dtype)},
                            {"context", o.context}});
  for (const Subject& s : subjects) {
    Json entry = Json::object({{"model", s.name}, {"layers", s.model->config().num_hidden_layers}});
    entry["counts"] = count_subject(s, batches, o.context, device);
    entry["head"] = count_head(s, batches, device);
    if (o.time) {
      entry["time"] = time_subject(s, batches, o, device);
      entry["head_time"] = time_head(s, batches, o, device);
    }
    json["subjects"].push_back(entry);
  }
  write_json(o.json, json);
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_step");
}
