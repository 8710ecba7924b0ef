// ChainedDecode (reference/engine/include/statickv/engine/chained_decode.hpp):
// Note [chained step].

#include <statickv/engine/chained_decode.hpp>

#include "decode_setup.hpp"

#include <ATen/CPUGeneratorImpl.h>

#include <algorithm>

namespace statickv::reference {

namespace {

// The positions a chain's cache holds: the prompt and its steps, at least
// two (a capture's two warm-up steps run past the prompt too).
int64_t chain_length(const ChainedOptions& o) { return o.prompt + std::max<int64_t>(o.steps, 2); }

void check_options(const LlamaModel& model, const ChainedOptions& o) {
  TORCH_CHECK(o.batch >= 1, "batch: expected >= 1 but got ", o.batch);
  TORCH_CHECK(o.prompt >= 1, "prompt: expected >= 1 token but got ", o.prompt);
  TORCH_CHECK(o.steps >= 1, "steps: expected >= 1 but got ", o.steps);
  TORCH_CHECK(o.path != DecodePath::kAuto,
              "path: expected plain or fused (resolve auto with LlamaModel::resolve_path) but got "
              "auto");
  const int64_t most = model.config().max_position_embeddings;
  TORCH_CHECK(chain_length(o) <= most, "prompt + steps: expected at most ", most,
              " (the model's max_position_embeddings; steps counts at least 2) but got ", o.prompt,
              " + ", o.steps);
}

// Random prompt ids [batch, prompt], row-major, drawn on the CPU from `seed`.
std::vector<int64_t> random_prompts(int64_t batch, int64_t prompt, int64_t vocab, uint64_t seed) {
  at::Generator gen = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor ids =
      at::randint(0, vocab, {batch, prompt}, gen, at::TensorOptions().dtype(at::kLong));
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
}

}  // namespace

ChainedDecode::ChainedDecode(const LlamaModel& model, const ChainedOptions& options)
    : model_(model), options_(options) {
  check_options(model, options);
  c10::InferenceMode inference;
  const int64_t b = options_.batch, p = options_.prompt;
  const at::Device device = model.device();
  attend_ = chain_length(options_);
  cache_ = decode_cache(model, b, attend_);
  backend_ = std::make_unique<CacheBackend>(*cache_, AttentionKernel::kSdpa, options_.path);
  SamplingHeadOptions ho;
  ho.max_batch = b;
  ho.vocab_size = model.config().vocab_size;
  ho.device = device;
  ho.max_logprobs = 0;  // no top-N alternatives: nothing the loop reads
  head_ = std::make_unique<SamplingHead>(ho);
  prompt_ = random_prompts(b, p, ho.vocab_size, options_.seed);
  const auto longs = at::TensorOptions().dtype(at::kLong);
  const at::Tensor ids = at::tensor(prompt_, longs).view({b, p}).to(device);
  const at::Tensor pos = at::arange(p, longs).expand({b, p}).contiguous().to(device);
  const at::Tensor last = prefill_chunks(model, *cache_, *backend_, ids, pos, Logits::kLast);
  first_ids_ = at::empty({b, 1}, longs.device(device));
  ids_ = at::empty_like(first_ids_);
  positions_ = at::empty_like(first_ids_);
  takes_ = at::ones({b}, longs.device(device));
  rewind();
  head_->pick(last, std::vector<bool>(static_cast<size_t>(b), true));
  head_->copy_picks(first_ids_.view({b}));
  rewind();
  if (options_.graphs && GraphRunner::captures(true, device)) {
#ifdef STATICKV_HAS_CUDA
    graph_ = detail::capture_cuda_graph(device, detail::new_graph_pool(), /*warmup_runs=*/2,
                                        [this] { run_step(); });
    rewind();
#endif
  }
}

ChainedDecode::~ChainedDecode() = default;

std::vector<int64_t> ChainedDecode::prompt(int64_t r) const {
  TORCH_CHECK(r >= 0 && r < options_.batch, "r: expected a row in [0, ", options_.batch,
              ") but got ", r);
  const auto row = prompt_.begin() + r * options_.prompt;
  return std::vector<int64_t>(row, row + options_.prompt);
}

void ChainedDecode::rewind() {
  c10::InferenceMode inference;  // the buffers are inference tensors
  for (int64_t r = 0; r < options_.batch; ++r) head_->set_row(r, options_.sampling, prompt(r), {});
  ids_.copy_(first_ids_);
  positions_.fill_(options_.prompt);
  taken_ = 0;
}

void ChainedDecode::step() {
  TORCH_CHECK(taken_ < options_.steps, "step: expected at most ", options_.steps,
              " steps after rewind() (the cache holds prompt + steps) but this is step ",
              taken_ + 1);
  ++taken_;
  if (graph_) {
    graph_->replay();
    return;
  }
  run_step();
}

std::function<void()> ChainedDecode::body() {
  return [this] { run_step(); };
}

// Note [chained step]: forward, the head's pick of every row, and the
// pick and the next position written back in place; no host value.
void ChainedDecode::run_step() {
  c10::InferenceMode inference;
  const int64_t b = options_.batch;
  const at::Tensor logits = model_.forward(ids_, positions_, *backend_, attend_, Logits::kAll);
  head_->pick_all(logits.view({b, logits.size(-1)}), takes_);
  head_->copy_picks(ids_.view({b}));
  positions_.add_(1);
}

}  // namespace statickv::reference
