#pragma once
// generate(): prefill then decode a batch of prompts of different lengths
// (ragged rows) through a StaticCache, HybridCache or the DynamicCache
// baseline; greedy by default, temperature/top-k sampling with a seed.

#include <statickv/engine/engine.hpp>
#include <statickv/engine/speculative.hpp>
#include <statickv/graph_runner.hpp>
#include <statickv/model/model.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace statickv::reference {

/// Streaming: (row, token id, last), where row indexes the call's prompts
/// and last is true for the row's final token (its token limit, or an eos id
/// with stop_at_eos; the eos id itself is passed, as it is in the result).
/// Runs on the calling thread between steps; it must not call back into the
/// Generator.
using TokenCallback = std::function<void(int64_t row, int64_t token, bool last)>;

struct PromptCache;  // prompt_cache.hpp
namespace detail {
struct Call;
struct Rows;
}  // namespace detail

/// Generator's options: the settings it shares with the Scheduler
/// (EngineSettings, engine.hpp: cache kind, kernel, storage, offload,
/// buckets, speculation), which apply to static and hybrid caches, plus its
/// own.
struct GenerateOptions : EngineSettings {
  int64_t max_new_tokens = 16;
  /// Static/hybrid caches: the decoder's plain or fused layer (Note [fused
  /// decode path]), auto taking fused where it applies; the dynamic cache
  /// takes only the plain one (auto resolves to it).
  DecodePath path = DecodePath::kAuto;
  double temperature = 0.0;  ///< 0 = greedy
  int64_t top_k = 0;         ///< 0 = no top-k filter (sampling only)
  double top_p = 1.0;        ///< (0, 1]; 1 = no top-p filter (sampling only)
  uint64_t seed = 0;
  bool stop_at_eos = true;  ///< a row stops after emitting an EOS id
  bool record_logits = false;
  int64_t prefill_chunk = 0;  ///< 0 = as large as the cache allows
  /// Called after each decode step with (steps done, steps planned); under
  /// speculation, after each verification step with the longest row's
  /// tokens after its first.
  std::function<void(int64_t, int64_t)> on_step;
};

struct GenerateResult {
  std::vector<std::vector<int64_t>> tokens;  ///< generated ids per prompt
  std::vector<at::Tensor> logits;  ///< per prompt [generated, vocab] float32 (record_logits)
  double prefill_seconds = 0;      ///< prompt passes and the first token: time to first token
  double decode_seconds = 0;       ///< every later token
  int64_t decode_steps = 0;
  int64_t cache_bytes = 0;       ///< static/hybrid: allocated; dynamic: held at the end
  int64_t staging_bytes = 0;     ///< quantized storage: the staging buffer (part of cache_bytes)
                                 ///< host offload: the staging ring
  int64_t host_cache_bytes = 0;  ///< host offload: keys and values in host memory (of cache_bytes)
  int64_t restored_tokens = 0;   ///< generate_with_prompt_cache: prompt tokens restored
  int64_t prefilled_tokens = 0;  ///< prompt tokens prefilled (all of them without a cache file)
  double restore_seconds = 0;  ///< generate_with_prompt_cache: restoring the row (file read apart)
  RunnerStats prefill_runner;  ///< bucketed runs only
  RunnerStats decode_runner;   ///< speculation: the verification runner
  SpeculationStats speculation;  ///< speculate > 0: this call's drafts and acceptances
};

/// One-shot generation: a Generator sized for these prompts, used once.
/// max_batch: cache rows (0 = the number of prompts; a larger cache serves
/// the batch through its batch-prefix views). max_len: cache capacity (0 =
/// longest prompt + max_new_tokens).
GenerateResult generate(const LlamaModel& model, const std::vector<std::vector<int64_t>>& prompts,
                        const GenerateOptions& options, int64_t max_batch = 0, int64_t max_len = 0);

/// A generation session: owns the cache (static/hybrid, max_batch rows of
/// max_len positions) and the bucketed runners, so the CUDA graphs one call
/// captures are replayed by every later call, whatever its batch size (<=
/// max_batch) and prompt lengths, as a server holds them for its lifetime.
/// Each call starts from empty rows. Stats in a result are the session's
/// totals so far. Calls run under c10::InferenceMode.
class Generator {
 public:
  Generator(const LlamaModel& model, GenerateOptions options, int64_t max_batch, int64_t max_len);
  ~Generator();
  Generator(const Generator&) = delete;
  Generator& operator=(const Generator&) = delete;

  /// max_new_tokens: this call's limit (0 = GenerateOptions::max_new_tokens).
  /// on_token: called for every generated token as soon as it is on the host
  /// (rows in order within a step), for streaming; see TokenCallback.
  GenerateResult generate(const std::vector<std::vector<int64_t>>& prompts,
                          int64_t max_new_tokens = 0, const TokenCallback& on_token = nullptr);

  /// Prompt caching (prompt_cache.hpp; static/hybrid caches): prefills
  /// `prompt` alone in row 0 and saves that row, its ids and the cache's
  /// fingerprint (with `model_id`) to `path`. Returns the tokens saved.
  int64_t save_prompt(const std::vector<int64_t>& prompt, const std::string& path,
                      const std::string& model_id = "");

  /// generate() of one prompt whose prefix a save_prompt wrote to `path`:
  /// the saved row is restored into row 0 and only the rest of the prompt is
  /// prefilled (at least its last token, for the first logits). Refuses a
  /// file whose ids are not a prefix of `prompt`, or whose fingerprint
  /// differs, before anything runs. The ids equal generate({prompt})'s.
  GenerateResult generate_with_prompt_cache(const std::vector<int64_t>& prompt,
                                            const std::string& path, int64_t max_new_tokens = 0,
                                            const TokenCallback& on_token = nullptr,
                                            const std::string& model_id = "");

  /// True when the runners replay CUDA graphs.
  bool uses_graphs() const;
  /// The decoder layer taken: options' path with auto resolved.
  DecodePath path() const;
  /// The session's runner statistics so far (empty without bucketing).
  RunnerStats prefill_stats() const;
  /// The decode runner's; under speculation the verification runner's,
  /// which runs every decode step then (as GenerateResult::decode_runner).
  RunnerStats decode_stats() const;

 private:
  struct State;
  GenerateResult run(const std::vector<std::vector<int64_t>>& prompts, int64_t max_new_tokens,
                     const TokenCallback& on_token, const PromptCache* cached);
  static SpeculationStats speculate(State& s, detail::Call& call, detail::Rows& rows,
                                    const std::vector<std::vector<int64_t>>& prompts,
                                    const std::vector<int64_t>& lens);
  std::unique_ptr<State> state_;
};

}  // namespace statickv::reference
