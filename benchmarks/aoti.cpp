// An AOTInductor-compiled decoder (examples/aoti/export.py) on a statickv
// cache against the reference decoder on the same kind of cache, same
// checkpoint, side by side in one process: a decode step (q = 1) and a
// prefill chunk (q = --chunk), each at --context cached tokens for --batch
// rows, measured interleaved, fp32, on the CPU or (--device cuda, with a
// package exported with --device cuda) a GPU. Prints ms per step and the ratio
// AOTInductor : reference (below 1: the package is faster).
//
//   statickv_bench_aoti --checkpoint DIR --package FILE.pt2 [--max-batch N --max-len N
//                       --max-chunk N] [--device D] [--batch B] [--context N] [--chunk Q]
//                       [--threads N] [--json FILE]

#include "bench_model.hpp"

#include <statickv/aoti/package_decoder.hpp>
#include <statickv/model/backends.hpp>
#include <statickv/model/checkpoint.hpp>

#include <fmt/format.h>

#include <cstdio>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string checkpoint, package, json, device = "cpu";
  int64_t max_batch = 4, max_len = 40, max_chunk = 16, batch = 4, context = 24, chunk = 16;
  int rounds = 15, calls = 5, threads = 0;
};

Options parse(int argc, char** argv) {
  Options o;
  Flags flags("statickv_bench_aoti", "AOTInductor package vs reference decoder: decode, prefill");
  flags.add("--checkpoint DIR", &o.checkpoint,
            "Hugging Face checkpoint the package was built from");
  flags.add("--package FILE", &o.package, "AOTInductor package (examples/aoti/export.py)");
  flags.add("--max-batch N", &o.max_batch, "cache rows (as the package was built)", 1);
  flags.add("--max-len N", &o.max_len, "cache capacity (as the package was built)", 2);
  flags.add("--max-chunk N", &o.max_chunk, "sliding caches: max_chunk (as built)", 1);
  flags.add_device(&o.device);
  flags.add("--batch N", &o.batch, "live rows", 1);
  flags.add("--context N", &o.context, "tokens cached before each step", 1);
  flags.add("--chunk N", &o.chunk, "prefill chunk length", 1);
  flags.add("--rounds N", &o.rounds, "interleaved samples per variant", 1);
  flags.add("--calls N", &o.calls, "steps per sample", 1);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.parse(argc, argv);
  if (o.checkpoint.empty() || o.package.empty()) {
    throw FlagError("--checkpoint and --package are required");
  }
  if (o.batch > o.max_batch) throw FlagError("--batch: expected <= --max-batch");
  if (o.context + o.chunk > o.max_len)
    throw FlagError("--context + --chunk: expected <= --max-len");
  return o;
}

/// One step's inputs: `q` tokens per row at positions [start, start + q).
struct StepInputs {
  at::Tensor ids, positions;
  int64_t attend = 0;
};

StepInputs step_inputs(int64_t batch, int64_t start, int64_t q, int64_t vocab,
                       const at::Device& device) {
  StepInputs s;
  s.ids = at::randint(vocab, {batch, q}, at::kLong).to(device);
  s.positions = at::arange(start, start + q, at::kLong).repeat({batch, 1}).to(device);
  s.attend = start + q;
  return s;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  set_threads(o.threads);
  c10::InferenceMode inference;
  const at::Device device = parse_device(o.device);
  reference::Checkpoint ckpt = reference::load_checkpoint(o.checkpoint, at::kFloat, device);
  const reference::LlamaModel model(ckpt.config, std::move(ckpt.weights));
  CacheConfig config = model.cache_config(o.max_batch, o.max_len);
  if (config.has_type(LayerType::kSliding)) config.max_chunk = o.max_chunk;
  HybridCache ref_cache(config), aoti_cache(config);
  fill_cache(ref_cache, o.max_batch, o.context);
  fill_cache(aoti_cache, o.max_batch, o.context);
  reference::CacheBackend backend(ref_cache);
  aoti::PackageDecoder decoder(o.package, aoti_cache);
  const int64_t vocab = model.config().vocab_size;
  // Each call rewrites the same positions, so the cached length stays put.
  const StepInputs decode = step_inputs(o.batch, o.context, 1, vocab, device);
  const StepInputs prefill = step_inputs(o.batch, o.context, o.chunk, vocab, device);
  auto reference_step = [&](const StepInputs& s) {
    return [&] { model.forward(s.ids, s.positions, backend, s.attend); };
  };
  auto aoti_step = [&](const StepInputs& s) {
    return [&] { decoder.forward(s.ids, s.positions, s.attend); };
  };
  const std::vector<Variant> variants = {{"reference decode", reference_step(decode)},
                                         {"aoti decode", aoti_step(decode)},
                                         {"reference prefill", reference_step(prefill)},
                                         {"aoti prefill", aoti_step(prefill)}};
  const std::vector<Stats> s = measure_interleaved(variants, device, o.rounds, o.calls, 3);
  std::printf("%s, batch %lld, context %lld, %s, threads %d (%s)\n", o.package.c_str(),
              static_cast<long long>(o.batch), static_cast<long long>(o.context),
              device.str().c_str(), at::get_num_threads(), cpu_model().c_str());
  Json json = {{"environment", environment(device)}, {"command", command_line(argc, argv)}};
  for (size_t i = 0; i < variants.size(); ++i) {
    std::printf("  %-18s %8.3f ms/step (p10 %.3f, p90 %.3f)\n", variants[i].name.c_str(),
                s[i].median * 1e3, s[i].p10 * 1e3, s[i].p90 * 1e3);
    json[variants[i].name] = to_json(s[i]);
  }
  const Stats decode_ratio = paired_ratio(s[1], s[0]), prefill_ratio = paired_ratio(s[3], s[2]);
  std::printf("  aoti : reference   decode %s, prefill (%lld tokens) %s\n",
              ratio_text(decode_ratio).c_str(), static_cast<long long>(o.chunk),
              ratio_text(prefill_ratio).c_str());
  json["decode_ratio"] = to_json(decode_ratio);
  json["prefill_ratio"] = to_json(prefill_ratio);
  if (!o.json.empty()) write_json(o.json, json);
  return 0;
} catch (const FlagError& e) {
  std::fprintf(stderr, "statickv_bench_aoti: %s\n", e.what());
  return 2;
}
