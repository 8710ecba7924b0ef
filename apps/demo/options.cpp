// statickv-demo's flags and the rules between them (options.hpp).

#include "options.hpp"

#include <statickv/apps/storage_flags.hpp>
#include <statickv/flags/flags.hpp>

#include <fmt/format.h>

#include <cstdlib>
#include <filesystem>
#include <utility>

namespace statickv::demo {

using flags::FlagError;

namespace {

// --path fused against the options it cannot run with, naming both (Note
// [fused decode path]); auto resolves to plain for them instead.
void check_path_flags(const Options& o, bool quantized) {
  if (o.path != "fused") return;
  if (o.tp.tp > 1) {
    throw flags::FlagError(
        "--path: expected plain or auto with --tp " + std::to_string(o.tp.tp) +
        " (the fused layer folds o_proj and down_proj into in-place GEMMs, which "
        "do not all-reduce) but got fused");
  }
  if (o.cache == "dynamic") {
    throw flags::FlagError(
        "--path: expected plain or auto with --cache dynamic (the fused path writes through a "
        "static or hybrid cache) but got fused");
  }
  if (quantized) {
    throw flags::FlagError("--path: expected plain or auto with --kv-dtype " + o.kv_dtype +
                           " (the fused rotary write serves plain storage) but got fused");
  }
}

/// Sampling without a temperature, speculation's rules, --shape with a
/// checkpoint; --prompts-file is read here, so a bad file fails before any work.
void check_sampling_and_model(Options& o, const flags::Flags& flags) {
  if (o.top_k > 0 && o.temperature == 0.0) {
    throw flags::FlagError(
        "--top-k: expected 0 without sampling (--temperature 0 is greedy) but got " +
        std::to_string(o.top_k));
  }
  if (o.top_p < 1.0 && o.temperature == 0.0) {
    throw flags::FlagError(fmt::format(
        "--top-p: expected 1 without sampling (--temperature 0 is greedy) but got {}", o.top_p));
  }
  apps::check_speculation_flags(o.spec, o.cache);
  apps::check_tp_with_speculation(o.tp, o.spec);
  if (o.rounds > 0 && flags.given("--rounds") && (o.no_compare || o.cache == "dynamic")) {
    throw flags::FlagError(fmt::format(
        "--rounds: expected 0 with {} (the rounds time the cached run against the dynamic "
        "baseline) but got {}",
        o.no_compare ? "--no-compare" : "--cache dynamic", o.rounds));
  }
  if (!o.checkpoint.empty() && flags.given("--shape")) {
    throw flags::FlagError(
        "--shape: expected no --shape with --checkpoint (the checkpoint has its own)");
  }
  if (!o.text.prompts_file.empty()) {  // read now: a bad file is refused before any work
    for (std::string& p : read_prompts_file(o.text.prompts_file)) o.text.prompts.push_back(p);
  }
}

/// The prompt-cache files (--save-prompt, --load-prompt) against the cache,
/// its storage and --tp; --tp's graphs on CUDA.
void check_prompt_cache(const Options& o, bool quantized) {
  for (const auto& [flag, file] :
       {std::pair<const char*, const std::string&>{"--save-prompt", o.save_prompt},
        {"--load-prompt", o.load_prompt}}) {
    if (!file.empty() && o.cache == "dynamic") {
      throw flags::FlagError(
          std::string(flag) +
          ": expected a static or hybrid --cache (it saves a cache row) but got dynamic");
    }
    if (!file.empty() && quantized) {
      throw flags::FlagError("--kv-dtype: expected compute with " + std::string(flag) +
                             " (row save/restore supports plain storage only) but got " +
                             o.kv_dtype);
    }
    if (!file.empty() && (o.tp.tp > 1 || std::getenv("WORLD_SIZE") != nullptr)) {
      throw flags::FlagError(
          std::string(flag) +
          ": expected no prompt-cache file with --tp (each rank holds only its kv "
          "heads of the row)");
    }
  }
  if (o.tp.tp > 1 && !o.eager && flags::parse_device(o.device).is_cuda()) {
    throw flags::FlagError(
        "--tp: expected --eager with --tp " + std::to_string(o.tp.tp) +
        " on cuda (NCCL collectives inside captured CUDA graphs are not supported)");
  }
  if (!o.load_prompt.empty() && !std::filesystem::is_regular_file(o.load_prompt)) {
    throw flags::FlagError("--load-prompt: expected an existing file but got '" + o.load_prompt +
                           "'");
  }
}

/// The decoder path, host offload and the dynamic cache against the storage.
void check_storage(const Options& o, bool quantized) {
  check_path_flags(o, quantized);
  apps::check_offload_flags(o.offload, o.kv_dtype, o.path, o.cache);
  if (o.cache == "dynamic" && quantized) {
    throw flags::FlagError(
        "--kv-dtype: expected compute with --cache dynamic (it stores the compute "
        "dtype) but got " +
        o.kv_dtype);
  }
}

/// One source of prompts, and the flags that apply only to random ones.
void check_prompt_sources(const Options& o, const flags::Flags& flags) {
  if (o.text.chat && !o.text.given()) {
    throw flags::FlagError(
        "--chat: expected --prompt or --prompts-file (it applies to text prompts)");
  }
  if (o.text.given() && !o.prompt_ids.empty()) {
    throw flags::FlagError(
        "--prompt-ids: expected no ids with --prompt or --prompts-file (one source "
        "of prompts)");
  }
  if (!o.prompt_ids.empty() || o.text.given()) {
    for (const char* flag : {"--batch", "--prompt-len"}) {
      if (flags.given(flag)) {
        throw flags::FlagError(std::string(flag) +
                               ": expected no value with given prompts (it applies "
                               "to random prompts)");
      }
    }
  }
}

// Flags that would be silently ignored, or that contradict each other, are
// refused, each naming both.
void check_combinations(Options& o, const flags::Flags& flags) {
  check_sampling_and_model(o, flags);
  const bool quantized = apps::parse_kv_storage(o.kv_dtype) != KvStorage::kCompute;
  check_prompt_cache(o, quantized);
  check_storage(o, quantized);
  check_prompt_sources(o, flags);
}

/// The model, its device and dtype, the cache and the decoder path.
void add_model_and_cache_flags(flags::Flags& flags, Options* o) {
  apps::add_model_flags(flags, &o->checkpoint, &o->shape);
  apps::add_tp_flags(flags, &o->tp);
  flags.add_device(&o->device);
  flags::add_dtype(flags, &o->dtype, at::kBFloat16);
  apps::add_kv_dtype(flags, &o->kv_dtype);
  apps::add_offload(flags, &o->offload);
  flags.add_threads(&o->threads);
  flags.add_choice("--cache C", &o->cache, {"static", "hybrid", "dynamic"},
                   "static, hybrid or dynamic (default: static for all-full models, hybrid when "
                   "the model has sliding layers)");
  flags.add_choice("--path P", &o->path, {"auto", "plain", "fused"},
                   "decoder layer: fused (one-kernel RMSNorm, one q/k/v and one gate/up GEMM, "
                   "folded residuals, rotary + cache write in one kernel; static or hybrid cache "
                   "of compute storage on one device), plain (one op per step of the math), or "
                   "auto (default: fused where it applies, else plain)");
}

/// Where the prompts come from: ids, text, a file, or random ones.
void add_prompt_flags(flags::Flags& flags, Options* o) {
  flags.add("--prompt-ids IDS", &o->prompt_ids,
            "comma-separated token ids, ';' between prompts; prompts may differ in length "
            "(default: --batch random prompts)");
  flags.add_list("--prompt TEXT", &o->text.prompts,
                 "a prompt as text (repeat the flag for a ragged batch); needs --checkpoint with "
                 "its tokenizer.json; the answers print as text, streamed");
  flags.add("--prompts-file FILE", &o->text.prompts_file,
            "prompts as text, one per non-empty line (after any --prompt)");
  flags.add_switch("--chat", &o->text.chat,
                   "wrap each text prompt in the checkpoint's chat template as one user turn "
                   "(chat_template.jinja or tokenizer_config.json, run by Jinja2)");
  flags.add("--batch N", &o->batch, "random prompts when --prompt-ids is absent", /*min=*/1);
  flags.add("--prompt-len N", &o->prompt_len, "longest random prompt (others are shorter)",
            /*min=*/1);
}

/// How the tokens are generated: limits, sampling, prefill, graphs,
/// prompt-cache files, speculation.
void add_generation_flags(flags::Flags& flags, Options* o) {
  flags.add("--max-new-tokens N", &o->max_new_tokens, "tokens to generate per prompt", /*min=*/1);
  flags.add("--temperature X", &o->temperature, "0 = greedy (default); > 0 samples", /*min=*/0.0);
  flags.add("--top-k N", &o->top_k,
            "sample among the N most likely tokens (default 0 = all; needs --temperature > 0)",
            /*min=*/0);
  flags.add("--top-p X", &o->top_p,
            "sample among the most likely tokens whose probabilities sum to X (default 1 = "
            "all; needs --temperature > 0)",
            /*min=*/1e-9, /*max=*/1.0);
  flags.add("--seed N", &o->seed, "weights, random prompts and sampling", /*min=*/0);
  flags.add("--prefill-chunk N", &o->prefill_chunk,
            "most prompt tokens per prefill pass, in both runs (default 0: all the static or "
            "hybrid cache takes in one step)",
            /*min=*/0);
  flags.add_switch("--eager", &o->eager,
                   "run static/hybrid steps at their exact shapes (default: through "
                   "the bucketed GraphRunner, CUDA graphs on a GPU)");
  flags.add_output_file("--save-prompt FILE", &o->save_prompt,
                        "after the run, save the prompt's cache row there (one prompt only; "
                        "a safetensors prompt-cache file)");
  flags.add("--load-prompt FILE", &o->load_prompt,
            "restore a --save-prompt file's row, whose ids must be a prefix of the prompt, and "
            "prefill only the rest (one prompt only)");
  apps::add_speculation_flags(flags, &o->spec);
}

/// What the run prints and writes.
void add_output_flags(flags::Flags& flags, Options* o) {
  flags.add_switch("--no-compare", &o->no_compare, "skip the DynamicCache comparison run");
  flags.add("--rounds N", &o->rounds,
            "after the checked pair, time the cached run against the DynamicCache baseline in N "
            "interleaved rounds and print the ratio with its spread (default 3; 0: none)",
            /*min=*/0);
  flags.add_switch("--print-ids", &o->print_ids, "print each prompt's generated ids on a line");
  flags.add_switch("--ignore-eos", &o->ignore_eos,
                   "generate --max-new-tokens for every prompt, past any eos id (benchmarks)");
  flags.add_output_file("--json FILE", &o->json,
                        "write the main run's timings and ids there (benchmarks/hf_compare.py "
                        "reads it)");
  flags.add_note(
      "After both runs it compares them (logits within the dtype's tolerance over the steps both\n"
      "took from the same prefix; a greedy token may differ only at a near tie) and prints a\n"
      "verdict line. Exit status: 0, 1 when the verdict is MISMATCH, 2 when a flag is refused.");
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv-demo", "the reference decoder through statickv's caches");
  add_model_and_cache_flags(flags, &o);
  add_prompt_flags(flags, &o);
  add_generation_flags(flags, &o);
  add_output_flags(flags, &o);
  flags.parse(argc, argv);
  check_combinations(o, flags);
  return o;
}

}  // namespace statickv::demo
