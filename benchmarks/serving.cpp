// statickv_bench_serving: continuous batching (reference::Scheduler) against
// static batching (reference::Generator) on the same request trace, replayed
// in real time: Poisson arrivals at --rate requests/s, prompt and output
// lengths log-uniform in [--min-prompt, --max-prompt] and [--min-new,
// --max-new] (reference/engine/include/statickv/engine/trace.hpp).
//
// Static batching: whenever the Generator is free it takes every request
// that has arrived (up to --max-batch) as one ragged batch and generates
// until the batch's largest max_new_tokens; each request keeps its own
// first max_new_tokens tokens. Continuous batching: one warmed-up Scheduler
// over a cache of --max-batch rows. Both greedy, same model, same trace.
//
// Reported: throughput (requested tokens / makespan), time to first token
// and per-token latency (p50, p99) over requests, and how many requests got
// identical tokens from both.
//
// --sampling: the Scheduler also serves the trace with every other request
// sampled (temperature 0.8, top_p 0.95, presence penalty 0.5) against all
// greedy, --rounds times interleaved, and prints sampled / greedy
// throughput (Note [sampling head]; use --rate 0 to measure capacity).

#include "bench_model.hpp"
#include "serving_trace.hpp"

#include <statickv/engine/scheduler.hpp>
#include <statickv/engine/trace.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <thread>

using namespace statickv;
using namespace statickv::bench;
using reference::ServeClock;

namespace {

struct Options {
  std::string shape = "small", device = "auto", dtype, json, trace_out;
  int64_t requests = 200, max_batch = 8, max_len = 512, prefill_chunk = 64, seed = 0;
  int64_t min_prompt = 4, max_prompt = 256, min_new = 4, max_new = 128;
  double rate = 20.0;
  int threads = 0, rounds = 3;
  bool sampling = false, head_in_step = false;
};

Options parse(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv_bench_serving",
                     "continuous batching (Scheduler) vs static batching (Generator) on one trace");
  add_shape_flag(flags, &o.shape, "model shape, random weights (default small)");
  flags.add_device(&o.device);
  flags::add_dtype(flags, &o.dtype, at::kBFloat16);
  flags.add("--requests N", &o.requests, "requests in the trace", /*min=*/1);
  flags.add("--rate R", &o.rate, "mean arrivals per second (Poisson; 0 = all at once)",
            /*min=*/0.0);
  flags.add("--min-prompt N", &o.min_prompt, "shortest prompt", /*min=*/1);
  flags.add("--max-prompt N", &o.max_prompt, "longest prompt (log-uniform between)", /*min=*/1);
  flags.add("--min-new N", &o.min_new, "fewest new tokens", /*min=*/1);
  flags.add("--max-new N", &o.max_new, "most new tokens (log-uniform between)", /*min=*/1);
  flags.add("--max-batch N", &o.max_batch, "cache rows, both engines", /*min=*/1);
  flags.add("--max-len N", &o.max_len, "positions per row", /*min=*/2);
  flags.add("--prefill-chunk N", &o.prefill_chunk, "continuous: prompt tokens per row per step",
            /*min=*/1);
  flags.add("--seed N", &o.seed, "trace and weights", /*min=*/0);
  flags.add_switch("--sampling", &o.sampling,
                   "also serve half the requests sampled against all greedy, interleaved");
  flags.add("--rounds N", &o.rounds, "--sampling: interleaved runs per variant", /*min=*/1);
  flags.add_switch("--head-in-step", &o.head_in_step,
                   "the sampling head picks inside the runners' steps, every stage for every row "
                   "(the default where CUDA graphs capture; on the CPU, its cost)");
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.add("--trace-out FILE", &o.trace_out,
            "also write the trace as JSON (arrival_s, prompt, max_new_tokens per request), for "
            "benchmarks/hf_serving.py");
  flags.parse(argc, argv);
  if (o.max_prompt < o.min_prompt) throw flags::FlagError("--max-prompt: expected >= --min-prompt");
  if (o.max_new < o.min_new) throw flags::FlagError("--max-new: expected >= --min-new");
  if (o.max_prompt + o.max_new > o.max_len) {
    throw flags::FlagError(
        fmt::format("--max-len: expected at least --max-prompt + --max-new = {} but "
                    "got {}",
                    o.max_prompt + o.max_new, o.max_len));
  }
  return o;
}

