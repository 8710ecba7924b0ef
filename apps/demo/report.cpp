// statickv-demo's output (report.hpp).

#include "report.hpp"

#include <statickv/apps/compare.hpp>
#include <statickv/flags/flags.hpp>
#include <statickv/model/cpu_linear.hpp>

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cstdio>
#include <fstream>

namespace statickv::demo {

using namespace statickv::reference;

namespace {

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

// The decoder layer the main run takes: --path with auto resolved as the
// Engine resolves it (Note [fused decode path]).
const char* path_taken(const LlamaModel& model, const GenerateOptions& options) {
  if (options.cache == CacheKind::kDynamic) return to_string(DecodePath::kPlain);
  CacheConfig config = model.cache_config(1, 2);
  config.kv_storage = options.kv_storage;
  config.host_offload = options.host_offload;
  return to_string(model.resolve_path(options.path, config));
}

}  // namespace

void print_header(const Options& o, const Loaded& run, const GenerateOptions& options,
                  at::Device device, at::ScalarType dtype, int64_t longest, int64_t chunk,
                  bool compare) {
  const ModelConfig& config = run.model->config();
  fmt::print("statickv-demo: {} | {} layers ({}), {} heads / {} kv x {} | {} on {}\n", run.source,
             config.num_hidden_layers, config.has_sliding() ? "with sliding layers" : "all full",
             config.num_attention_heads, config.num_key_value_heads, config.head_dim,
             flags::dtype_name(dtype), device.str());
  fmt::print(
      "{} prompts (longest {} tokens), {} new tokens each, {}; prefill {}{}; {} decoder layers{}\n",
      run.prompts.size(), longest, o.max_new_tokens, o.temperature > 0 ? "sampling" : "greedy",
      chunk >= longest ? std::string("in one pass") : fmt::format("in passes of {} tokens", chunk),
      compare ? " (both runs)" : "", path_taken(*run.model, options),
      o.offload ? "; KV cache offloaded to host memory (--offload)" : "");
  if (device.is_cpu() && dtype == at::kFloat) {
    fmt::print(
        "fused-path projections of 1 to {} rows: {}, more: {} (measured fastest on this CPU; "
        "Note [CPU projections])\n",
        kStreamRows, route_name(linear_route()), route_name(many_rows_route()));
  }
}

void report_run(const char* name, const GenerateResult& r) {
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

void print_speculation(const Options& o, const GenerateResult& r) {
  const SpeculationStats& s = r.speculation;
  fmt::print(
      "speculation: {} drafts per step by {}; acceptance rate {:.1f}% ({} of {} drafts), {} "
      "verification steps for {} tokens ({:.2f} per step)\n",
      o.spec.speculate, apps::drafting_name(o.spec), 100.0 * s.acceptance_rate(), s.accepted,
      s.drafted, s.verify_steps, decode_tokens(r),
      s.verify_steps > 0 ? static_cast<double>(decode_tokens(r)) / s.verify_steps : 0.0);
}

bool report_comparison(const char* name, const GenerateResult& ours, const GenerateResult& baseline,
                       at::ScalarType dtype, bool greedy, KvStorage storage) {
  const apps::Comparison c =
      apps::compare_runs(ours.tokens, ours.logits, baseline.tokens, baseline.logits);
  if (storage != KvStorage::kCompute) return report_quantized(c, ours, baseline, storage);
  const apps::Tolerance tol = apps::tolerance_for(dtype);
  const apps::Verdict verdict = apps::judge(c, tol, greedy);
  const std::string dtype_text = flags::dtype_name(dtype);
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

void print_ids(const GenerateResult& result) {
  for (const auto& row : result.tokens) {
    std::string line;
    for (size_t i = 0; i < row.size(); ++i) line += (i ? "," : "") + std::to_string(row[i]);
    std::puts(line.c_str());
  }
}

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

}  // namespace statickv::demo
