#pragma once
// statickv-demo's output: the header lines, each run's speed and memory
// line, speculation's acceptance, the comparison with the DynamicCache
// baseline and its verdict (apps/compare.hpp), --print-ids' lines and
// --json's file.

#include "load.hpp"
#include "options.hpp"

#include <statickv/engine/generator.hpp>

#include <cstdint>
#include <string>
#include <vector>

namespace statickv::demo {

/// The run's header: the model, its dtype and device; the prompts, the
/// sampling, the prefill passes (`chunk` tokens) and the decoder layer.
void print_header(const Options& o, const Loaded& run, const reference::GenerateOptions& options,
                  at::Device device, at::ScalarType dtype, int64_t longest, int64_t chunk,
                  bool compare);

/// One run's line: prefill time, decode time per step and tokens/s, cache
/// size (and where an offloaded or quantized cache holds it).
void report_run(const char* name, const reference::GenerateResult& r);

/// --speculate's drafts, acceptance rate and verification steps.
void print_speculation(const Options& o, const reference::GenerateResult& r);

/// Prints the comparison (Note [comparing with the baseline]) and its
/// verdict; returns whether the runs agree.
bool report_comparison(const char* name, const reference::GenerateResult& ours,
                       const reference::GenerateResult& baseline, at::ScalarType dtype, bool greedy,
                       KvStorage storage);

/// --print-ids: each prompt's generated ids on a line.
void print_ids(const reference::GenerateResult& result);

/// --json: the main run for programs: prompt lengths, ids, prefill and
/// decode times.
void write_json(const std::string& path, const std::vector<std::vector<int64_t>>& prompts,
                const reference::GenerateResult& r);

}  // namespace statickv::demo