/// Continuous batching: submit each request when due, step while busy.
/// The settings of a sampled request in --sampling's mix.
reference::Sampling mixed_sampling(size_t i) {
  reference::Sampling s;
  s.temperature = 0.8, s.top_p = 0.95, s.presence_penalty = 0.5, s.seed = i;
  return s;
}

std::vector<Served> run_continuous(reference::Scheduler& engine,
                                   const std::vector<reference::TraceRequest>& trace,
                                   bool half_sampled = false) {
  std::vector<Served> served(trace.size());
  size_t next = 0, done = 0;
  const auto start = ServeClock::now();
  while (done < trace.size()) {
    for (; next < trace.size() && due_at(start, trace[next].arrival) <= ServeClock::now(); ++next) {
      reference::Request r;
      r.id = std::to_string(next);
      r.prompt = trace[next].prompt;
      r.max_new_tokens = trace[next].max_new_tokens;
      r.stop = std::vector<int64_t>{};
      if (half_sampled && next % 2 == 1) r.sampling = mixed_sampling(next);
      r.arrival = due_at(start, trace[next].arrival);
      engine.submit(std::move(r));
    }
    if (engine.idle()) {
      std::this_thread::sleep_until(due_at(start, trace[next].arrival));
      continue;
    }
    engine.step();
    for (reference::Completion& c : engine.take_finished()) {
      Served& s = served[std::stoul(c.id)];
      s.ttft = c.stats.ttft_seconds;
      s.per_token =
          c.stats.decode_tokens_per_second > 0 ? 1.0 / c.stats.decode_tokens_per_second : 0.0;
      s.finish = since(start, ServeClock::now());
      s.tokens = std::move(c.tokens);
      ++done;
    }
  }
  return served;
}

/// Static batching: every arrived request (up to max_batch) as one batch.
std::vector<Served> run_static(reference::Generator& generator,
                               const std::vector<reference::TraceRequest>& trace,
                               int64_t max_batch) {
  std::vector<Served> served(trace.size());
  size_t next = 0;
  const auto start = ServeClock::now();
  while (next < trace.size()) {
    std::this_thread::sleep_until(due_at(start, trace[next].arrival));
    std::vector<size_t> batch;
    std::vector<std::vector<int64_t>> prompts;
    int64_t longest = 1;
    for (; next < trace.size() && static_cast<int64_t>(batch.size()) < max_batch &&
           due_at(start, trace[next].arrival) <= ServeClock::now();
         ++next) {
      batch.push_back(next);
      prompts.push_back(trace[next].prompt);
      longest = std::max(longest, trace[next].max_new_tokens);
    }
    const double began = since(start, ServeClock::now());
    const reference::GenerateResult out = generator.generate(prompts, longest);
    const double ended = since(start, ServeClock::now());
    for (size_t i = 0; i < batch.size(); ++i) {
      Served& s = served[batch[i]];
      const auto keep = static_cast<size_t>(trace[batch[i]].max_new_tokens);
      s.tokens.assign(out.tokens[i].begin(),
                      out.tokens[i].begin() + std::min(keep, out.tokens[i].size()));
      s.ttft = began + out.prefill_seconds - trace[batch[i]].arrival;
      s.per_token = out.decode_steps > 0 ? out.decode_seconds / out.decode_steps : 0.0;
      s.finish = ended;
    }
  }
  return served;
}

/// --sampling: all greedy against half sampled, interleaved; the ratio is
/// sampled / greedy throughput (every request runs to its limit: no stop ids).
Json compare_sampling(reference::Scheduler& engine,
                      const std::vector<reference::TraceRequest>& trace, const Options& o,
                      const at::Device& device) {
  const std::vector<Stats> t = measure_interleaved(
      {{"greedy", [&] { run_continuous(engine, trace); }},
       {"sampled", [&] { run_continuous(engine, trace, /*half_sampled=*/true); }}},
      device, o.rounds, /*calls=*/1, /*warmup=*/0);
  const Stats ratio = paired_ratio(t[0], t[1]);
  fmt::print(
      "half sampled (t 0.8, top_p 0.95, presence 0.5) / all greedy throughput: {} ({} rounds; "
      "makespan {:.2f} s greedy, {:.2f} s sampled)\n",
      ratio_text(ratio), o.rounds, t[0].median, t[1].median);
  return Json::object({{"greedy_makespan", to_json(t[0])},
                       {"sampled_makespan", to_json(t[1])},
                       {"sampled_over_greedy_throughput", to_json(ratio)}});
}

