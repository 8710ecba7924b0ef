// statickv-demo: runs the reference decoder on a named shape with random
// weights or on a Hugging Face checkpoint directory, through a static or
// hybrid cache and the DynamicCache baseline, and reports speed, memory and
// whether the two runs agree (logits within the dtype's tolerance; tokens
// equal but for near-ties). See --help.
//
// This file is the run: the generation options, the warmed-up sessions, the
// main run and the baseline. The flags are options.hpp's, the prompts
// prompts.hpp's and text_mode.hpp's, the model load.hpp's, and what is
// printed report.hpp's.

#include "load.hpp"
#include "options.hpp"
#include "report.hpp"
#include "rounds.hpp"
#include "text_mode.hpp"

#include <statickv/apps/model_flags.hpp>
#include <statickv/apps/storage_flags.hpp>
#include <statickv/engine/generator.hpp>
#include <statickv/flags/flags.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <functional>
#include <utility>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::demo;
using flags::FlagError;

namespace {

/// Progress on runs longer than a couple of seconds, on stderr.
std::function<void(int64_t, int64_t)> progress() {
  const auto started = std::chrono::steady_clock::now();
  return [started](int64_t done, int64_t planned) {
    const double elapsed =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    if (elapsed > 2.0)
      std::fprintf(stderr, "\r  decode %lld/%lld", static_cast<long long>(done),
                   static_cast<long long>(planned));
    if (elapsed > 2.0 && done == planned) std::fputs("\n", stderr);
  };
}

GenerateOptions generate_options(const Options& o, const ModelConfig& config, bool compare) {
  GenerateOptions options;
  options.max_new_tokens = o.max_new_tokens;
  options.temperature = o.temperature;
  options.top_k = o.top_k;
  options.top_p = o.top_p;
  options.seed = static_cast<uint64_t>(o.seed);
  options.prefill_chunk = o.prefill_chunk;
  options.bucketed = !o.eager;
  options.path = parse_decode_path(o.path, "--path");
  options.record_logits = compare;
  options.stop_at_eos = !o.ignore_eos;
  options.kv_storage = apps::parse_kv_storage(o.kv_dtype);
  options.host_offload = o.offload;
  options.cache = o.cache.empty() ? (config.has_sliding() ? CacheKind::kHybrid : CacheKind::kStatic)
                                  : parse_cache_kind(o.cache);
  options.on_step = o.text.given() ? nullptr : progress();  // text streams to stdout
  options.speculate = o.spec.speculate;
  return options;
}

// Prompt tokens per prefill pass of a static/hybrid session: --prefill-chunk
// (0: no limit) capped by what its cache takes in one step (a hybrid cache's
// sliding window), as Generator does. The baseline is given the same chunk,
// so the two prefill times compare like for like.
int64_t prefill_chunk_of(const LlamaModel& model, int64_t rows, int64_t max_len, int64_t flag) {
  CacheConfig config = model.cache_config(rows, max_len);
  config.max_chunk = flag > 0 ? std::min(flag, max_len) : 0;
  return config.effective_max_chunk();
}

/// One session's runs: the warm-up, then the main run (streamed for text),
/// through the prompt-cache file with --load-prompt; with --save-prompt the
/// prompt's row is saved afterwards. `cached`: a static/hybrid session (the
/// dynamic comparison run ignores both flags and checks the ids).
GenerateResult run_session(const Options& o, const Loaded& run, Generator& session, bool cached,
                           int64_t warm_tokens, bool stream) {
  auto generate = [&](int64_t tokens, const TokenCallback& on_token) {
    if (cached && !o.load_prompt.empty()) {
      return session.generate_with_prompt_cache(run.prompts[0], o.load_prompt, tokens, on_token,
                                                run.source);
    }
    return session.generate(run.prompts, tokens, on_token);
  };
  generate(warm_tokens, nullptr);
  GenerateResult result;
  if (stream) {
    fmt::print("\n");
    const auto stop_ids = o.ignore_eos ? std::vector<int64_t>{} : run.model->config().eos_token_ids;
    result = generate(0, run.text->printer(std::chrono::steady_clock::now(), stop_ids));
  } else {
    result = generate(0, nullptr);
  }
  if (cached && !o.save_prompt.empty()) {
    const int64_t saved = session.save_prompt(run.prompts[0], o.save_prompt, run.source);
    fmt::print("prompt cache: saved {} prompt tokens to {}\n", saved, o.save_prompt);
  }
  return result;
}

/// --save-prompt and --load-prompt save or restore one prompt's row.
void check_one_prompt(const Options& o, const Loaded& run) {
  for (const auto& [flag, file] :
       {std::pair<const char*, const std::string&>{"--save-prompt", o.save_prompt},
        {"--load-prompt", o.load_prompt}}) {
    if (!file.empty() && run.prompts.size() != 1) {
      throw flags::FlagError(std::string(flag) + ": expected a single prompt but got " +
                             std::to_string(run.prompts.size()));
    }
  }
}

/// The prefill chunk both runs use; a verification step must fit in it.
int64_t run_chunk(const Options& o, const Loaded& run, CacheKind cache, int64_t rows,
                  int64_t max_len) {
  const int64_t chunk = cache == CacheKind::kDynamic
                            ? (o.prefill_chunk > 0 ? std::min(o.prefill_chunk, max_len) : max_len)
                            : prefill_chunk_of(*run.model, rows, max_len, o.prefill_chunk);
  if (o.spec.speculate > 0 && o.spec.speculate + 1 > chunk) {
    throw flags::FlagError(fmt::format(
        "--speculate: expected N + 1 <= {} (the cache's max_chunk: a verification step carries "
        "N + 1 tokens; raise --prefill-chunk) but got --speculate {}",
        chunk, o.spec.speculate));
  }
  return chunk;
}

/// One cache kind's run in its own session, warmed up by one untimed call:
/// the first pass pays one-time costs (thread pools, kernel selection, CUDA
/// graph capture for the keys this run uses) that are not the cache's. Text
/// prompts warm up on two tokens (prefill and one decode step), then the
/// main run streams its answers.
GenerateResult timed_run(const Options& o, const Loaded& run, const GenerateOptions& opts,
                         int64_t rows, int64_t max_len, bool stream) {
  const int64_t warm_tokens = run.text ? std::min<int64_t>(2, o.max_new_tokens) : 0;
  Generator session(*run.model, opts, rows, max_len);
  return run_session(o, run, session, opts.cache != CacheKind::kDynamic, warm_tokens, stream);
}

/// The DynamicCache baseline of `options`: the plain decoder, the same
/// prefill passes, no speculation.
GenerateOptions dynamic_baseline(GenerateOptions dyn, int64_t chunk) {
  dyn.cache = CacheKind::kDynamic;
  dyn.path = DecodePath::kPlain;  // the baseline is the plain decoder
  dyn.prefill_chunk = chunk;      // the same passes as the static/hybrid run
  dyn.on_step = nullptr;
  dyn.speculate = 0;  // the plain decode it must equal
  dyn.draft_model = nullptr;
  return dyn;
}

/// The baseline of `options`, run and compared with `main_run`; then
/// --rounds interleaved timing rounds of both.
bool compare_with_dynamic(const Options& o, const Loaded& run, const GenerateOptions& options,
                          const GenerateResult& main_run, int64_t chunk, int64_t rows,
                          int64_t max_len, at::ScalarType dtype, at::Device device) {
  const GenerateOptions dyn = dynamic_baseline(options, chunk);
  const GenerateResult baseline = timed_run(o, run, dyn, rows, max_len, /*stream=*/false);
  report_run("dynamic", baseline);
  const bool agree = report_comparison(to_string(options.cache), main_run, baseline, dtype,
                                       /*greedy=*/o.temperature == 0.0, options.kv_storage);
  if (o.rounds == 0) return agree;
  GenerateOptions ours = options;
  ours.on_step = nullptr;
  ours.record_logits = false;  // timing only: no logits copied out
  report_rounds(to_string(options.cache),
                time_rounds(run, ours, dynamic_baseline(ours, chunk), rows, max_len, o.rounds),
                device, o.eager);
  return agree;
}

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse_options(argc, argv);
  flags::set_threads(o.threads);
  const apps::TpRole role = apps::start_tp(o.tp, argc, argv, flags::parse_device(o.device));
  if (role.launcher_status) return *role.launcher_status;  // --tp N: the ranks have run
  const at::Device device = role.device;
  const at::ScalarType dtype = flags::parse_dtype(o.dtype, device, at::kBFloat16);
  const Loaded run = load(o, role, dtype);
  check_one_prompt(o, run);
  const bool compare = !o.no_compare && o.cache != "dynamic";
  GenerateOptions options = generate_options(o, run.model->config(), compare);
  const std::unique_ptr<LlamaModel> draft =
      apps::load_draft_model(o.spec, dtype, device, static_cast<uint64_t>(o.seed));
  options.draft_model = draft.get();

