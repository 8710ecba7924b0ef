// statickv-demo: runs the reference decoder on a named shape with random
// weights or on a Hugging Face checkpoint directory, through a static or
// hybrid cache and the DynamicCache baseline, and reports speed, memory and
// whether the two runs agree (logits within the dtype's tolerance; tokens
// equal but for near-ties). See --help.

#include "text_mode.hpp"

#include <statickv/apps/compare.hpp>
#include <statickv/apps/model_flags.hpp>
#include <statickv/flags/flags.hpp>
#include <statickv/reference/checkpoint.hpp>
#include <statickv/reference/generator.hpp>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>
#include <sstream>
#include <stdexcept>
#include <utility>

using namespace statickv;
using namespace statickv::reference;
using apps::FlagError;

namespace {

struct Options {
  std::string checkpoint, shape = "tiny", device = "auto", dtype, cache, prompt_ids, json;
  std::string save_prompt, load_prompt;  // prompt-cache files
  std::string path = "auto";             // --path: the decoder layer
  std::string kv_dtype;                  // --kv-dtype: the cache's stored type
  bool offload = false;                  // --offload: the cache in host memory
  int threads = 0;
  int64_t batch = 4, prompt_len = 32, max_new_tokens = 32, top_k = 0, prefill_chunk = 0, seed = 0;
  double temperature = 0.0, top_p = 1.0;
  bool no_compare = false, print_ids = false, eager = false, ignore_eos = false;
  demo::TextFlags text;
  apps::TpFlags tp;
  apps::SpeculationFlags spec;
};

// --path fused against the options it cannot run with, naming both (Note
// [fused decode path]); auto resolves to plain for them instead.
void check_path_flags(const Options& o, bool quantized) {
  if (o.path != "fused") return;
  if (o.tp.tp > 1) {
    throw FlagError("--path: expected plain or auto with --tp " + std::to_string(o.tp.tp) +
                    " (the fused layer folds o_proj and down_proj into in-place GEMMs, which "
                    "do not all-reduce) but got fused");
  }
  if (o.cache == "dynamic") {
    throw FlagError(
        "--path: expected plain or auto with --cache dynamic (the fused path writes through a "
        "static or hybrid cache) but got fused");
  }
  if (quantized) {
    throw FlagError("--path: expected plain or auto with --kv-dtype " + o.kv_dtype +
                    " (the fused rotary write serves plain storage) but got fused");
  }
}

// Flags that would be silently ignored, or that contradict each other, are
// refused; --prompts-file is read here, so a bad file fails before any work.
void check_combinations(Options& o, const apps::Flags& flags) {
  if (o.top_k > 0 && o.temperature == 0.0) {
    throw FlagError("--top-k: expected 0 without sampling (--temperature 0 is greedy) but got " +
                    std::to_string(o.top_k));
  }
  if (o.top_p < 1.0 && o.temperature == 0.0) {
    throw FlagError(fmt::format(
        "--top-p: expected 1 without sampling (--temperature 0 is greedy) but got {}", o.top_p));
  }
  apps::check_speculation_flags(o.spec, o.cache);
  apps::check_tp_with_speculation(o.tp, o.spec);
  if (!o.checkpoint.empty() && flags.given("--shape")) {
    throw FlagError("--shape: expected no --shape with --checkpoint (the checkpoint has its own)");
  }
  if (!o.text.prompts_file.empty()) {  // read now: a bad file is refused before any work
    for (std::string& p : demo::read_prompts_file(o.text.prompts_file)) o.text.prompts.push_back(p);
  }
  const bool quantized = apps::parse_kv_storage(o.kv_dtype) != KvStorage::kCompute;
  for (const auto& [flag, file] :
       {std::pair<const char*, const std::string&>{"--save-prompt", o.save_prompt},
        {"--load-prompt", o.load_prompt}}) {
    if (!file.empty() && o.cache == "dynamic") {
      throw FlagError(
          std::string(flag) +
          ": expected a static or hybrid --cache (it saves a cache row) but got dynamic");
    }
    if (!file.empty() && quantized) {
      throw FlagError("--kv-dtype: expected compute with " + std::string(flag) +
                      " (row save/restore supports plain storage only) but got " + o.kv_dtype);
    }
    if (!file.empty() && (o.tp.tp > 1 || std::getenv("WORLD_SIZE") != nullptr)) {
      throw FlagError(std::string(flag) +
                      ": expected no prompt-cache file with --tp (each rank holds only its kv "
                      "heads of the row)");
    }
  }
  if (o.tp.tp > 1 && !o.eager && apps::parse_device(o.device).is_cuda()) {
    throw FlagError("--tp: expected --eager with --tp " + std::to_string(o.tp.tp) +
                    " on cuda (NCCL collectives inside captured CUDA graphs are not supported)");
  }
  if (!o.load_prompt.empty() && !std::filesystem::is_regular_file(o.load_prompt)) {
    throw FlagError("--load-prompt: expected an existing file but got '" + o.load_prompt + "'");
  }
  check_path_flags(o, quantized);
  apps::check_offload_flags(o.offload, o.kv_dtype, o.path, o.cache);
  if (o.cache == "dynamic" && quantized) {
    throw FlagError(
        "--kv-dtype: expected compute with --cache dynamic (it stores the compute "
        "dtype) but got " +
        o.kv_dtype);
  }
  if (o.text.chat && !o.text.given()) {
    throw FlagError("--chat: expected --prompt or --prompts-file (it applies to text prompts)");
  }
  if (o.text.given() && !o.prompt_ids.empty()) {
    throw FlagError(
        "--prompt-ids: expected no ids with --prompt or --prompts-file (one source "
        "of prompts)");
  }
  if (!o.prompt_ids.empty() || o.text.given()) {
    for (const char* flag : {"--batch", "--prompt-len"}) {
      if (flags.given(flag)) {
        throw FlagError(std::string(flag) +
                        ": expected no value with given prompts (it applies "
                        "to random prompts)");
      }
    }
  }
}

Options parse(int argc, char** argv) {
  Options o;
  apps::Flags flags("statickv-demo", "the reference decoder through statickv's caches");
  apps::add_model_flags(flags, &o.checkpoint, &o.shape);
  apps::add_tp_flags(flags, &o.tp);
  flags.add_device(&o.device);
  flags.add_dtype(&o.dtype, at::kBFloat16);
  flags.add_kv_dtype(&o.kv_dtype);
  flags.add_offload(&o.offload);
  flags.add_threads(&o.threads);
  flags.add_choice("--cache C", &o.cache, {"static", "hybrid", "dynamic"},
                   "static, hybrid or dynamic (default: static for all-full models, hybrid when "
                   "the model has sliding layers)");
  flags.add_choice("--path P", &o.path, {"auto", "plain", "fused"},
                   "decoder layer: fused (one-kernel RMSNorm, one q/k/v and one gate/up GEMM, "
                   "folded residuals, rotary + cache write in one kernel; static or hybrid cache "
                   "of compute storage on one device), plain (one op per step of the math), or "
                   "auto (default: fused where it applies, else plain)");
  flags.add("--prompt-ids IDS", &o.prompt_ids,
            "comma-separated token ids, ';' between prompts; prompts may differ in length "
            "(default: --batch random prompts)");
  flags.add_list("--prompt TEXT", &o.text.prompts,
                 "a prompt as text (repeat the flag for a ragged batch); needs --checkpoint with "
                 "its tokenizer.json; the answers print as text, streamed");
  flags.add("--prompts-file FILE", &o.text.prompts_file,
            "prompts as text, one per non-empty line (after any --prompt)");
  flags.add_switch("--chat", &o.text.chat,
                   "wrap each text prompt in the checkpoint's chat template as one user turn "
                   "(chat_template.jinja or tokenizer_config.json, run by Jinja2)");
  flags.add("--batch N", &o.batch, "random prompts when --prompt-ids is absent", /*min=*/1);
  flags.add("--prompt-len N", &o.prompt_len, "longest random prompt (others are shorter)",
            /*min=*/1);
  flags.add("--max-new-tokens N", &o.max_new_tokens, "tokens to generate per prompt", /*min=*/1);
  flags.add("--temperature X", &o.temperature, "0 = greedy (default); > 0 samples", /*min=*/0.0);
  flags.add("--top-k N", &o.top_k,
            "sample among the N most likely tokens (default 0 = all; needs --temperature > 0)",
            /*min=*/0);
  flags.add("--top-p X", &o.top_p,
            "sample among the most likely tokens whose probabilities sum to X (default 1 = "
            "all; needs --temperature > 0)",
            /*min=*/1e-9, /*max=*/1.0);
  flags.add("--seed N", &o.seed, "weights, random prompts and sampling", /*min=*/0);
  flags.add("--prefill-chunk N", &o.prefill_chunk,
            "most prompt tokens per prefill pass, in both runs (default 0: all the static or "
            "hybrid cache takes in one step)",
            /*min=*/0);
  flags.add_switch("--eager", &o.eager,
                   "run static/hybrid steps at their exact shapes (default: through "
                   "the bucketed GraphRunner, CUDA graphs on a GPU)");
  flags.add_output_file("--save-prompt FILE", &o.save_prompt,
                        "after the run, save the prompt's cache row there (one prompt only; "
                        "a safetensors prompt-cache file)");
  flags.add("--load-prompt FILE", &o.load_prompt,
            "restore a --save-prompt file's row, whose ids must be a prefix of the prompt, and "
            "prefill only the rest (one prompt only)");
  apps::add_speculation_flags(flags, &o.spec);
  flags.add_switch("--no-compare", &o.no_compare, "skip the DynamicCache comparison run");
  flags.add_switch("--print-ids", &o.print_ids, "print each prompt's generated ids on a line");
  flags.add_switch("--ignore-eos", &o.ignore_eos,
                   "generate --max-new-tokens for every prompt, past any eos id (benchmarks)");
  flags.add_output_file("--json FILE", &o.json,
                        "write the main run's timings and ids there (benchmarks/hf_compare.py "
                        "reads it)");
  flags.add_note(
      "After both runs it compares them (logits within the dtype's tolerance over the steps both\n"
      "took from the same prefix; a greedy token may differ only at a near tie) and prints a\n"
      "verdict line. Exit status: 0, 1 when the verdict is MISMATCH, 2 when a flag is refused.");
  flags.parse(argc, argv);
  check_combinations(o, flags);
  return o;
}

std::vector<std::vector<int64_t>> parse_prompts(const std::string& text) {
  std::vector<std::vector<int64_t>> prompts;
  std::stringstream rows(text);
  std::string row;
  while (std::getline(rows, row, ';')) {
    std::vector<int64_t> ids;
    std::stringstream cells(row);
    std::string cell;
    while (std::getline(cells, cell, ',')) {
      cell.erase(0, cell.find_first_not_of(' '));
      cell.erase(cell.find_last_not_of(' ') + 1);
      ids.push_back(apps::parse_int("--prompt-ids", cell, /*min=*/0));
    }
    if (ids.empty()) {
      throw FlagError("--prompt-ids: expected token ids in every prompt but prompt " +
                      std::to_string(prompts.size()) + " has none");
    }
    prompts.push_back(std::move(ids));
  }
  if (prompts.empty()) throw FlagError("--prompt-ids: expected at least one prompt but got none");
  return prompts;
}

// --batch prompts of seeded random ids, the longest --prompt-len tokens.
std::vector<std::vector<int64_t>> random_prompts(const Options& o, int64_t vocab_size) {
  std::vector<std::vector<int64_t>> prompts;
  std::mt19937_64 rng(static_cast<uint64_t>(o.seed));
  for (int64_t r = 0; r < o.batch; ++r) {
    const int64_t len = std::max<int64_t>(1, o.prompt_len - (r * o.prompt_len) / (o.batch + 1));
    std::vector<int64_t> ids;
    for (int64_t t = 0; t < len; ++t) {
      ids.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(vocab_size)));
    }
    prompts.push_back(std::move(ids));
  }
  return prompts;
}

