#pragma once
// Engine: what Generator (generator.hpp) and Scheduler (scheduler.hpp) both
// stand on. It builds, from one EngineOptions, the cache (StaticCache or
// HybridCache), its attention backend, the draft model's mirrored cache and
// backend, and the bucketed runners; and it runs every forward pass through
// one dispatch (run_pass: the runner when bucketed, else the eager
// forward). Step inputs are packed by one StepPacker.
//
//   Engine engine(model, options);
//   StepPacker pack(b, q);
//   pack.put(r, t, id, position);        // unset tokens are padding
//   at::Tensor logits = engine.run(Pass::kDecode, pack.take(), Logits::kAll);
//
// One thread at a time, like the cache and runners it owns.

#include <statickv/buckets.hpp>
#include <statickv/cache.hpp>
#include <statickv/graph_runner.hpp>
#include <statickv/model/backends.hpp>
#include <statickv/model/model.hpp>
#include <statickv/sampling/head.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace statickv::reference {

enum class CacheKind { kStatic, kHybrid, kDynamic };

CacheKind parse_cache_kind(const std::string& name);  // "static" | "hybrid" | "dynamic"
const char* to_string(CacheKind kind);

/// One forward pass's inputs: ids and positions [b, q] in host memory
/// (position -1 = a padded token), the attended length (one past the
/// highest position fed, at least 1) and how many tokens are real.
/// `takes` (int64 [b], host; Engine::run_and_pick and run_and_verify set
/// it) marks the rows the sampling head picks or verifies inside a
/// runner's step; undefined: none. `draft_q` (run_and_verify with a draft
/// model: its distributions [b, k, vocab] on the device; undefined: none
/// drawn) rides into the verification step with them.
struct StepInputs {
  at::Tensor ids, positions;
  int64_t attend = 1;
  int64_t real = 0;
  at::Tensor takes;
  at::Tensor draft_q;
};

/// The one packer of step inputs: a [b, q] grid of padding (id 0, position
/// -1) that callers fill token by token.
class StepPacker {
 public:
  StepPacker(int64_t b, int64_t q);
  /// Row r, column t holds `id` at `position` (>= 0).
  void put(int64_t r, int64_t t, int64_t id, int64_t position);
  /// Row r, columns 0..n-1 hold seq[from .. from + n) at positions from ...
  void put_run(int64_t r, const std::vector<int64_t>& seq, int64_t from, int64_t n);
  int64_t rows() const { return b_; }
  int64_t cols() const { return q_; }
  /// The packed inputs; the packer is empty afterwards.
  StepInputs take();

 private:
  int64_t b_, q_;
  std::vector<int64_t> ids_, positions_;
  int64_t attend_ = 1, real_ = 0;
};

/// What a runner's step takes besides the ids and positions, named when
/// the runner is built: the step and run_pass read it, so neither counts
/// inputs to know.
enum class RunnerInputs {
  kTokens,          ///< ids and positions only
  kTakes,           ///< and each row's take (the sampling head picks inside the step)
  kTakesAndDrafts,  ///< and, verifying, the draft model's distributions
};

/// The one runner-or-eager dispatch: moves `in` to the model's device, then
/// runs `runner` when there is one (it pads to its buckets), with what
/// `inputs` names (takes: in.takes, zeros when undefined; drafts: in.draft_q
/// after a zero row), or the model's eager forward through `backend`.
/// Under tensor parallelism the pass's host inputs go through the step
/// check first (LlamaModel::check_same_step). Returns the model's logits.
at::Tensor run_pass(const LlamaModel& model, GraphRunner* runner, AttentionBackend& backend,
                    const StepInputs& in, Logits which,
                    RunnerInputs inputs = RunnerInputs::kTokens);

/// The passes an Engine runs, each through its own runner when bucketed.
enum class Pass {
  kPrefill,  ///< prompt chunks (prompt buckets); each row's newest logits [b, vocab]
  kDecode,   ///< one token per row: its own q = 1 runner (decode_runner), else the prefill one
  kVerify,   ///< speculation: k + 1 tokens per row, every token's logits [b, k + 1, vocab]
};

