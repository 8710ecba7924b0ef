// New prompt lengths (Hugging Face transformers issue 29151): serve N random
// prompt lengths in [1, max_len] (prefill + first token, one row) through
//   bucketed    a GraphRunner with power-of-two buckets (query and attended
//               length): one capture per bucket, padded compute
//   per-length  a GraphRunner with a bucket for every length: one capture per
//               new length, exact compute
//   eager       plain forward passes at the exact shapes
// Each repetition starts every mode from a fresh reference::Generator
// session (so captures are counted), serves the N prompts once ("first pass": captures included),
// then again ("second pass": replays only, the compute). Modes are
// interleaved in rotating order; medians over repetitions.
// Reported: captures, total time of each pass, padded-token fraction, and
// ratios: first pass per-length / bucketed (target on CUDA >= 10x) and
// second pass bucketed / per-length, the padded compute (target <= 1.5x).
// On the CPU no graph is captured: both runners run the same padded steps
// eagerly, so the CPU numbers measure padding cost only.
//
//   statickv_bench_prompts [--device D] [--shape S] [--max-len N] [--prompts N] ...

#include "bench_model.hpp"

#include <fmt/format.h>

#include <cstdio>
#include <random>

using namespace statickv;
using namespace statickv::bench;

namespace {

struct Options {
  std::string device = "auto", shape, dtype, json;
  int64_t max_len = 0, prompts = 64, seed = 0;
  int reps = 3, threads = 0;
};

struct PassTimes {
  std::vector<double> first, second;  // per repetition, seconds
  Json stats;                         // runner statistics of the last repetition
  int64_t captures = 0, keys = 0;
  double padded_fraction = 0;
};

Options parse_options(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv_bench_prompts",
                     "new prompt lengths: bucketed graphs vs capture per length vs eager");
  flags.add_device(&o.device);
  add_shape_flag(flags, &o.shape, "model shape (default: small on cpu, llama-3.2-1b on cuda)");
  flags::add_dtype(flags, &o.dtype, at::kBFloat16);
  flags.add("--max-len N", &o.max_len,
            "longest prompt and cache capacity, >= 2 (default 0: 256 on cpu, 2048 on cuda)",
            /*min=*/0);
  flags.add("--prompts N", &o.prompts, "random prompt lengths served per pass", /*min=*/1);
  flags.add("--reps N", &o.reps, "repetitions (fresh sessions each)", /*min=*/1);
  flags.add("--seed N", &o.seed, "seed of lengths, ids and weights", /*min=*/0);
  add_threads_flag(flags, &o.threads);
  add_json_flag(flags, &o.json);
  flags.parse(argc, argv);
  if (o.max_len == 1)
    throw flags::FlagError("--max-len: expected 0 (the default) or >= 2 but got 1");
  return o;
}

// --prompts random prompts of lengths in [1, max_len) (one token to generate).
std::vector<std::vector<int64_t>> random_prompts(const Options& o, int64_t max_len, int64_t vocab) {
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed) + 1);
  std::uniform_int_distribution<int64_t> length_of(1, max_len - 1);  // one token to generate
  std::uniform_int_distribution<int64_t> id_of(0, vocab - 1);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t i = 0; i < o.prompts; ++i) {
    std::vector<int64_t> prompt(static_cast<size_t>(length_of(rng)));
    for (auto& id : prompt) id = id_of(rng);
    prompts.push_back(std::move(prompt));
  }
  return prompts;
}

// The prompts' lengths, sorted, each once; `tokens` gets their sum.
std::vector<int64_t> distinct_lengths(const std::vector<std::vector<int64_t>>& prompts,
                                      int64_t* tokens) {
  std::vector<int64_t> distinct;
  for (const auto& p : prompts) {
    *tokens += static_cast<int64_t>(p.size());
    distinct.push_back(static_cast<int64_t>(p.size()));
  }
  std::sort(distinct.begin(), distinct.end());
  distinct.erase(std::unique(distinct.begin(), distinct.end()), distinct.end());
  return distinct;
}