// What the model cannot take: a static cache for sliding layers, token ids
// past the vocabulary, positions past max_position_embeddings.
void check_against_model(const Options& o, const ModelConfig& config,
                         const std::vector<std::vector<int64_t>>& prompts) {
  if (o.cache == "static" && config.has_sliding()) {
    throw FlagError(
        "--cache: expected hybrid or dynamic for a model with sliding-window layers but got "
        "static");
  }
  // --prompt-ids' prompts, or (none yet) the longest random one.
  size_t longest = prompts.empty() ? static_cast<size_t>(o.prompt_len) : 0;
  for (size_t r = 0; r < prompts.size(); ++r) {
    longest = std::max(longest, prompts[r].size());
    for (const int64_t id : prompts[r]) {
      if (id >= config.vocab_size) {
        throw FlagError(fmt::format(
            "--prompt-ids: expected token ids in [0, vocab_size={}) but prompt {} has {}",
            config.vocab_size, r, id));
      }
    }
  }
  const int64_t positions = config.max_position_embeddings;
  const std::string prompt_flag = o.text.given()         ? "--prompt"
                                  : o.prompt_ids.empty() ? "--prompt-len"
                                                         : "--prompt-ids";
  if (static_cast<int64_t>(longest) >= positions) {
    throw FlagError(fmt::format(
        "{}: expected prompts shorter than the model's max_position_embeddings={} (room for a new "
        "token) but the longest has {} tokens",
        prompt_flag, positions, longest));
  }
  if (o.max_new_tokens > positions - static_cast<int64_t>(longest)) {
    throw FlagError(fmt::format(
        "--max-new-tokens: expected at most {} (max_position_embeddings={} minus the longest "
        "prompt, {} tokens) but got {}",
        positions - static_cast<int64_t>(longest), positions, longest, o.max_new_tokens));
  }
}