/// The options Generator and Scheduler share: GenerateOptions and
/// SchedulerOptions derive from it, and both hand it to their Engine.
struct EngineSettings {
  /// kStatic or kHybrid (one preallocated cache); Generator also takes
  /// kDynamic, its concatenating baseline, which needs no Engine.
  CacheKind cache = CacheKind::kHybrid;
  AttentionKernel kernel = AttentionKernel::kSdpa;
  /// The cache's stored type (CacheConfig::kv_storage). A quantized cache
  /// refuses row save/restore (prompt caching).
  KvStorage kv_storage = KvStorage::kCompute;
  /// Keep the cache's keys and values in host memory, two layers' worth
  /// staged on the device (CacheConfig::host_offload, Note [host offload]).
  /// Takes the plain decoder path (auto resolves to it) and compute storage.
  bool host_offload = false;
  /// Run every pass through a GraphRunner (batch buckets, prompt-length
  /// buckets, attended-length buckets). It replays CUDA graphs on a GPU and
  /// runs the same padded steps eagerly on the CPU. false: plain eager steps
  /// at the exact shapes.
  bool bucketed = true;
  /// With bucketed on a CUDA device: capture CUDA graphs (false: eager).
  bool cuda_graphs = true;
  /// Bucketed: prompt-chunk lengths the prefill runner pads to (default:
  /// powers of two up to the prefill chunk). Its max must cover the chunk,
  /// and the bucket serving a full chunk must fit the cache's max_chunk.
  std::optional<ShapeBuckets> prompt_buckets;
  /// Bucketed: attended lengths every runner pads to (default: powers of two
  /// from 64 up to max_len). Its max must be max_len. Buckets of every size
  /// (ShapeBuckets::multiples_of(1, max_len)) make one graph per length.
  std::optional<ShapeBuckets> attend_buckets;
  /// Speculative decoding (docs/speculative.md): up to `speculate` draft
  /// tokens per row (by prompt lookup over the row's own ids, or from
  /// `draft_model`), verified in one step of speculate + 1 query tokens,
  /// which must fit the cache's max_chunk. 0 = plain decode. Greedy output
  /// is the plain decode's; sampled output has its distribution.
  int64_t speculate = 0;
  /// Prompt lookup: the longest n-gram matched (down to 1).
  int64_t lookup_ngram = 3;
  /// Draft-model drafting (needs speculate >= 1): a smaller model with the
  /// target's vocabulary and device, run eagerly on its own hybrid cache,
  /// whose rows mirror the target's. Not owned: it must outlive the user.
  /// nullptr: prompt lookup.
  const LlamaModel* draft_model = nullptr;
  /// Bucketed: the sampling head picks inside the prefill and decode
  /// runners' steps (SamplingHead::pick_all, every stage), so a CUDA graph
  /// replays the forward and the pick as one (Note [sampling head]).
  /// Unset: exactly when the runners capture CUDA graphs; true on the CPU
  /// runs the launches a capture would replay (slower: every stage for
  /// every row); false: the pick runs after the pass, its stages chosen by
  /// what the rows ask.
  std::optional<bool> head_in_step;
};

/// Everything an Engine is built from: the shared settings plus the sizes
/// and the runner layout its user chose.
struct EngineOptions : EngineSettings {
  int64_t max_batch = 1;
  int64_t max_len = 2;
  int64_t max_chunk = 0;  ///< CacheConfig::max_chunk (0 = the cache's default)
  /// Most prompt tokens a row feeds per pass (0 = the cache's max_chunk);
  /// at most the cache's max_chunk (prefill_chunk()).
  int64_t prefill_chunk = 0;
  /// The decoder layer (Note [fused decode path]): auto is fused where it
  /// applies (LlamaModel::resolve_path); options() holds the one taken.
  DecodePath path = DecodePath::kAuto;
  /// kDecode gets its own q = 1 runner whose step returns every token's
  /// logits ([b, 1, vocab]); false: kDecode runs through kPrefill's runner.
  bool decode_runner = false;
};

