#pragma once
// statickv-serve's options: its flags, the rules between them, and the
// Scheduler's options they make (docs/serving.md). Every refusal is a
// flags::FlagError naming the flag (exit status 2).

#include <statickv/apps/model_flags.hpp>
#include <statickv/engine/scheduler.hpp>
#include <statickv/model/model_config.hpp>

#include <cstdint>
#include <string>

namespace statickv::serve {

struct Options {
  std::string checkpoint, shape = "tiny", device = "auto", dtype, cache, tokenizer, kv_dtype;
  int64_t max_batch = 8, max_len = 0, prefill_chunk = 0, token_budget = 0, seed = 0;
  int64_t burst_budget = 0;
  int64_t prefix_cache_bytes = -1;
  bool no_prefix_cache = false;
  int threads = 0;
  int64_t gather_ms = 10;    // --gather-ms (--http)
  bool fit_threads = false;  // --fit-threads: CpuThreads before each step
  bool eager = false;        // --eager: exact shapes (the CPU's default)
  bool buckets = false;      // --buckets: the GraphRunner on the CPU too
  bool offload = false;
  apps::TpFlags tp;
  apps::SpeculationFlags spec;
  // --http (docs/serving.md, "HTTP API")
  std::string http, served_model_name, api_key;
  std::string http_host = "127.0.0.1";  // --http, parsed
  int http_port = 0;
  int64_t http_threads = 128, max_queue = 64, max_body_bytes = 1 << 20, max_n = 0;
  bool strict_fields = false;
};

/// The command line, checked: each flag's own range, then the rules
/// between flags (--http's flags, --tp, speculation, --shape/--checkpoint).
Options parse_options(int argc, char** argv);

/// The Scheduler's options from the flags and the model's config, refusing
/// what the model cannot take (a static cache with sliding layers, --max-len
/// past its positions) and combinations the Scheduler cannot serve.
reference::SchedulerOptions scheduler_options(const Options& o,
                                              const reference::ModelConfig& config);

}  // namespace statickv::serve