// A quantized cache is not held to the compute dtype's tolerance: its
// comparison is a measurement (logits from the same prefix, greedy tokens
// that agree before the first difference), and the run succeeds.
bool report_quantized(const apps::Comparison& c, const GenerateResult& ours,
                      const GenerateResult& baseline, KvStorage storage) {
  int64_t agree = 0, total = 0;
  for (size_t r = 0; r < ours.tokens.size(); ++r) {
    const std::vector<int64_t>& a = ours.tokens[r];
    const std::vector<int64_t>& b = baseline.tokens[r];
    size_t same = 0;
    while (same < a.size() && same < b.size() && a[same] == b[same]) ++same;
    agree += static_cast<int64_t>(same);
    total += static_cast<int64_t>(b.size());
  }
  fmt::print("logits vs dynamic: max |difference| {:.3g} over {} steps from the same prefix\n",
             c.max_diff, c.steps);
  fmt::print(
      "verdict: MEASURED: kv-dtype {} is not held to the compute dtype's tolerance; {} of {} "
      "tokens agree with dynamic before the first difference\n",
      to_string(storage), agree, total);
  return true;
}

// Prints the comparison (Note [comparing with the baseline]) and its
// verdict; returns whether the runs agree.
bool report_comparison(const char* name, const GenerateResult& ours, const GenerateResult& baseline,
                       at::ScalarType dtype, bool greedy, KvStorage storage) {
  const apps::Comparison c =
      apps::compare_runs(ours.tokens, ours.logits, baseline.tokens, baseline.logits);
  if (storage != KvStorage::kCompute) return report_quantized(c, ours, baseline, storage);
  const apps::Tolerance tol = apps::tolerance_for(dtype);
  const apps::Verdict verdict = apps::judge(c, tol, greedy);
  const std::string dtype_text = apps::dtype_name(dtype);
  fmt::print(
      "logits vs dynamic: max |difference| {:.3g} over {} steps from the same prefix "
      "(tolerance {:g} in {})\n",
      c.max_diff, c.steps, tol.logits, dtype_text);
  if (c.divergences.empty()) {
    fmt::print("tokens vs dynamic: identical\n");
  } else {
    const apps::Divergence& d = verdict.unexplained ? *verdict.unexplained : c.divergences.front();
    fmt::print(
        "tokens vs dynamic: {} of {} prompts differ; {}prompt {}, token {}: {} {}, dynamic {}",
        c.divergences.size(), ours.tokens.size(), verdict.unexplained ? "" : "first: ", d.prompt,
        d.step, name, d.ours, d.baseline);
    if (greedy) {
      fmt::print(", {:.3g} apart in dynamic's logits ({} {:g})", d.margin,
                 d.margin <= tol.tie ? "a near tie: <=" : "NOT a near tie: >", tol.tie);
    }
    fmt::print("\n");
  }
  if (verdict.ok() && c.divergences.empty()) {
    fmt::print("verdict: OK: {} and dynamic caches agree (logits within {:g}, identical tokens)\n",
               name, tol.logits);
  } else if (verdict.ok()) {
    fmt::print(
        "verdict: OK: {} and dynamic caches agree within {} rounding (logits within {:g}; tokens "
        "differ only {})\n",
        name, dtype_text, tol.logits, greedy ? "at near ties" : "where sampling met rounding");
  } else {
    fmt::print("verdict: MISMATCH: {} and dynamic caches disagree ({})\n", name,
               !verdict.logits_ok
                   ? fmt::format("logits differ by {:.3g} > {:g}", c.max_diff, tol.logits)
                   : fmt::format("a greedy token differs where dynamic's margin is {:.3g} > {:g}",
                                 verdict.unexplained->margin, tol.tie));
  }
  return verdict.ok();
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

std::string bytes(int64_t n) {
  const double b = static_cast<double>(n);
  if (b >= 1024.0 * 1024 * 1024) return fmt::format("{:.2f} GiB", b / (1024.0 * 1024 * 1024));
  if (b >= 1024.0 * 1024) return fmt::format("{:.2f} MiB", b / (1024.0 * 1024));
  return fmt::format("{:.1f} KiB", b / 1024.0);
}

/// Tokens generated after each row's first (the decode phase's tokens).
int64_t decode_tokens(const GenerateResult& r) {
  int64_t n = 0;
  for (const auto& row : r.tokens) n += std::max<int64_t>(0, static_cast<int64_t>(row.size()) - 1);
  return n;
}

void report(const char* name, const GenerateResult& r) {
  const double ms = r.decode_steps > 0 ? r.decode_seconds * 1e3 / r.decode_steps : 0.0;
  const double tps = r.decode_seconds > 0 ? decode_tokens(r) / r.decode_seconds : 0.0;
  fmt::print("{:<8} prefill {:>9.2f} ms | decode {:>8.2f} ms/step {:>9.1f} tok/s | cache {}\n",
             name, r.prefill_seconds * 1e3, ms, tps, bytes(r.cache_bytes));
  if (r.host_cache_bytes > 0) {
    fmt::print(
        "{:<8} of the cache: {} in host memory (offloaded keys and values), {} on the "
        "device (staging ring of two layers {}, bookkeeping)\n",
        "", bytes(r.host_cache_bytes), bytes(r.cache_bytes - r.host_cache_bytes),
        bytes(r.staging_bytes));
  } else if (r.staging_bytes > 0) {
    fmt::print("{:<8} of the cache: staging buffer {} (one layer, compute dtype)\n", "",
               bytes(r.staging_bytes));
  }
}

/// The model named by the flags, with its prompts: --prompt-ids or random
/// ones, checked against the model's config before any weights are made.
struct Loaded {
  std::unique_ptr<LlamaModel> model;
  std::string source;
  std::vector<std::vector<int64_t>> prompts;
  std::unique_ptr<demo::TextSession> text;  ///< text prompts: their tokenizer
};

Loaded load(const Options& o, const apps::TpRole& role, at::ScalarType dtype) {
  Loaded out;
  if (!o.prompt_ids.empty()) out.prompts = parse_prompts(o.prompt_ids);
  if (o.text.given()) {
    out.text = demo::TextSession::open(o.checkpoint, o.text);
    out.prompts = out.text->prompt_ids();
  }
  // A named shape's prompts are checked before any weights are made; a
  // checkpoint's once its config (and generation_config) is read.
  if (o.checkpoint.empty()) check_against_model(o, named_config(o.shape), out.prompts);
  Checkpoint ckpt =
      apps::load_model_weights(o.checkpoint, o.shape, o.seed, role, role.device, dtype);
  if (!o.checkpoint.empty()) check_against_model(o, ckpt.config, out.prompts);
  if (out.prompts.empty()) out.prompts = random_prompts(o, ckpt.config.vocab_size);
  out.model = std::make_unique<LlamaModel>(ckpt.config, std::move(ckpt.weights), role.shard);
  out.source = o.checkpoint.empty()
                   ? o.shape + " (random weights, seed " + std::to_string(o.seed) + ")"
                   : o.checkpoint;
  if (role.tp.world > 1) {
    out.source += fmt::format(" | tensor-parallel rank {} of {}{}", role.tp.rank, role.tp.world,
                              role.tp.vocab_parallel ? ", vocab-parallel LM head" : "");
  }
  return out;
}

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

// The decoder layer the main run takes: --path with auto resolved as the
// Engine resolves it (Note [fused decode path]).
const char* path_taken(const LlamaModel& model, const GenerateOptions& options) {
  if (options.cache == CacheKind::kDynamic) return to_string(DecodePath::kPlain);
  CacheConfig config = model.cache_config(1, 2);
  config.kv_storage = options.kv_storage;
  config.host_offload = options.host_offload;
  return to_string(model.resolve_path(options.path, config));
}

void print_header(const Options& o, const Loaded& run, const GenerateOptions& options,
                  at::Device device, at::ScalarType dtype, int64_t longest, int64_t chunk,
                  bool compare) {
  const ModelConfig& config = run.model->config();
  fmt::print("statickv-demo: {} | {} layers ({}), {} heads / {} kv x {} | {} on {}\n", run.source,
             config.num_hidden_layers, config.has_sliding() ? "with sliding layers" : "all full",
             config.num_attention_heads, config.num_key_value_heads, config.head_dim,
             apps::dtype_name(dtype), device.str());
  fmt::print(
      "{} prompts (longest {} tokens), {} new tokens each, {}; prefill {}{}; {} decoder layers{}\n",
      run.prompts.size(), longest, o.max_new_tokens, o.temperature > 0 ? "sampling" : "greedy",
      chunk >= longest ? std::string("in one pass") : fmt::format("in passes of {} tokens", chunk),
      compare ? " (both runs)" : "", path_taken(*run.model, options),
      o.offload ? "; KV cache offloaded to host memory (--offload)" : "");
}

void print_ids(const GenerateResult& result) {
  for (const auto& row : result.tokens) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) line += (i ? "," : "") + std::to_string(row[i]);
    std::puts(line.c_str());
  }
}