class Engine {
 public:
  /// Builds everything; refuses, naming the option, a static cache for a
  /// model with sliding layers, a verification step longer than max_chunk,
  /// buckets that cannot serve max_len and head_in_step without bucketed
  /// runners or a head. `head` (not owned, outliving the engine) is the
  /// sampling head run_and_pick picks with; nullptr: none.
  Engine(const LlamaModel& model, const EngineOptions& options, SamplingHead* head = nullptr);
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  const LlamaModel& model() const { return model_; }
  const EngineOptions& options() const { return options_; }
  Cache& cache() { return *cache_; }
  const Cache& cache() const { return *cache_; }
  CacheBackend& backend() { return *backend_; }
  /// The draft model's cache and backend (nullptr without a draft model).
  Cache* draft_cache() { return draft_cache_.get(); }
  CacheBackend* draft_backend() { return draft_backend_.get(); }
  /// The prompt tokens a row feeds per prefill pass (options' prefill_chunk
  /// within the cache's max_chunk).
  int64_t prefill_chunk() const { return chunk_; }
  /// The runner `pass` goes through (nullptr: eager, or no such pass).
  GraphRunner* runner(Pass pass) const;
  /// What that runner's step takes besides ids and positions.
  RunnerInputs runner_inputs(Pass pass) const;

  /// One target pass (run_pass through runner(pass)).
  at::Tensor run(Pass pass, const StepInputs& in, Logits which);
  /// A prefill or decode pass whose rows' newest logits the head picks
  /// from, row r when takes[r]: inside the runner's step when
  /// head_in_step() (one replay on a GPU), else right after the pass.
  /// Returns the rows' newest logits [b, vocab]; the head's fetch reads the picks.
  at::Tensor run_and_pick(Pass pass, const StepInputs& in, const std::vector<bool>& takes);
  /// The verification pass (Pass::kVerify, every token's logits [b, k + 1,
  /// vocab], returned) and the head's acceptance rule over `drafts` for
  /// row r when takes[r] (SamplingHead::verify): inside the verification
  /// runner's step when head_in_step() (one replay on a GPU), else right
  /// after the pass. The drafts are checked first (check_verify), before
  /// anything is written; the head's fetch reads the verdicts.
  at::Tensor run_and_verify(const StepInputs& in, const DraftSet& drafts,
                            const std::vector<bool>& takes);
  /// Whether run_and_pick and run_and_verify run the head inside the
  /// runners' steps (resolved option).
  bool head_in_step() const { return head_in_step_; }
  /// One eager pass of the draft model on its cache: the newest logits [b, vocab].
  at::Tensor run_draft(const StepInputs& in);

  /// Captures (CUDA) or allocates (CPU) every key of every runner.
  void warm_up();
  bool uses_graphs() const;

 private:
  void check_buckets() const;
  void resolve_head_in_step();
  void build_runners();
  static std::vector<InputSpec> input_specs(RunnerInputs inputs, int64_t vocab);
  GraphRunner::StepFn verify_step();

  const LlamaModel& model_;
  EngineOptions options_;
  int64_t chunk_ = 0;
  std::unique_ptr<Cache> cache_;
  std::unique_ptr<CacheBackend> backend_;
  std::unique_ptr<Cache> draft_cache_;
  std::unique_ptr<CacheBackend> draft_backend_;
  std::unique_ptr<GraphRunner> prefill_runner_, decode_runner_, verify_runner_;
  SamplingHead* head_ = nullptr;
  bool head_in_step_ = false;
  RunnerInputs picking_ = RunnerInputs::kTokens, verifying_ = RunnerInputs::kTokens;
};

}  // namespace statickv::reference