void write_trace(const std::string& path, const std::vector<reference::TraceRequest>& trace) {
  if (path.empty()) return;
  Json requests = Json::array();
  for (const auto& r : trace) {
    requests.push_back(Json::object(
        {{"arrival_s", r.arrival}, {"prompt", r.prompt}, {"max_new_tokens", r.max_new_tokens}}));
  }
  write_json(path, Json::object({{"requests", requests}}));
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  flags::set_threads(o.threads);
  const at::Device device = flags::parse_device(o.device);
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kBFloat16);
  const auto model = random_model(o.shape, dtype, device, static_cast<uint64_t>(o.seed));
  reference::TraceOptions t;
  t.requests = o.requests;
  t.rate = o.rate;
  t.min_prompt = o.min_prompt;
  t.max_prompt = o.max_prompt;
  t.min_new_tokens = o.min_new;
  t.max_new_tokens = o.max_new;
  t.vocab_size = model->config().vocab_size;
  t.seed = static_cast<uint64_t>(o.seed);
  const std::vector<reference::TraceRequest> trace = reference::make_trace(t);
  int64_t tokens = 0;
  for (const auto& r : trace) tokens += r.max_new_tokens;
  write_trace(o.trace_out, trace);

  reference::SchedulerOptions so;
  so.cache = reference::CacheKind::kStatic;
  so.max_batch = o.max_batch;
  so.max_len = o.max_len;
  so.prefill_chunk = o.prefill_chunk;
  if (o.head_in_step) so.head_in_step = true;
  reference::Scheduler engine(*model, so);
  engine.warm_up();
  reference::GenerateOptions go = serve_options(ServeMode::kBucketed, o.max_len);
  if (o.head_in_step) go.head_in_step = true;
  reference::Generator generator(*model, go, o.max_batch, o.max_len);
  // Warm-up: thread pools, kernels, and on CUDA the Generator's captures.
  run_static(generator,
             std::vector<reference::TraceRequest>(
                 trace.begin(), trace.begin() + std::min<size_t>(trace.size(), 16)),
             o.max_batch);

  const std::vector<Served> continuous = run_continuous(engine, trace);
  const std::vector<Served> batched = run_static(generator, trace, o.max_batch);
  int64_t identical = 0;
  for (size_t i = 0; i < trace.size(); ++i) identical += continuous[i].tokens == batched[i].tokens;
  const Summary c = summarize(continuous, tokens), s = summarize(batched, tokens);
  const reference::SchedulerStats es = engine.stats();

  fmt::print(
      "statickv_bench_serving: {} ({}) on {}, {} requests at {} req/s, prompts {}..{}, new "
      "{}..{} tokens ({} in all), max_batch {}\n",
      o.shape, flags::dtype_name(dtype), device.str(), o.requests, o.rate, o.min_prompt,
      o.max_prompt, o.min_new, o.max_new, tokens, o.max_batch);
  fmt::print("{:<12} {:>10} {:>10} {:>10} {:>10} {:>12} {:>12}\n", "", "tokens/s", "makespan s",
             "ttft p50ms", "ttft p99ms", "tok p50 ms", "tok p99 ms");
  print_row("continuous", c);
  print_row("static", s);
  fmt::print(
      "continuous / static throughput {:.2f}x; identical tokens {}/{}; occupancy {:.3f}, "
      "padded fraction {:.3f}, {} steps ({} with prefill), captures {}, replays {}\n",
      s.throughput > 0 ? c.throughput / s.throughput : 0.0, identical, trace.size(), es.occupancy(),
      es.padded_fraction(), es.steps, es.mixed_steps, es.runner.captures, es.runner.replays);
  Json sampling;
  if (o.sampling) sampling = compare_sampling(engine, trace, o, device);
  write_json(o.json, Json::object({{"benchmark", "serving"},
                                   {"sampling", sampling},
                                   {"command", command_line(argc, argv)},
                                   {"environment", environment(device)},
                                   {"continuous", to_json(c)},
                                   {"static", to_json(s)},
                                   {"identical_tokens", identical},
                                   {"requests", o.requests},
                                   {"occupancy", es.occupancy()},
                                   {"padded_fraction", es.padded_fraction()}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_serving");
}
