#pragma once
// ChainedDecode: the decode step as a decoding loop runs it (Note [chained
// step], docs/design.md). After a prompt is prefilled, each step is the
// forward pass of one token per row, the sampling head's pick inside the
// step, and the picked id and the next position written back into the
// step's own input buffers on the device. Step n + 1 reads what step n
// wrote, so N steps are N dependent steps with nothing between them: on a
// GPU one captured CUDA graph replayed N times; elsewhere the same launches
// eagerly.
//
//   ChainedOptions o;                     // fused, batch 1, 32 + 128: the anchor's
//   ChainedDecode chain(model, o);        // prefilled, first token picked
//   chain.rewind();                       // every row back at its prompt's end
//   for (int i = 0; i < 128; ++i) chain.step();
//   at::Tensor last = chain.ids();        // [batch, 1] on the device
//
// The chained benchmark (benchmarks/chained_decode.cpp) times it; the
// tests hold its tokens equal to Generator's.

#include <statickv/cache.hpp>
#include <statickv/graph_runner.hpp>
#include <statickv/model/backends.hpp>
#include <statickv/model/model.hpp>
#include <statickv/sampling/head.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

namespace statickv::reference {

struct ChainedOptions {
  DecodePath path = DecodePath::kFused;  ///< plain or fused (auto is resolved)
  int64_t batch = 1;                     ///< rows, every one live
  int64_t prompt = 32;                   ///< tokens prefilled per row before the chain
  int64_t steps = 128;                   ///< dependent steps a chain may take
  /// Every row's pick (greedy by default); the head runs every stage of its
  /// fused pick inside the step whatever is asked (SamplingHead::pick_all).
  Sampling sampling;
  /// On CUDA, capture the step once and replay it (false: eager steps).
  bool graphs = true;
  /// The prompts' random ids (row r's differ from row r + 1's).
  uint64_t seed = 0;
};

class ChainedDecode {
 public:
  /// Builds the cache (prompt + steps positions; hybrid where the model has
  /// sliding layers), prefills every row's prompt, picks its first token
  /// and, on CUDA with graphs, captures the step. Refuses, by name, a batch,
  /// prompt or step count below 1 and a prompt + steps past the model's
  /// max_position_embeddings.
  ChainedDecode(const LlamaModel& model, const ChainedOptions& options);
  ~ChainedDecode();
  ChainedDecode(const ChainedDecode&) = delete;
  ChainedDecode& operator=(const ChainedDecode&) = delete;

  /// Every row back at the end of its prompt with its first token, and the
  /// head's rows set afresh: the next steps repeat the last chain's.
  void rewind();
  /// One step (replay or eager): forward, pick, ids and positions fed back.
  /// No host sync. Refuses a step past `steps` since the last rewind.
  void step();
  /// The ids the next step reads, which the last step picked: int64
  /// [batch, 1] on the model's device (a stable buffer).
  const at::Tensor& ids() const { return ids_; }
  /// The positions the next step writes: int64 [batch, 1] (stable).
  const at::Tensor& positions() const { return positions_; }
  /// Row r's prompt ids (drawn from options' seed).
  std::vector<int64_t> prompt(int64_t r) const;
  /// The attended length every step is planned for: prompt + steps (at
  /// least 2 steps: a capture's warm-up runs).
  int64_t attend() const { return attend_; }
  /// Whether step() replays a captured CUDA graph.
  bool captured() const { return graph_ != nullptr; }
  /// One step's launches as a callable (eager), for a counter or a capture
  /// of one's own; it advances the chain like step().
  std::function<void()> body();
  const ChainedOptions& options() const { return options_; }
  Cache& cache() { return *cache_; }

 private:
  void run_step();

  const LlamaModel& model_;
  ChainedOptions options_;
  int64_t attend_ = 0, taken_ = 0;
  std::unique_ptr<Cache> cache_;
  std::unique_ptr<CacheBackend> backend_;
  std::unique_ptr<SamplingHead> head_;
  std::vector<int64_t> prompt_;  // row-major [batch, prompt], for the head's rows
  at::Tensor first_ids_, ids_, positions_, takes_;
  std::unique_ptr<statickv::detail::DeviceGraph> graph_;
};

}  // namespace statickv::reference
