// Engine (engine.hpp): the cache, backends and runners Generator and
// Scheduler share, built in one place; the one packer of step inputs and
// the one runner-or-eager dispatch.

#include <statickv/engine/engine.hpp>

#include <statickv/engine/speculative.hpp>

#include <algorithm>
#include <utility>

namespace statickv::reference {

CacheKind parse_cache_kind(const std::string& name) {
  if (name == "static") return CacheKind::kStatic;
  if (name == "hybrid") return CacheKind::kHybrid;
  if (name == "dynamic") return CacheKind::kDynamic;
  TORCH_CHECK(false, "cache: expected static, hybrid or dynamic but got ", name);
}

const char* to_string(CacheKind kind) {
  switch (kind) {
    case CacheKind::kStatic:
      return "static";
    case CacheKind::kHybrid:
      return "hybrid";
    case CacheKind::kDynamic:
      return "dynamic";
  }
  return "unknown";
}

namespace {

/// Each row's newest logits [b, vocab] from a pass's output ([b, vocab],
/// or [b, 1, vocab] from the decode runner).
at::Tensor newest_logits(const at::Tensor& out) { return out.dim() == 3 ? out.select(1, -1) : out; }

}  // namespace

StepPacker::StepPacker(int64_t b, int64_t q)
    : b_(b), q_(q), ids_(static_cast<size_t>(b * q), 0), positions_(ids_.size(), -1) {}

void StepPacker::put(int64_t r, int64_t t, int64_t id, int64_t position) {
  TORCH_CHECK(r >= 0 && r < b_, "r: expected a row in [0, ", b_, ") but got ", r);
  TORCH_CHECK(t >= 0 && t < q_, "t: expected a column in [0, ", q_, ") but got ", t);
  TORCH_CHECK(position >= 0, "position: expected >= 0 (padding is what put leaves) but got ",
              position);
  const auto i = static_cast<size_t>(r * q_ + t);
  ids_[i] = id;
  positions_[i] = position;
  attend_ = std::max(attend_, position + 1);
  ++real_;
}

void StepPacker::put_run(int64_t r, const std::vector<int64_t>& seq, int64_t from, int64_t n) {
  TORCH_CHECK(n >= 0 && n <= q_, "n: expected 0 <= n <= the packer's ", q_, " columns but got ", n);
  TORCH_CHECK(n == 0 || (from >= 0 && from + n <= static_cast<int64_t>(seq.size())),
              "from: expected seq[from, from + n) within its ", seq.size(),
              " tokens but got from=", from, " n=", n);
  for (int64_t t = 0; t < n; ++t) put(r, t, seq[static_cast<size_t>(from + t)], from + t);
}

StepInputs StepPacker::take() {
  const auto opts = at::TensorOptions().dtype(at::kLong);
  StepInputs in;
  in.ids = at::tensor(ids_, opts).view({b_, q_});
  in.positions = at::tensor(positions_, opts).view({b_, q_});
  in.attend = attend_;
  in.real = real_;
  *this = StepPacker(0, 0);
  return in;
}

namespace {

/// A draft model's distributions [b, k, vocab] as a verification step's
/// [b, k + 1, vocab] input: draft t at column t + 1, zeros in column 0 and
/// wherever no draft was drawn (rows without drafts accept none).
at::Tensor draft_grid(const StepInputs& in, const at::Device& device, int64_t vocab) {
  const int64_t b = in.ids.size(0), k1 = in.ids.size(1);
  const auto options = at::TensorOptions().dtype(at::kFloat).device(device);
  if (!in.draft_q.defined()) return at::zeros({b, k1, vocab}, options);
  return at::cat({at::zeros({b, 1, vocab}, options), in.draft_q.to(options)}, 1);
}

}  // namespace

at::Tensor run_pass(const LlamaModel& model, GraphRunner* runner, AttentionBackend& backend,
                    const StepInputs& in, Logits which, RunnerInputs inputs) {
  model.check_same_step(in.ids, in.attend, which);  // under TP: from the host inputs
  const at::Device device = model.device();
  // On the CPU the host inputs are used as they are; to a GPU they go from
  // pinned memory without waiting for the stream (a pageable copy syncs).
  const auto on_device = [&](const at::Tensor& t) {
    if (t.device() == device) return t;
    return device.is_cuda() ? t.pin_memory().to(device, /*non_blocking=*/true) : t.to(device);
  };
  const at::Tensor ids = on_device(in.ids), pos = on_device(in.positions);
  if (runner && inputs != RunnerInputs::kTokens) {
    // The head's takes ride in every column of their row (the step reads column 0).
    const at::Tensor takes = in.takes.defined() ? in.takes : at::zeros_like(in.ids.select(1, 0));
    const at::Tensor grid = takes.view({-1, 1}).expand_as(in.ids).contiguous();
    std::vector<at::Tensor> args = {ids, pos, on_device(grid)};
    if (inputs == RunnerInputs::kTakesAndDrafts) {
      args.push_back(draft_grid(in, device, model.config().vocab_size));
    }
    return runner->run(args, in.attend)[0];
  }
  if (runner) return runner->run({ids, pos}, in.attend)[0];
  return model.forward(ids, pos, backend, in.attend, which);
}

Engine::Engine(const LlamaModel& model, const EngineOptions& options, SamplingHead* head)
    : model_(model), options_(options), head_(head) {
  const EngineOptions& o = options_;
  TORCH_CHECK(o.cache != CacheKind::kDynamic,
              "cache: expected static or hybrid (one preallocated cache) but got dynamic");
  TORCH_CHECK(o.cache != CacheKind::kStatic || !model.config().has_sliding(),
              "cache: expected hybrid for a model with sliding-window layers but got static");
  check_draft_model(model, o.draft_model, o.speculate);
  CacheConfig config = model.cache_config(o.max_batch, o.max_len);
  config.max_chunk = o.max_chunk;
  config.kv_storage = o.kv_storage;
  config.host_offload = o.host_offload;
  options_.path = model.resolve_path(o.path, config);
  model.check_path(o.path);
  if (o.cache == CacheKind::kStatic) {
    cache_ = std::make_unique<StaticCache>(config);
  } else {
    cache_ = std::make_unique<HybridCache>(config);
  }
  const int64_t max_chunk = cache_->config().effective_max_chunk();
  chunk_ = o.prefill_chunk > 0 ? std::min(o.prefill_chunk, max_chunk) : max_chunk;
  TORCH_CHECK(o.speculate + 1 <= max_chunk, "speculate: expected speculate + 1 = ", o.speculate + 1,
              " query tokens per verification step to fit the cache's max_chunk=", max_chunk,
              " (the bucket serving prefill_chunk=", chunk_,
              "; raise prefill_chunk) but got speculate=", o.speculate);
  if (!options_.prompt_buckets) options_.prompt_buckets = ShapeBuckets::powers_of_two(chunk_);
  if (!options_.attend_buckets) {
    options_.attend_buckets =
        ShapeBuckets::powers_of_two(o.max_len, std::min<int64_t>(64, o.max_len));
  }
  check_buckets();
  backend_ = std::make_unique<CacheBackend>(*cache_, o.kernel, o.path);
  if (o.draft_model) {
    // Any layer types; the target's max_chunk, so the draft's rings take a
    // prefill chunk and a verification step's rollback is exact in its rings
    // too (Note [ring rollback]).
    CacheConfig dc = o.draft_model->cache_config(o.max_batch, o.max_len);
    dc.max_chunk = max_chunk;
    draft_cache_ = std::make_unique<HybridCache>(dc);
    draft_backend_ = std::make_unique<CacheBackend>(*draft_cache_, o.kernel);
  }
  resolve_head_in_step();
  if (o.bucketed) build_runners();
}

void Engine::resolve_head_in_step() {
  const EngineOptions& o = options_;
  if (!o.head_in_step) {
    head_in_step_ = head_ && o.bucketed && GraphRunner::captures(o.cuda_graphs, model_.device());
    return;
  }
  TORCH_CHECK(!*o.head_in_step || o.bucketed,
              "head_in_step: expected bucketed=true (the head runs inside a runner's step) with "
              "head_in_step=true but got bucketed=false");
  TORCH_CHECK(!*o.head_in_step || head_ != nullptr,
              "head_in_step: expected an Engine built with a SamplingHead with head_in_step=true "
              "but got none");
  head_in_step_ = *o.head_in_step;
}

Engine::~Engine() = default;

void Engine::check_buckets() const {
  const ShapeBuckets& prompt = *options_.prompt_buckets;
  const int64_t max_chunk = cache_->config().effective_max_chunk();
  TORCH_CHECK(prompt.max() >= chunk_, "prompt_buckets: expected a largest bucket >= ", chunk_,
              " (the prefill chunk) but got ", prompt.max());
  // A full chunk pads to round_up(chunk): the cache must take that many.
  const int64_t padded_chunk = prompt.round_up(chunk_, "prompt_buckets");
  TORCH_CHECK(padded_chunk <= max_chunk,
              "prompt_buckets: expected the bucket serving a full chunk of ", chunk_,
              " tokens to be <= ", max_chunk, " (the cache's max_chunk) but got ", padded_chunk);
  TORCH_CHECK(options_.attend_buckets->max() == options_.max_len,
              "attend_buckets: expected a largest bucket of ", options_.max_len,
              " (max_len) but got ", options_.attend_buckets->max());
}

// Bucketed runners: one forward per padded key, replayed as a CUDA graph on
// a GPU; they live as long as the engine, so later calls replay what
// earlier ones captured. Padded rows and tokens carry position -1 and land
// in the scratch slot (Invariant [scratch slot]).
void Engine::build_runners() {
  const EngineOptions& o = options_;
  const int64_t vocab = model_.config().vocab_size;
  picking_ = head_in_step_ ? RunnerInputs::kTakes : RunnerInputs::kTokens;
  verifying_ = !head_in_step_  ? RunnerInputs::kTokens
               : o.draft_model ? RunnerInputs::kTakesAndDrafts
                               : RunnerInputs::kTakes;
  const std::vector<InputSpec> picking = input_specs(picking_, vocab);
  // A picking step ends with the head's pick over each row's newest logits
  // (Note [sampling head]): padded rows take nothing, so warm-up runs and
  // passes without takes change none of the head's state.
  auto step_of = [this](Logits logits) -> GraphRunner::StepFn {
    return [this, logits](const std::vector<at::Tensor>& in, const GraphKey& key) {
      at::Tensor out = model_.forward(in[0], in[1], *backend_, key.attend_len, logits);
      if (picking_ == RunnerInputs::kTakes) {
        head_->pick_all(newest_logits(out), in[2].select(1, 0));
      }
      return std::vector<at::Tensor>{out};
    };
  };
  GraphRunner::Options ro;
  ro.device = model_.device();
  ro.use_graphs = o.cuda_graphs;
  ro.batch_buckets = ShapeBuckets::powers_of_two(o.max_batch);
  ro.attend_buckets = *o.attend_buckets;
  if (o.decode_runner) {
    ro.query_buckets = ShapeBuckets::of({1});
    decode_runner_ = std::make_unique<GraphRunner>(picking, step_of(Logits::kAll), ro);
  }
  if (o.speculate > 0) {
    ro.query_buckets = ShapeBuckets::of({o.speculate + 1});
    verify_runner_ =
        std::make_unique<GraphRunner>(input_specs(verifying_, vocab), verify_step(), ro);
  }
  // Prefill keeps each row's newest logits only: [B, vocab] per key.
  ro.query_buckets = *o.prompt_buckets;
  ro.row_outputs = {0};
  prefill_runner_ = std::make_unique<GraphRunner>(picking, step_of(Logits::kLast), ro);
}

// A runner's inputs: ids and positions; with the head inside its step, each
// row's takes; verifying with a draft model, the drafts' distributions.
std::vector<InputSpec> Engine::input_specs(RunnerInputs inputs, int64_t vocab) {
  std::vector<InputSpec> in = {{"ids", at::kLong, {}, 0}, {"positions", at::kLong, {}, -1}};
  if (inputs == RunnerInputs::kTokens) return in;
  in.push_back({"takes", at::kLong, {}, 0});
  if (inputs == RunnerInputs::kTakesAndDrafts) in.push_back({"q", at::kFloat, {vocab}, 0.0});
  return in;
}

// A verification step: every token's logits, then, with the head inside
// it, the acceptance rule over the drafts the ids hold (Note [sampling
// head]); padded rows take nothing.
GraphRunner::StepFn Engine::verify_step() {
  return [this](const std::vector<at::Tensor>& in, const GraphKey& key) {
    at::Tensor out = model_.forward(in[0], in[1], *backend_, key.attend_len, Logits::kAll);
    if (verifying_ != RunnerInputs::kTokens) {
      const int64_t k = in[0].size(1) - 1;
      const at::Tensor q =
          verifying_ == RunnerInputs::kTakesAndDrafts ? in[3].narrow(1, 1, k) : at::Tensor();
      head_->verify_all(out.to(at::kFloat), in[0], in[1], in[2].select(1, 0), q);
    }
    return std::vector<at::Tensor>{out};
  };
}

GraphRunner* Engine::runner(Pass pass) const {
  switch (pass) {
    case Pass::kPrefill:
      return prefill_runner_.get();
    case Pass::kDecode:
      return decode_runner_ ? decode_runner_.get() : prefill_runner_.get();
    case Pass::kVerify:
      return verify_runner_.get();
  }
  return nullptr;
}

RunnerInputs Engine::runner_inputs(Pass pass) const {
  return pass == Pass::kVerify ? verifying_ : picking_;
}

at::Tensor Engine::run(Pass pass, const StepInputs& in, Logits which) {
  return run_pass(model_, runner(pass), *backend_, in, which, runner_inputs(pass));
}

namespace {

/// A call's takes flags as the int64 [b] host tensor a runner's step reads.
at::Tensor takes_tensor(const std::vector<bool>& takes) {
  return at::tensor(std::vector<int64_t>(takes.begin(), takes.end()),
                    at::TensorOptions().dtype(at::kLong));
}

}  // namespace

at::Tensor Engine::run_and_pick(Pass pass, const StepInputs& in, const std::vector<bool>& takes) {
  TORCH_CHECK(head_ != nullptr, "run_and_pick: expected an Engine built with a SamplingHead");
  TORCH_CHECK(pass != Pass::kVerify,
              "pass: expected kPrefill or kDecode (a row's newest logits) but got kVerify");
  const int64_t b = in.ids.size(0);
  TORCH_CHECK(static_cast<int64_t>(takes.size()) == b, "takes: expected ", b,
              " flags (one per row of ids) but got ", takes.size());
  if (!head_in_step_) {
    at::Tensor logits = newest_logits(run(pass, in, Logits::kLast));
    head_->pick(logits, takes);
    return logits;
  }
  StepInputs with = in;
  with.takes = takes_tensor(takes);
  return newest_logits(run(pass, with, Logits::kLast));
}

at::Tensor Engine::run_and_verify(const StepInputs& in, const DraftSet& drafts,
                                  const std::vector<bool>& takes) {
  TORCH_CHECK(head_ != nullptr, "run_and_verify: expected an Engine built with a SamplingHead");
  const int64_t b = in.ids.size(0), k = in.ids.size(1) - 1;
  TORCH_CHECK(static_cast<int64_t>(takes.size()) == b, "takes: expected ", b,
              " flags (one per row of ids) but got ", takes.size());
  head_->check_verify(k, drafts, takes);  // before the pass writes the cache, either way
  if (!head_in_step_) {
    at::Tensor logits = run(Pass::kVerify, in, Logits::kAll);
    head_->verify(logits.to(at::kFloat), drafts, takes);
    return logits;
  }
  StepInputs with = in;
  with.takes = takes_tensor(takes);
  with.draft_q = drafts.q;
  return run(Pass::kVerify, with, Logits::kAll);
}

at::Tensor Engine::run_draft(const StepInputs& in) {
  TORCH_CHECK(draft_backend_ != nullptr, "run_draft: expected an engine with a draft model");
  return run_pass(*options_.draft_model, nullptr, *draft_backend_, in, Logits::kLast);
}

void Engine::warm_up() {
  for (GraphRunner* r : {prefill_runner_.get(), decode_runner_.get(), verify_runner_.get()}) {
    if (r) r->capture_all();
  }
}

bool Engine::uses_graphs() const { return prefill_runner_ && prefill_runner_->uses_graphs(); }

}  // namespace statickv::reference
