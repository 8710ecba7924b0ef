// statickv-serve's flags and the rules between them (options.hpp).

#include "serve/options.hpp"

#include <statickv/apps/storage_flags.hpp>
#include <statickv/buckets.hpp>
#include <statickv/engine/engine.hpp>
#include <statickv/flags/flags.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <stdexcept>

namespace statickv::serve {

using namespace statickv::reference;

namespace {

void add_http_flags(flags::Flags& flags, Options* o) {
  flags.add("--http HOST:PORT", &o->http,
            "serve the OpenAI-compatible HTTP API there instead of JSON lines (HOST defaults to "
            "127.0.0.1; PORT 0 picks a free port, printed once listening)");
  flags.add("--served-model-name NAME", &o->served_model_name,
            "the model's name in /v1/models and responses (default: the checkpoint directory's "
            "name, or the shape)");
  flags.add("--http-threads N", &o->http_threads,
            "HTTP handler threads: requests served at once, streams included", /*min=*/1);
  flags.add("--max-queue N", &o->max_queue,
            "requests waiting for a cache row before new ones get 503 (Retry-After)", /*min=*/1);
  flags.add("--gather-ms N", &o->gather_ms,
            "an idle server's first request waits up to N ms for others arriving with it (each "
            "within N/5 ms, at least 2, of the last) to start in the same step (0: none)",
            /*min=*/0);
  flags.add("--api-key KEY", &o->api_key,
            "require 'Authorization: Bearer KEY' on /v1/ routes (401 otherwise)");
  flags.add("--max-body-bytes N", &o->max_body_bytes, "largest request body (413 past it)",
            /*min=*/1);
  flags.add("--max-n N", &o->max_n,
            "most choices per request: n times the prompts in a list (400 past it; default 0: "
            "--max-batch)",
            /*min=*/0);
  flags.add_switch("--strict-fields", &o->strict_fields,
                   "answer 400 to a request field the server does not know (default: ignore it, "
                   "logged once per name and counted in /metrics)");
}

/// --http HOST:PORT or PORT into o.http_host and o.http_port.
void parse_http_address(Options& o) {
  const size_t colon = o.http.rfind(':');
  const std::string port = colon == std::string::npos ? o.http : o.http.substr(colon + 1);
  if (colon != std::string::npos && colon > 0) o.http_host = o.http.substr(0, colon);
  try {
    size_t used = 0;
    o.http_port = std::stoi(port, &used);
    if (used != port.size() || o.http_port < 0 || o.http_port > 65535) {
      throw std::invalid_argument(port);
    }
  } catch (const std::exception&) {
    throw flags::FlagError("--http: expected HOST:PORT or PORT with PORT in [0, 65535] but got '" +
                           o.http + "'");
  }
}

/// The --http flags need --http, and --http takes no --tp.
void check_http_flags(const flags::Flags& flags, Options& o) {
  for (const char* name : {"--served-model-name", "--http-threads", "--max-queue", "--api-key",
                           "--max-body-bytes", "--max-n", "--strict-fields", "--gather-ms"}) {
    if (o.http.empty() && flags.given(name)) {
      throw flags::FlagError(std::string(name) +
                             ": expected --http with it (a JSON-lines server has no " +
                             "HTTP side)");
    }
  }
  if (o.http.empty()) return;
  if (o.gather_ms > 60000) {
    throw flags::FlagError(
        fmt::format("--gather-ms: expected at most 60000 (a minute) but got {}", o.gather_ms));
  }
  if (o.tp.tp > 1) {
    throw flags::FlagError(
        fmt::format("--http: expected no --tp with --http (rank 0 does not forward "
                    "HTTP requests to the other ranks) but got --tp {}",
                    o.tp.tp));
  }
  if (o.max_queue + o.max_batch > o.http_threads) {  // else 503 could never be answered
    throw flags::FlagError(fmt::format(
        "--max-queue: expected at most --http-threads - --max-batch = {} (every waiting or "
        "running request holds a handler thread) but got {}",
        o.http_threads - o.max_batch, o.max_queue));
  }
#ifndef STATICKV_SERVE_HTTP
  throw flags::FlagError(
      "--http: expected a build with cpp-httplib (Debian: libcpp-httplib-dev) but "
      "this statickv-serve has no HTTP mode; got --http " +
      o.http);
#endif
  parse_http_address(o);
}

/// The model's and the cache's flags.
void add_model_and_cache_flags(flags::Flags& flags, Options* o) {
  apps::add_model_flags(flags, &o->checkpoint, &o->shape);
  apps::add_tp_flags(flags, &o->tp);
  flags.add("--seed N", &o->seed, "random weights of --shape", /*min=*/0);
  flags.add_device(&o->device);
  flags::add_dtype(flags, &o->dtype, at::kBFloat16);
  apps::add_kv_dtype(flags, &o->kv_dtype);
  apps::add_offload(flags, &o->offload);
  flags.add_choice("--cache C", &o->cache, {"static", "hybrid"},
                   "static or hybrid (default: static for all-full models, hybrid when the model "
                   "has sliding layers)");
  flags.add("--max-batch N", &o->max_batch, "cache rows: requests served at once", /*min=*/1);
  flags.add("--max-len N", &o->max_len,
            "positions per row: prompt + max_new_tokens of any request (default 0: min(2048, "
            "the model's max_position_embeddings))",
            /*min=*/0);
  flags.add("--prefill-chunk N", &o->prefill_chunk,
            "most prompt tokens a row prefills per step (default 0: 128 on the CPU, 64 on CUDA)",
            /*min=*/0);
  flags.add("--token-budget N", &o->token_budget,
            "most tokens in a step in which at least as many rows decode as prefill, decode "
            "first (default 0: max-batch - 1 + prefill chunk)",
            /*min=*/0);
  flags.add(
      "--burst-budget N", &o->burst_budget,
      "most tokens in a step in which more rows prefill than decode, decode first (default 0: "
      "the larger of the token budget and max-batch x prefill chunk; at least the token budget, "
      "which gives one budget for every step)",
      /*min=*/0);
  flags.add("--prefix-cache-bytes N", &o->prefix_cache_bytes,
            "bytes of saved prefixes new requests start from (docs/serving.md, prefix cache; "
            "default -1: the cache's own bytes, off with --kv-dtype int8/fp8 or a draft model)",
            /*min=*/-1);
  flags.add_switch("--no-prefix-cache", &o->no_prefix_cache,
                   "prefill every prompt from its first token (--prefix-cache-bytes 0)");
  flags.add_switch("--eager", &o->eager,
                   "run steps at their exact shapes (the default on the CPU, which has no "
                   "graphs to replay; on CUDA the default is the bucketed GraphRunner, every "
                   "bucket captured at start)");
  flags.add_switch("--buckets", &o->buckets,
                   "run steps through the bucketed GraphRunner on the CPU too (CUDA's default; "
                   "docs/serving.md, Buckets on the CPU)");
}

/// The serving loop's flags, the HTTP ones, and the input format.
void add_serving_flags(flags::Flags& flags, Options* o) {
  apps::add_speculation_flags(flags, &o->spec);
  add_http_flags(flags, o);
  flags.add("--threads N", &o->threads, "intra-op CPU threads (default 0: LibTorch's choice)",
            /*min=*/0);
  flags.add_switch("--fit-threads", &o->fit_threads,
                   "on the CPU, before each step fit the intra-op threads to the CPUs other "
                   "processes leave idle: up to --threads (or LibTorch's count), one fewer for "
                   "each CPU they keep busy (docs/serving.md, \"A busy machine\")");
  flags.add("--tokenizer DIR", &o->tokenizer,
            "tokenizer.json directory for \"text\" in and out (default: the checkpoint's, when it "
            "has one)");
  flags.add_note(
      "Input, one JSON object per line: {\"id\": ..., \"prompt\": [ids] (or \"text\": \"...\"),\n"
      "\"max_new_tokens\": N} with optional \"stop\": [ids], \"arrival_s\" (replay offset),\n"
      "\"logprobs\" and the sampling fields (docs/serving.md); or {\"cancel\": id}.\n"
      "Output, one line per finished request:\n"
      "{\"id\", \"tokens\", \"finish\", \"queue_s\", \"ttft_s\", \"decode_tokens_per_s\"} (+ "
      "\"error\",\n"
      "\"text\"). End of input drains the queue and exits 0; a refused flag exits 2.\n"
      "With --http: the OpenAI-compatible API (/v1/completions, /v1/chat/completions,\n"
      "/v1/models, /health, /metrics; docs/serving.md) until SIGTERM, which drains and exits 0.");
}

/// The rules between flags, each refusal naming both.
void check_rules(const flags::Flags& flags, Options& o) {
  check_http_flags(flags, o);
  apps::check_speculation_flags(o.spec, o.cache);
  apps::check_tp_with_speculation(o.tp, o.spec);
  if (!o.checkpoint.empty() && flags.given("--shape")) {
    throw flags::FlagError(
        "--shape: expected no --shape with --checkpoint (the checkpoint has its own)");
  }
  if (o.eager && o.buckets) {
    throw flags::FlagError(
        "--buckets: expected no --buckets with --eager (steps run bucketed or at their exact "
        "shapes, not both)");
  }
  if (o.tp.tp > 1 && !o.eager && flags::parse_device(o.device).is_cuda()) {
    throw flags::FlagError(
        "--tp: expected --eager with --tp " + std::to_string(o.tp.tp) +
        " on cuda (NCCL collectives inside captured CUDA graphs are not supported)");
  }
  if (o.tp.tp > 1 && o.prefix_cache_bytes > 0 && !o.no_prefix_cache) {
    throw flags::FlagError(
        fmt::format("--prefix-cache-bytes: expected 0 or -1 with --tp {} (the prefix "
                    "cache is not tested across ranks) but got {}",
                    o.tp.tp, o.prefix_cache_bytes));
  }
  if (o.fit_threads && (flags::parse_device(o.device).is_cuda() || o.tp.tp > 1)) {
    throw flags::FlagError(
        o.tp.tp > 1
            ? "--fit-threads: expected --tp 1 (every rank must run the same threads) but "
              "got --tp " +
                  std::to_string(o.tp.tp)
            : "--fit-threads: expected --device cpu (it fits CPU threads) but got " + o.device);
  }
  if (!o.checkpoint.empty() && flags.given("--seed")) {
    throw flags::FlagError(
        "--seed: expected no --seed with --checkpoint (it seeds random weights)");
  }
}

}  // namespace

Options parse_options(int argc, char** argv) {
  Options o;
  flags::Flags flags("statickv-serve",
                     "continuous-batching server: JSON lines in (requests), one JSON line out per "
                     "finished request; or an OpenAI-compatible HTTP API (--http)");
  add_model_and_cache_flags(flags, &o);
  add_serving_flags(flags, &o);
  flags.parse(argc, argv);
  check_rules(flags, o);
  return o;
}

namespace {

/// Whether steps run through the bucketed GraphRunner: on CUDA unless
/// --eager, on the CPU only with --buckets (docs/serving.md, "Buckets on
/// the CPU": no graphs to replay, and a bucket's padding costs real work).
bool bucketed(const Options& o) {
  if (o.buckets) return true;
  return !o.eager && !flags::parse_device(o.device).is_cpu();
}

/// --prefill-chunk's default: 128 on the CPU, whose GEMMs gain from more
/// rows per prefill call (docs/serving.md, "Token budget"), 64 elsewhere.
int64_t default_chunk(const Options& o) {
  return flags::parse_device(o.device).is_cpu() ? 128 : 64;
}

/// --prefill-chunk, --token-budget and --burst-budget, checked against
/// --max-len and --max-batch (s.max_len set) under the flags' names, their
/// defaults the Scheduler's (resolve_step_budgets) but for the chunk's on
/// the CPU; returns the chunk in force.
int64_t set_step_budgets(const Options& o, SchedulerOptions& s) {
  if (o.prefill_chunk > s.max_len) {
    throw flags::FlagError(fmt::format("--prefill-chunk: expected at most --max-len={} but got {}",
                                       s.max_len, o.prefill_chunk));
  }
  for (const auto& [name, budget] :
       {std::pair{"--token-budget", o.token_budget}, std::pair{"--burst-budget", o.burst_budget}}) {
    if (budget > 0 && budget < o.max_batch) {
      throw flags::FlagError(
          fmt::format("{}: expected 0 or at least --max-batch={} (every decode row) but got {}",
                      name, o.max_batch, budget));
    }
  }
  s.prefill_chunk = o.prefill_chunk > 0 ? o.prefill_chunk : default_chunk(o);
  s.token_budget = o.token_budget;
  s.burst_budget = o.burst_budget;
  reference::resolve_step_budgets(s);
  if (s.burst_budget < s.token_budget) {
    throw flags::FlagError(fmt::format(
        "--burst-budget: expected 0 or at least the token budget, {} (a burst's step is never "
        "smaller than another) but got {}",
        s.token_budget, s.burst_budget));
  }
  return s.prefill_chunk;
}

}  // namespace

SchedulerOptions scheduler_options(const Options& o, const ModelConfig& config) {
  SchedulerOptions s;
  if (o.cache == "static" && config.has_sliding()) {
    throw flags::FlagError(
        "--cache: expected hybrid for a model with sliding-window layers but got static");
  }
  s.cache = o.cache.empty() ? (config.has_sliding() ? CacheKind::kHybrid : CacheKind::kStatic)
                            : parse_cache_kind(o.cache);
  const int64_t positions = config.max_position_embeddings;
  s.max_len = o.max_len > 0 ? o.max_len : std::min<int64_t>(2048, positions);
  if (s.max_len < 2 || s.max_len > positions) {
    throw flags::FlagError(fmt::format(
        "--max-len: expected an integer in [2, {}] (the model's max_position_embeddings) but got "
        "{}",
        positions, s.max_len));
  }
  s.max_batch = o.max_batch;
  s.fit_threads = o.fit_threads;
  apps::check_offload_flags(o.offload, o.kv_dtype, "plain", o.cache);
  s.kv_storage = apps::parse_kv_storage(o.kv_dtype);
  s.host_offload = o.offload;
  const int64_t chunk = set_step_budgets(o, s);
  s.bucketed = bucketed(o);
  s.speculate = o.spec.speculate;
  s.prefix_cache_bytes = o.no_prefix_cache ? 0 : o.prefix_cache_bytes;
  if (o.tp.tp > 1) s.prefix_cache_bytes = 0;  // the default turns itself off under --tp
  if (s.prefix_cache_bytes > 0 && s.kv_storage != KvStorage::kCompute) {
    throw flags::FlagError(
        fmt::format("--prefix-cache-bytes: expected 0 or -1 with --kv-dtype {} (row "
                    "snapshots support plain storage only) but got {}",
                    o.kv_dtype, s.prefix_cache_bytes));
  }
  if (s.prefix_cache_bytes > 0 && o.spec.draft_model()) {
    throw flags::FlagError(
        fmt::format("--prefix-cache-bytes: expected 0 or -1 with a draft model "
                    "(--draft-checkpoint or --draft-shape) but got {}",
                    s.prefix_cache_bytes));
  }
  const int64_t max_chunk = ShapeBuckets::powers_of_two(chunk).round_up(chunk);
  if (s.speculate + 1 > max_chunk) {
    throw flags::FlagError(fmt::format(
        "--speculate: expected N + 1 <= {} (the cache's max_chunk, from --prefill-chunk: a "
        "verification step carries N + 1 tokens) but got --speculate {}",
        max_chunk, s.speculate));
  }
  return s;
}

}  // namespace statickv::serve