void print_speculation(const Options& o, const GenerateResult& r) {
  const SpeculationStats& s = r.speculation;
  fmt::print(
      "speculation: {} drafts per step by {}; acceptance rate {:.1f}% ({} of {} drafts), {} "
      "verification steps for {} tokens ({:.2f} per step)\n",
      o.spec.speculate, apps::drafting_name(o.spec), 100.0 * s.acceptance_rate(), s.accepted,
      s.drafted, s.verify_steps, decode_tokens(r),
      s.verify_steps > 0 ? static_cast<double>(decode_tokens(r)) / s.verify_steps : 0.0);
}

// The main run for programs: prompt lengths, ids, prefill and decode times.
void write_json(const std::string& path, const std::vector<std::vector<int64_t>>& prompts,
                const GenerateResult& r) {
  nlohmann::ordered_json out;
  out["rows"] = prompts.size();
  std::vector<size_t> lens;
  for (const auto& p : prompts) lens.push_back(p.size());
  out["prompt_tokens"] = lens;
  out["tokens"] = r.tokens;
  out["prefill_seconds"] = r.prefill_seconds;
  out["decode_seconds"] = r.decode_seconds;
  out["decode_steps"] = r.decode_steps;
  out["cache_bytes"] = r.cache_bytes;
  out["cache_host_bytes"] = r.host_cache_bytes;
  if (r.speculation.verify_steps > 0) {
    out["speculation"] = {{"verify_steps", r.speculation.verify_steps},
                          {"drafted", r.speculation.drafted},
                          {"accepted", r.speculation.accepted},
                          {"acceptance_rate", r.speculation.acceptance_rate()}};
  }
  std::ofstream file(path);
  file << out.dump(1) << "\n";
  TORCH_CHECK(file.good(), "--json: could not write '", path, "'");
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

}  // namespace

