#pragma once
// count_decode_step(): what one greedy decode step of the reference decoder
// launches, copies to the host and syncs on (Note [counted step],
// docs/design.md), for the benchmark that prints it and the test that holds
// it under ceilings.

#include <statickv/model/backends.hpp>
#include <statickv/model/model.hpp>
#include <statickv/op_counter.hpp>
#include <statickv/sampling/head.hpp>

#include <cstdint>
#include <memory>

namespace statickv::reference {

/// One counted decode step.
struct StepCount {
  int64_t layers = 0;
  int64_t in_layers = 0;  ///< launches inside the decoder layers, all together
  int64_t outside = 0;    ///< launches outside them: embedding, rotary tables,
                          ///< prepare(), final norm, LM head, the token pick
  int64_t host_copies = 0;
  int64_t syncs = 0;
  OpCounts counts;  ///< everything the counter saw

  double per_layer() const {
    return layers > 0 ? static_cast<double>(in_layers) / static_cast<double>(layers) : 0.0;
  }
};

/// One greedy decode step, set up once and run as often as wanted: `batch`
/// rows each `context` tokens into a cache of max_batch `batch` (static, or
/// hybrid with sliding layers). run() is the forward pass of one token per
/// row at position `context` (Logits::kLast; each call rewrites that slot),
/// argmax on the device and the copy of the ids to the host; its inputs are
/// placed on the model's device once, here.
class DecodeStep {
 public:
  DecodeStep(const LlamaModel& model, DecodePath path, int64_t batch, int64_t context);
  ~DecodeStep();
  DecodeStep(const DecodeStep&) = delete;
  DecodeStep& operator=(const DecodeStep&) = delete;
  /// The next ids [batch] on the host: device_step() and the copy out.
  at::Tensor run();
  /// The next ids [batch] on the device: the forward pass and the argmax
  /// (no host sync: a CUDA graph can capture it).
  at::Tensor device_step();

 private:
  const LlamaModel& model_;
  std::unique_ptr<Cache> cache_;
  std::unique_ptr<CacheBackend> backend_;
  at::Tensor ids_, positions_;
  int64_t attend_ = 0;
};

/// Counts the device side of one greedy decode step of `model` on `path`
/// (plain or fused): DecodeStep::run(), after one uncounted run (lazily
/// built state is not the steady step's). Its inputs are already on the
/// device, so on the CPU the one host copy counted is the ids' (OpCounter's
/// proxy).
StepCount count_decode_step(const LlamaModel& model, DecodePath path, int64_t batch,
                            int64_t context);

/// The sampling head's share of a step (Note [sampling head]): one pick of
/// every row of `batch` with settings `s` on random logits [batch, vocab]
/// on `device`, then the fetch of every row's result, counted by
/// OpCounter after a first, uncounted pick. `outside` holds its launches.
/// `fused` false: the tensor composition (SamplingHeadOptions::fused).
StepCount count_head_pick(int64_t vocab, int64_t batch, const Sampling& s, const at::Device& device,
                          bool fused = true);

}  // namespace statickv::reference
