// The attention backends: the cache (one prepare() per pass) and the
// DynamicCache baseline (torch::cat growth, Hugging Face's DynamicCache).

#include <statickv/attention.hpp>
#include <statickv/detail/checks.hpp>
#include <statickv/kernel_switches.hpp>
#include <statickv/model/backends.hpp>
#include <statickv/rotary.hpp>

namespace statickv::reference {

namespace {

at::Tensor run_kernel(AttentionKernel kernel, const at::Tensor& q, const at::Tensor& k,
                      const at::Tensor& v, const at::Tensor& mask, double softcap) {
  if (kernel == AttentionKernel::kSdpa && softcap == 0) return sdpa_attention(q, k, v, mask);
  return softcapped_attention(q, k, v, mask, softcap);
}

}  // namespace

void check_tokens(const char* name, const at::Tensor& t) {
  detail::check_rank(name, t, 2, "int64 [b, q]");
  detail::check_dtype(name, t, at::kLong);
}

const char* to_string(DecodePath path) {
  switch (path) {
    case DecodePath::kFused:
      return "fused";
    case DecodePath::kAuto:
      return "auto";
    case DecodePath::kPlain:
      break;
  }
  return "plain";
}

DecodePath parse_decode_path(const std::string& name, const char* flag) {
  if (name == "plain") return DecodePath::kPlain;
  if (name == "fused") return DecodePath::kFused;
  if (name == "auto") return DecodePath::kAuto;
  TORCH_CHECK(false, flag, ": expected auto, plain or fused but got '", name, "'");
}

at::Tensor AttentionBackend::attend_rotary(int64_t layer, const at::Tensor& query,
                                           const at::Tensor& key, const at::Tensor& value,
                                           const at::Tensor& cos, const at::Tensor& sin) {
  return attend(layer, apply_rotary(query, cos, sin), apply_rotary(key, cos, sin), value);
}

CacheBackend::CacheBackend(Cache& cache, AttentionKernel kernel, DecodePath path)
    : cache_(cache), kernel_(kernel), path_(path) {
  TORCH_CHECK(path_ != DecodePath::kAuto,
              "CacheBackend path: expected plain or fused (resolve auto with "
              "LlamaModel::resolve_path) but got auto");
  if (path_ == DecodePath::kFused) detail::check_rotary_config(cache_.config());
}

void CacheBackend::begin(const at::Tensor& positions, int64_t attend_len) {
  // Positions were checked at the door (LlamaModel::forward: int64 [b, q]
  // as ids); prepare() checks them against the cache. Drop the last pass's
  // plan first, so prepare() need not build the masks it never used (Note
  // [lazy masks]).
  step_.reset();
  step_ = std::make_unique<StepPlan>(cache_.prepare(positions, positions.size(0), attend_len));
}

at::Tensor CacheBackend::attend(int64_t layer, const at::Tensor& query, const at::Tensor& key,
                                const at::Tensor& value) {
  TORCH_CHECK(step_ != nullptr, "CacheBackend: expected begin() before attend()");
  return attend_views(layer, query, cache_.update(layer, key, value, *step_));
}

at::Tensor CacheBackend::attend_rotary(int64_t layer, const at::Tensor& query,
                                       const at::Tensor& key, const at::Tensor& value,
                                       const at::Tensor& cos, const at::Tensor& sin) {
  // Note [kernel switches]: with rotary_write off, a GPU rotates with
  // LibTorch ops and writes through update().
  if (path_ != DecodePath::kFused || (query.is_cuda() && !kernel_enabled("rotary_write"))) {
    return AttentionBackend::attend_rotary(layer, query, key, value, cos, sin);
  }
  TORCH_CHECK(step_ != nullptr, "CacheBackend: expected begin() before attend_rotary()");
  const RotaryKV out = rotary_update(cache_, layer, query, key, value, cos, sin, *step_);
  return attend_views(layer, out.query, out.kv);
}

// The cache's own entry point picks the fastest exact path (mask-free
// varlen on CUDA fp16/bf16 full layers, else sdpa with the additive mask);
// the reference kernel takes the bool mask; softcapped_attention serves
// soft-capped layers.
at::Tensor CacheBackend::attend_views(int64_t layer, const at::Tensor& query, const KV& kv) const {
  if (kernel_ == AttentionKernel::kSdpa && softcap_ == 0) {
    return cache_.attend(layer, query, kv, *step_);
  }
  return run_kernel(kernel_, query, kv.keys, kv.values, step_->mask(layer), softcap_);
}

DynamicCache::DynamicCache(const ModelConfig& config, AttentionKernel kernel)
    : sliding_window_(config.has_sliding() ? config.sliding_window : 0), kernel_(kernel) {
  for (int64_t l = 0; l < config.num_hidden_layers; ++l) {
    windows_.push_back(config.layer_type(l) == LayerType::kSliding ? config.sliding_window : 0);
  }
  keys_.resize(windows_.size());
  values_.resize(windows_.size());
}

void DynamicCache::begin(const at::Tensor& positions, int64_t /*attend_len*/) {
  check_tokens("DynamicCache.positions", positions);
  TORCH_CHECK(!positions_.defined() || positions_.size(0) == positions.size(0),
              "DynamicCache.positions: expected ", positions_.defined() ? positions_.size(0) : 0,
              " rows (fixed for the cache's life) but got ", positions.size(0));
  step_positions_ = positions;
  positions_ = positions_.defined() ? at::cat({positions_, positions}, 1) : positions;
  // One mask per window per pass, as Hugging Face builds them.
  const at::Tensor kpos = positions_.unsqueeze(1);       // [b, 1, T]
  const at::Tensor qpos = step_positions_.unsqueeze(2);  // [b, q, 1]
  full_mask_ = kpos.le(qpos).logical_and_(kpos.ge(0)).logical_and_(qpos.ge(0)).unsqueeze(1);
  if (sliding_window_ > 0) {
    sliding_mask_ = full_mask_.logical_and(qpos.sub(kpos).lt(sliding_window_).unsqueeze(1));
  }
}

at::Tensor DynamicCache::attend(int64_t layer, const at::Tensor& query, const at::Tensor& key,
                                const at::Tensor& value) {
  TORCH_CHECK(layer >= 0 && layer < static_cast<int64_t>(windows_.size()),
              "layer: expected an index in [0, ", windows_.size(), ") but got ", layer);
  TORCH_CHECK(step_positions_.defined(), "DynamicCache: expected begin() before attend()");
  at::Tensor& k = keys_[static_cast<size_t>(layer)];
  at::Tensor& v = values_[static_cast<size_t>(layer)];
  k = k.defined() ? at::cat({k, key}, 2) : key.contiguous();
  v = v.defined() ? at::cat({v, value}, 2) : value.contiguous();
  const bool sliding = windows_[static_cast<size_t>(layer)] > 0;
  return run_kernel(kernel_, query, k, v, sliding ? sliding_mask_ : full_mask_, softcap_);
}

int64_t DynamicCache::memory_bytes() const {
  int64_t total = positions_.defined() ? positions_.nbytes() : 0;
  for (const auto& t : keys_) total += t.defined() ? t.nbytes() : 0;
  for (const auto& t : values_) total += t.defined() ? t.nbytes() : 0;
  return total;
}

void DynamicCache::reset() {
  for (auto& t : keys_) t = at::Tensor();
  for (auto& t : values_) t = at::Tensor();
  positions_ = at::Tensor();
  step_positions_ = at::Tensor();
  full_mask_ = at::Tensor();
  sliding_mask_ = at::Tensor();
}

}  // namespace statickv::reference
