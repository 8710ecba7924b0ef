#pragma once
// statickv-demo's command line: its flags (the --help text) and the rules
// between them. Flags that would be silently ignored, or that contradict
// each other, are refused (FlagError, exit status 2) before any work;
// --prompts-file is read here, so a bad file fails first too.

#include "text_mode.hpp"

#include <statickv/apps/model_flags.hpp>

#include <cstdint>
#include <string>

namespace statickv::demo {

/// The flags as given; text.prompts ends with --prompts-file's lines.
struct Options {
  std::string checkpoint, shape = "tiny", device = "auto", dtype, cache, prompt_ids, json;
  std::string save_prompt, load_prompt;  // prompt-cache files
  std::string path = "auto";             // --path: the decoder layer
  std::string kv_dtype;                  // --kv-dtype: the cache's stored type
  bool offload = false;                  // --offload: the cache in host memory
  int threads = 0;
  int64_t batch = 4, prompt_len = 32, max_new_tokens = 32, top_k = 0, prefill_chunk = 0, seed = 0;
  int64_t rounds = 3;  // --rounds: interleaved timing rounds after the checked pair
  double temperature = 0.0, top_p = 1.0;
  bool no_compare = false, print_ids = false, eager = false, ignore_eos = false;
  TextFlags text;
  apps::TpFlags tp;
  apps::SpeculationFlags spec;
};

/// The command line, its cross-flag rules applied. Throws FlagError for a
/// refused flag or combination; --help prints the usage and exits.
Options parse_options(int argc, char** argv);

}  // namespace statickv::demo