  size_t longest = 0;
  for (const auto& p : run.prompts) longest = std::max(longest, p.size());
  const int64_t rows = static_cast<int64_t>(run.prompts.size());
  const int64_t max_len = static_cast<int64_t>(longest) + o.max_new_tokens;
  const int64_t chunk = run_chunk(o, run, options.cache, rows, max_len);
  print_header(o, run, options, device, dtype, static_cast<int64_t>(longest), chunk, compare);

  const GenerateResult main_run =
      timed_run(o, run, options, rows, max_len, /*stream=*/run.text != nullptr);
  report_run(to_string(options.cache), main_run);
  if (o.spec.speculate > 0) print_speculation(o, main_run);
  if (!o.load_prompt.empty()) {
    fmt::print("prompt cache: restored {} tokens from {} in {:.2f} ms, prefilled {}\n",
               main_run.restored_tokens, o.load_prompt, main_run.restore_seconds * 1e3,
               main_run.prefilled_tokens);
  }
  const bool agree = !compare || compare_with_dynamic(o, run, options, main_run, chunk, rows,
                                                      max_len, dtype, device);
  if (o.print_ids) print_ids(main_run);
  if (!o.json.empty()) write_json(o.json, run.prompts, main_run);
  return agree ? 0 : 1;
} catch (...) {
  return flags::fail("statickv-demo");
}