// One fresh session in `mode` serving every prompt twice (two passes); the
// first tokens it generated. With `out`, records the passes' times and the
// prefill runner's statistics.
std::vector<int64_t> run_mode(const reference::LlamaModel& model,
                              const std::vector<std::vector<int64_t>>& prompts, ServeMode mode,
                              int64_t max_len, const at::Device& device, PassTimes* out) {
  reference::Generator session(model, serve_options(mode, max_len), /*max_batch=*/1, max_len);
  std::vector<int64_t> first_tokens;
  auto pass = [&] {
    const auto start = Clock::now();
    for (const auto& p : prompts) {
      first_tokens.push_back(session.generate({p}, /*max_new_tokens=*/1).tokens[0][0]);
    }
    return seconds_since(start, device);
  };
  const double first = pass();
  const double second = pass();
  if (out == nullptr) return first_tokens;
  out->first.push_back(first);
  out->second.push_back(second);
  const RunnerStats stats = session.prefill_stats();
  out->stats = to_json(stats);
  out->captures = stats.captures;
  out->keys = static_cast<int64_t>(stats.keys.size());
  int64_t real = 0, padded = 0;
  for (const KeyStats& k : stats.keys) {
    real += k.real_tokens;
    padded += k.padded_tokens;
  }
  out->padded_fraction =
      real + padded > 0 ? static_cast<double>(padded) / static_cast<double>(real + padded) : 0.0;
  return first_tokens;
}

// A warm-up session per mode, then --reps rounds of every mode (the order
// rotating each round): each mode's first tokens (of its last round) and,
// in `times`, its passes.
std::vector<std::vector<int64_t>> time_modes(const reference::LlamaModel& model,
                                             const std::vector<std::vector<int64_t>>& prompts,
                                             const std::vector<ServeMode>& modes, int64_t max_len,
                                             const at::Device& device, int reps,
                                             std::vector<PassTimes>* times) {
  // Warm-up (thread pools, allocator, kernel selection): one untimed
  // session per mode on a few prompts.
  {
    const std::vector<std::vector<int64_t>> few(
        prompts.begin(),
        prompts.begin() + static_cast<ptrdiff_t>(std::min<size_t>(prompts.size(), 4)));
    for (ServeMode m : modes) run_mode(model, few, m, max_len, device, nullptr);
  }
  std::vector<std::vector<int64_t>> tokens_of(modes.size());
  for (int r = 0; r < reps; ++r) {
    for (size_t j = 0; j < modes.size(); ++j) {
      const size_t i = (j + static_cast<size_t>(r)) % modes.size();
      tokens_of[i] = run_mode(model, prompts, modes[i], max_len, device, &(*times)[i]);
    }
  }
  return tokens_of;
}

