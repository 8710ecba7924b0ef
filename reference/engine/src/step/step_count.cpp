// DecodeStep and count_decode_step()
// (reference/engine/include/statickv/engine/step_count.hpp).

#include <statickv/engine/step_count.hpp>

#include "decode_setup.hpp"

#include <algorithm>

namespace statickv::reference {

namespace {

// [batch, len] of first, first + 1, ... on `device`.
at::Tensor counting(int64_t batch, int64_t len, int64_t first, const at::Device& device) {
  return at::arange(first, first + len, at::TensorOptions().dtype(at::kLong))
      .expand({batch, len})
      .contiguous()
      .to(device);
}

}  // namespace

DecodeStep::DecodeStep(const LlamaModel& model, DecodePath path, int64_t batch, int64_t context)
    : model_(model) {
  TORCH_CHECK(batch >= 1, "batch: expected >= 1 but got ", batch);
  TORCH_CHECK(context >= 1, "context: expected >= 1 but got ", context);
  c10::InferenceMode inference;
  const at::Device device = model.device();
  cache_ = decode_cache(model, batch, context + 1);
  backend_ = std::make_unique<CacheBackend>(*cache_, AttentionKernel::kSdpa, path);
  const int64_t vocab = model.config().vocab_size;
  prefill_chunks(model, *cache_, *backend_, counting(batch, context, 1, device).remainder(vocab),
                 counting(batch, context, 0, device), Logits::kNone);
  ids_ = counting(batch, 1, 7, device).remainder(vocab);
  positions_ = counting(batch, 1, context, device);
  attend_ = context + 1;
}

DecodeStep::~DecodeStep() = default;

at::Tensor DecodeStep::device_step() {
  c10::InferenceMode inference;
  // attend_len: one past the step's position, as a decoding loop passes it.
  return model_.forward(ids_, positions_, *backend_, attend_, Logits::kLast).argmax(-1);
}

at::Tensor DecodeStep::run() { return device_step().to(at::kCPU); }

StepCount count_decode_step(const LlamaModel& model, DecodePath path, int64_t batch,
                            int64_t context) {
  DecodeStep step(model, path, batch, context);
  step.run();
  StepCount out;
  {
    OpCounter counter(model.device());
    step.run();
    out.counts = counter.counts();
  }
  out.layers = model.config().num_hidden_layers;
  out.in_layers = out.counts.launches_in(kLayerRegion);
  out.outside = out.counts.launches - out.in_layers;
  out.host_copies = out.counts.host_copies;
  out.syncs = out.counts.syncs;
  return out;
}

StepCount count_head_pick(int64_t vocab, int64_t batch, const Sampling& s, const at::Device& device,
                          bool fused) {
  c10::InferenceMode inference;
  SamplingHeadOptions o;
  o.max_batch = batch;
  o.vocab_size = vocab;
  o.device = device;
  o.fused = fused;
  SamplingHead head(o);
  for (int64_t r = 0; r < batch; ++r) head.set_row(r, s, {1, 2, 3}, {0});
  const at::Tensor logits = at::randn({batch, vocab}, at::TensorOptions().device(device));
  const std::vector<bool> takes(static_cast<size_t>(batch), true);
  head.pick(logits, takes);
  head.fetch(batch);
  StepCount out;
  {
    OpCounter counter(device);
    head.pick(logits, takes);
    head.fetch(batch);
    out.counts = counter.counts();
  }
  out.outside = out.counts.launches;
  out.host_copies = out.counts.host_copies;
  out.syncs = out.counts.syncs;
  return out;
}

}  // namespace statickv::reference