int main(int argc, char** argv) try {
  const Options o = parse(argc, argv);
  apps::set_threads(o.threads);
  const apps::TpRole role = apps::start_tp(o.tp, argc, argv, apps::parse_device(o.device));
  if (role.launcher_status) return *role.launcher_status;  // --tp N: the ranks have run
  const at::Device device = role.device;
  const at::ScalarType dtype = apps::parse_dtype(o.dtype, device, at::kBFloat16);
  const Loaded run = load(o, role, dtype);
  for (const auto& [flag, file] :
       {std::pair<const char*, const std::string&>{"--save-prompt", o.save_prompt},
        {"--load-prompt", o.load_prompt}}) {
    if (!file.empty() && run.prompts.size() != 1) {
      throw FlagError(std::string(flag) + ": expected a single prompt but got " +
                      std::to_string(run.prompts.size()));
    }
  }
  const bool compare = !o.no_compare && o.cache != "dynamic";
  GenerateOptions options = generate_options(o, run.model->config(), compare);
  const std::unique_ptr<LlamaModel> draft =
      apps::load_draft_model(o.spec, dtype, device, static_cast<uint64_t>(o.seed));
  options.draft_model = draft.get();

  size_t longest = 0;
  for (const auto& p : run.prompts) longest = std::max(longest, p.size());
  const int64_t rows = static_cast<int64_t>(run.prompts.size());
  const int64_t max_len = static_cast<int64_t>(longest) + o.max_new_tokens;
  const int64_t chunk = options.cache == CacheKind::kDynamic
                            ? (o.prefill_chunk > 0 ? std::min(o.prefill_chunk, max_len) : max_len)
                            : prefill_chunk_of(*run.model, rows, max_len, o.prefill_chunk);
  if (o.spec.speculate > 0 && o.spec.speculate + 1 > chunk) {
    throw FlagError(fmt::format(
        "--speculate: expected N + 1 <= {} (the cache's max_chunk: a verification step carries "
        "N + 1 tokens; raise --prefill-chunk) but got --speculate {}",
        chunk, o.spec.speculate));
  }
  print_header(o, run, options, device, dtype, static_cast<int64_t>(longest), chunk, compare);

  // Each cache kind runs in its own session, warmed up by one untimed call:
  // the first pass pays one-time costs (thread pools, kernel selection, CUDA
  // graph capture for the keys this run uses) that are not the cache's. Text
  // prompts warm up on two tokens (prefill and one decode step), then the
  // main run streams its answers.
  const int64_t warm_tokens = run.text ? std::min<int64_t>(2, o.max_new_tokens) : 0;
  auto timed = [&](const GenerateOptions& opts, bool stream) {
    Generator session(*run.model, opts, rows, max_len);
    return run_session(o, run, session, opts.cache != CacheKind::kDynamic, warm_tokens, stream);
  };
  const GenerateResult main_run = timed(options, /*stream=*/run.text != nullptr);
  report(to_string(options.cache), main_run);
  if (o.spec.speculate > 0) print_speculation(o, main_run);
  if (!o.load_prompt.empty()) {
    fmt::print("prompt cache: restored {} tokens from {} in {:.2f} ms, prefilled {}\n",
               main_run.restored_tokens, o.load_prompt, main_run.restore_seconds * 1e3,
               main_run.prefilled_tokens);
  }
  bool agree = true;
  if (compare) {
    GenerateOptions dyn = options;
    dyn.cache = CacheKind::kDynamic;
    dyn.path = DecodePath::kPlain;  // the baseline is the plain decoder
    dyn.prefill_chunk = chunk;      // the same passes as the static/hybrid run
    dyn.on_step = nullptr;
    dyn.speculate = 0;  // the plain decode it must equal
    dyn.draft_model = nullptr;
    const GenerateResult baseline = timed(dyn, /*stream=*/false);
    report("dynamic", baseline);
    agree = report_comparison(to_string(options.cache), main_run, baseline, dtype,
                              /*greedy=*/o.temperature == 0.0, options.kv_storage);
  }
  if (o.print_ids) print_ids(main_run);
  if (!o.json.empty()) write_json(o.json, run.prompts, main_run);
  return agree ? 0 : 1;
} catch (...) {
  return apps::fail("statickv-demo");
}