// Prints the table of modes; its JSON rows. `first` and `second` get each
// mode's pass times.
Json report_modes(const std::vector<ServeMode>& modes, const std::vector<PassTimes>& times,
                  std::vector<Stats>* first, std::vector<Stats>* second) {
  fmt::print("\n{:<12} {:>9} {:>6} {:>16} {:>26} {:>26}\n", "mode", "captures", "keys",
             "padded tokens", "first pass s [p10, p90]", "second pass s [p10, p90]");
  Json rows = Json::array();
  first->assign(modes.size(), Stats{});
  second->assign(modes.size(), Stats{});
  for (size_t i = 0; i < modes.size(); ++i) {
    const Stats& f = (*first)[i] = summarize_keep(times[i].first);
    const Stats& s = (*second)[i] = summarize_keep(times[i].second);
    fmt::print("{:<12} {:>9} {:>6} {:>15.1f}% {:>26} {:>26}\n", to_string(modes[i]),
               times[i].captures, times[i].keys, 100.0 * times[i].padded_fraction,
               fmt::format("{:.3f} [{:.3f}, {:.3f}]", f.median, f.p10, f.p90),
               fmt::format("{:.3f} [{:.3f}, {:.3f}]", s.median, s.p10, s.p90));
    rows.push_back(Json::object({{"mode", to_string(modes[i])},
                                 {"captures", times[i].captures},
                                 {"keys", times[i].keys},
                                 {"padded_fraction", times[i].padded_fraction},
                                 {"first_pass_s", to_json(f)},
                                 {"second_pass_s", to_json(s)},
                                 {"runner", times[i].stats}}));
  }
  return rows;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  flags::set_threads(o.threads);
  const at::Device device = flags::parse_device(o.device);
  const bool cuda = device.is_cuda();
  const std::string shape = o.shape.empty() ? (cuda ? "llama-3.2-1b" : "small") : o.shape;
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kBFloat16);
  const int64_t max_len = o.max_len > 0 ? o.max_len : (cuda ? 2048 : 256);

  auto model = random_model(shape, dtype, device, static_cast<uint64_t>(o.seed));
  const std::vector<std::vector<int64_t>> prompts =
      random_prompts(o, max_len, model->config().vocab_size);
  int64_t tokens = 0;
  const std::vector<int64_t> distinct = distinct_lengths(prompts, &tokens);

  fmt::print("statickv prompt lengths: {} ({} layers, hidden {}), {} on {}\n", shape,
             model->config().num_hidden_layers, model->config().hidden_size,
             flags::dtype_name(dtype), device.str());
  fmt::print(
      "{} prompts, lengths in [1, {}) ({} distinct, {} tokens), {} repetitions, {} CPU "
      "threads{}\n",
      o.prompts, max_len, distinct.size(), tokens, o.reps, at::get_num_threads(),
      cuda ? "" : "; CPU: runners run their padded steps eagerly (no capture)");

  const std::vector<ServeMode> modes = {ServeMode::kBucketed, ServeMode::kPerLength,
                                        ServeMode::kEager};
  std::vector<PassTimes> times(modes.size());
  const std::vector<std::vector<int64_t>> tokens_of =
      time_modes(*model, prompts, modes, max_len, device, o.reps, &times);
  const bool same_tokens = tokens_of[0] == tokens_of[1] && tokens_of[1] == tokens_of[2];
  // Agreement with eager, token by token: in reduced precision on a GPU a
  // padded shape may run other GEMM kernels than the exact one, and a
  // random-weight model's near-tied logits can then pick another argmax.
  auto agreeing = [&](size_t mode) {
    int64_t n = 0;
    for (size_t i = 0; i < tokens_of[mode].size() && i < tokens_of[2].size(); ++i) {
      n += tokens_of[mode][i] == tokens_of[2][i] ? 1 : 0;
    }
    return n;
  };

  std::vector<Stats> first, second;
  const Json rows = report_modes(modes, times, &first, &second);
  const Stats cold = paired_ratio(first[1], first[0]);
  const Stats padded = paired_ratio(second[0], second[1]);
  const Stats vs_eager = paired_ratio(second[0], second[2]);
  fmt::print("\nfirst pass, per-length / bucketed (CUDA target >= 10x): {}\n", ratio_text(cold));
  fmt::print("second pass, bucketed / per-length (padded compute, target <= 1.5x): {}  {}\n",
             ratio_text(padded), padded.median <= 1.5 ? "ok" : "ABOVE TARGET");
  fmt::print("second pass, bucketed / eager: {}\n", ratio_text(vs_eager));
  fmt::print(
      "first tokens identical across modes: {} (equal to eager's: bucketed {}/{}, "
      "per-length {}/{})\n",
      same_tokens ? "yes" : "no", agreeing(0), tokens_of[2].size(), agreeing(1),
      tokens_of[2].size());

  write_json(
      o.json,
      Json::object(
          {{"benchmark", "prompt_lengths"},
           {"command", command_line(argc, argv)},
           {"environment", environment(device)},
           {"shape", shape},
           {"dtype", flags::dtype_name(dtype)},
           {"max_len", max_len},
           {"prompts", o.prompts},
           {"distinct_lengths", distinct.size()},
           {"prompt_tokens", tokens},
           {"reps", o.reps},
           {"graphs", cuda},
           {"modes", rows},
           {"ratios", Json::object({{"first_pass_per_length_over_bucketed", to_json(cold)},
                                    {"second_pass_bucketed_over_per_length", to_json(padded)},
                                    {"second_pass_bucketed_over_eager", to_json(vs_eager)}})},
           {"same_first_tokens", same_tokens},
           {"first_tokens_equal_to_eager", Json::object({{"bucketed", agreeing(0)},
                                                         {"per_length", agreeing(1)},
                                                         {"of", tokens_of[2].size()}})}}));
  return 0;
} catch (...) {
  return flags::fail("statickv_bench_prompts");
}
