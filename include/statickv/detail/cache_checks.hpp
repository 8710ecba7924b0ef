#pragma once
// Cache's checks (detail/cache_impl.hpp lists the bodies): every entry
// point's argument checks, run before anything is written (Invariant
// [checked before written], docs/errors.md). Included by cache_impl.hpp
// only.

#include <statickv/cache.hpp>
#include <statickv/detail/checks.hpp>
#include <statickv/detail/rows.hpp>
#include <statickv/detail/storage.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <string>

namespace statickv {

// ---------------------------------------------------------------- checks

STATICKV_CACHE_FN void Cache::check_current(const StepPlan& step) const {
  TORCH_CHECK(step.owner_ == this,
              "step: expected a StepPlan made by this cache's prepare() but got ",
              step.owner_ == nullptr ? "a default-constructed one" : "one of another cache");
  TORCH_CHECK(step.generation_ == generation_,
              "step: expected the cache's current step (generation ", generation_,
              ") but got a stale one (generation ", step.generation_,
              "); call prepare() again after reset, row operations or another prepare()");
}

// update()'s arguments (and write_target()'s): the current step and
// keys/values of its shape, none sharing memory with the buffers.
STATICKV_CACHE_FN void Cache::check_update(int64_t layer, const at::Tensor& key,
                                           const at::Tensor& value, const StepPlan& step) const {
  check_mutable("update");
  check_layer(layer);
  check_current(step);
  const std::vector<int64_t> shape = {step.live_batch_, config_.num_kv_heads, step.query_len_,
                                      config_.head_dim};
  const at::IntArrayRef expected(shape);
  detail::check_tensor("key", key, config_.dtype, config_.device);
  detail::check_tensor("value", value, config_.dtype, config_.device);
  TORCH_CHECK(key.sizes() == expected,
              "key: expected shape [live_batch, kv_heads, q, head_dim] = ", expected, " but got ",
              key.sizes());
  TORCH_CHECK(value.sizes() == expected,
              "value: expected shape [live_batch, kv_heads, q, head_dim] = ", expected, " but got ",
              value.sizes());
  check_source("key", key, layer);
  check_source("value", value, layer);
}

// attend()'s arguments: the current step, the views update() returned
// for this layer, queries of the step's shape.
STATICKV_CACHE_FN void Cache::check_attend(int64_t layer, const at::Tensor& query, const KV& kv,
                                           const StepPlan& step) const {
  check_layer(layer);
  check_current(step);
  const int64_t b = step.live_batch_;
  detail::check_tensor("query", query, config_.dtype, config_.device);
  detail::check_rank("query", query, 4, "[live_batch, heads, q, head_dim]");
  TORCH_CHECK(
      query.size(0) == b && query.size(2) == step.query_len_ && query.size(3) == config_.head_dim,
      "query: expected shape [live_batch, heads, q, head_dim] = [", b, ", heads, ", step.query_len_,
      ", ", config_.head_dim, "] but got ", query.sizes());
  TORCH_CHECK(query.size(1) >= 1 && query.size(1) % config_.num_kv_heads == 0,
              "query: expected heads to be a multiple of kv_heads=", config_.num_kv_heads,
              " but got ", query.size(1));
  const std::vector<int64_t> shape = {b, config_.num_kv_heads, step.view_len(layer),
                                      config_.head_dim};
  storage_->check_views(layer, step);
  const KV buffers = storage_->view_buffers(layer);
  for (const auto& [name, view, buffer] :
       {std::make_tuple("kv.keys", kv.keys, buffers.keys),
        std::make_tuple("kv.values", kv.values, buffers.values)}) {
    TORCH_CHECK(view.defined() && view.is_alias_of(buffer) &&
                    view.sizes() == at::IntArrayRef(shape) && view.strides() == buffer.strides() &&
                    view.storage_offset() == buffer.storage_offset(),
                name, ": expected the view update(", layer, ", ...) returned for this step, ",
                at::IntArrayRef(shape), " over layer ", layer, "'s buffer, but got ",
                detail::shape_of(view),
                view.defined() && !view.is_alias_of(buffer) ? " not a view of that buffer" : "");
  }
}

STATICKV_CACHE_FN AttentionPath Cache::resolve_path(int64_t layer, const at::Tensor& query,
                                                    AttentionPath path) const {
  if (path == AttentionPath::kMasked) return path;
  const char* refusal = varlen_refusal(layer, query);
  TORCH_CHECK(path != AttentionPath::kVarlen || refusal == nullptr,
              "path: expected a layer, device and dtype the varlen path serves but got ",
              refusal == nullptr ? "" : refusal, " (layer ", layer, ")");
  return refusal == nullptr ? AttentionPath::kVarlen : AttentionPath::kMasked;
}

STATICKV_CACHE_FN void Cache::check_layer(int64_t layer) const {
  TORCH_CHECK(layer >= 0 && layer < config_.num_layers, "layer: expected an index in [0, ",
              config_.num_layers, ") but got ", layer);
}

STATICKV_CACHE_FN void Cache::check_row(const char* name, int64_t row) const {
  TORCH_CHECK(row >= 0 && row < config_.max_batch, name,
              ": expected a row in [0, max_batch=", config_.max_batch, ") but got ", row);
}

// A source that shares memory with the buffer it is written into would be
// read and written by one index_copy_ (a race on a GPU, and the later
// write sees the earlier one on a CPU). A source that requires grad would
// chain every later write into one autograd graph that holds every step's
// activations: memory that grows for the life of the cache.
STATICKV_CACHE_FN void Cache::check_source(const char* name, const at::Tensor& t,
                                           int64_t layer) const {
  const at::Tensor& k = storage_->stored_keys(layer);
  const at::Tensor& v = storage_->stored_values(layer);
  TORCH_CHECK(!t.is_alias_of(k) && !t.is_alias_of(v), name,
              ": expected a tensor that does not share memory with the cache's buffers of layer ",
              layer, " but got a view of them");
  TORCH_CHECK(!(t.requires_grad() && c10::GradMode::is_enabled()), name,
              ": expected a tensor that does not require grad (run decode under "
              "at::NoGradGuard or c10::InferenceMode) but got requires_grad=true");
}

STATICKV_CACHE_FN const Cache::LayerGroup& Cache::group_of(int64_t layer) const {
  check_layer(layer);
  return groups_[static_cast<size_t>((*layer_group_)[static_cast<size_t>(layer)])];
}

// Row arguments checked on the host (detail::host_rows), then on the
// cache's device.
STATICKV_CACHE_FN at::Tensor Cache::device_rows(const char* name, const at::Tensor& rows,
                                                bool allow_duplicates) const {
  return detail::host_rows(name, rows, config_.max_batch, allow_duplicates).to(config_.device);
}

// Only for host-resident positions: rejects values that cannot be stored
// or seen, naming the first offending entry.
STATICKV_CACHE_FN void Cache::check_position_values(const at::Tensor& cache_position,
                                                    int64_t attend) const {
  const at::Tensor pos = cache_position.dim() == 1 ? cache_position.unsqueeze(0).contiguous()
                                                   : cache_position.contiguous();
  const bool has_full = config_.has_type(LayerType::kFull);
  const bool has_sliding = config_.has_type(LayerType::kSliding);
  const int64_t limit = has_full ? attend : config_.max_len;
  auto acc = pos.accessor<int64_t, 2>();
  for (int64_t r = 0; r < pos.size(0); ++r) {
    int64_t lo = INT64_MAX;
    int64_t hi = -1;
    for (int64_t t = 0; t < pos.size(1); ++t) {
      const int64_t p = acc[r][t];
      if (p < 0) continue;  // padding
      TORCH_CHECK(p < limit, "cache_position[", r, ", ", t, "]: expected a position < ",
                  has_full && limit < config_.max_len ? "attend_len=" : "max_len=", limit,
                  " but got ", p);
      lo = std::min(lo, p);
      hi = std::max(hi, p);
    }
    if (has_sliding && hi >= 0) {
      TORCH_CHECK(hi - lo < config_.effective_max_chunk(), "cache_position[", r,
                  "]: expected the row's positions to span at most max_chunk=",
                  config_.effective_max_chunk(), " (sliding layers) but got ", lo, "..", hi);
    }
  }
}

STATICKV_CACHE_FN void Cache::check_rollback(const at::Tensor& new_lengths) const {
  check_mutable("rollback");
  detail::check_tensor("new_lengths", new_lengths, at::kLong, config_.device);
  detail::check_rank("new_lengths", new_lengths, 1, "[live_batch]");
  TORCH_CHECK(new_lengths.numel() >= 1 && new_lengths.numel() <= config_.max_batch,
              "new_lengths: expected between 1 and max_batch=", config_.max_batch,
              " entries but got ", new_lengths.numel());
}

// Host-resident new lengths only: each in [0, seq_length], and, for a
// ring that can wrap, Note [ring rollback]: the window - 1 positions
// before the new length (the next query's window) must still be stored.
STATICKV_CACHE_FN void Cache::check_rollback_values(const at::Tensor& new_lengths) const {
  const at::Tensor host = new_lengths.contiguous();
  const at::Tensor seq = seq_lengths_.to(at::kCPU);
  const int64_t* v = host.data_ptr<int64_t>();
  for (int64_t r = 0; r < host.numel(); ++r) {
    const int64_t len = seq.data_ptr<int64_t>()[r];
    TORCH_CHECK(v[r] >= 0 && v[r] <= len, "new_lengths[", r,
                "]: expected a length in [0, seq_length=", len, "] but got ", v[r]);
  }
  for (const LayerGroup& g : groups_) {
    const int64_t window = g.policy->window();
    const int64_t cap = g.policy->capacity();
    if (window == 0 || cap >= config_.max_len) continue;  // never overwrites
    const at::Tensor stored = g.slot_positions.to(at::kCPU);
    auto acc = stored.accessor<int64_t, 2>();
    for (int64_t r = 0; r < host.numel(); ++r) {
      for (int64_t p = std::max<int64_t>(0, v[r] - window + 1); p < v[r]; ++p) {
        TORCH_CHECK(acc[r][p % cap] == p, "new_lengths[", r, "]: expected a rollback a ",
                    "sliding ring of capacity ", cap, " can take back exactly (at most ",
                    "max_chunk=", config_.effective_max_chunk(), " positions past the newest ",
                    "ever written; Note [ring rollback]) but got ", v[r], ", whose window ",
                    "needs position ", p, ", already overwritten");
      }
    }
  }
}

// Every check of prepare()'s arguments, before anything is computed.
STATICKV_CACHE_FN void Cache::check_prepare(const at::Tensor& cache_position, int64_t live_batch,
                                            int64_t attend_len) const {
  check_mutable("prepare");
  const int64_t max_batch = config_.max_batch;
  TORCH_CHECK(live_batch >= 1 && live_batch <= max_batch,
              "live_batch: expected a value in [1, max_batch=", max_batch, "] but got ",
              live_batch);
  detail::check_tensor("cache_position", cache_position, at::kLong, config_.device);
  TORCH_CHECK(cache_position.dim() == 1 || cache_position.dim() == 2,
              "cache_position: expected shape [q] or [live_batch, q] but got ",
              cache_position.sizes());
  TORCH_CHECK(cache_position.dim() == 1 || cache_position.size(0) == live_batch,
              "cache_position: expected ", live_batch, " rows (live_batch) but got shape ",
              cache_position.sizes());
  const int64_t q = cache_position.size(-1);
  TORCH_CHECK(q >= 1 && q <= config_.effective_max_chunk(),
              "cache_position: expected between 1 and max_chunk=", config_.effective_max_chunk(),
              " positions per row but got ", q);
  TORCH_CHECK(attend_len == -1 || (attend_len >= 1 && attend_len <= config_.max_len),
              "attend_len: expected -1 (max_len) or a value in [1, max_len=", config_.max_len,
              "] but got ", attend_len);
  TORCH_CHECK(!aliases_bookkeeping(cache_position),
              "cache_position: expected a tensor that does not share memory with the cache "
              "but got a view of its bookkeeping (seq_lengths() or slot_positions()), which "
              "prepare() advances in place, so the positions would change under the caller; "
              "pass a copy, e.g. seq_lengths().narrow(0, 0, b).view({b, 1}).clone()");
}

// copy_from(): every field that shapes the buffers or the bookkeeping must
// agree; the first that differs is named.
STATICKV_CACHE_FN void Cache::check_same_config(const Cache& other) const {
  const CacheConfig& a = config_;
  const CacheConfig& o = other.config_;
  auto same = [](const char* field, const auto& mine, const auto& theirs) {
    TORCH_CHECK(mine == theirs, "other: expected a cache of this cache's config, CacheConfig.",
                field, "=", mine, ", but got ", field, "=", theirs);
  };
  same("num_layers", a.num_layers, o.num_layers);
  same("num_kv_heads", a.num_kv_heads, o.num_kv_heads);
  same("head_dim", a.head_dim, o.head_dim);
  same("max_batch", a.max_batch, o.max_batch);
  same("max_len", a.max_len, o.max_len);
  same("dtype", a.dtype, o.dtype);
  same("device", a.device, o.device);
  for (int64_t l = 0; l < a.num_layers; ++l) {
    TORCH_CHECK(a.layer_type(l) == o.layer_type(l),
                "other: expected a cache of this cache's config, CacheConfig.layer_types[", l,
                "]=", a.layer_type(l), ", but got ", o.layer_type(l));
  }
  same("sliding_window", a.sliding_window, o.sliding_window);
  same("max_chunk (effective)", a.effective_max_chunk(), o.effective_max_chunk());
  same("kv_storage", a.kv_storage, o.kv_storage);
  same("host_offload", a.host_offload, o.host_offload);
}

STATICKV_CACHE_FN bool Cache::aliases_bookkeeping(const at::Tensor& t) const {
  if (t.is_alias_of(seq_lengths_)) return true;
  for (const LayerGroup& g : groups_) {
    if (t.is_alias_of(g.slot_positions)) return true;
  }
  return false;
}

// A cache built under c10::InferenceMode holds inference tensors, which
// LibTorch refuses to modify outside it; say so before anything runs
// instead of failing halfway through an entry point.
STATICKV_CACHE_FN void Cache::check_mutable(const char* entry_point) const {
  TORCH_CHECK(!seq_lengths_.is_inference() || c10::InferenceMode::is_enabled(), entry_point,
              ": expected c10::InferenceMode to be on, since this cache was built under it "
              "(its buffers are inference tensors, which LibTorch only modifies in "
              "InferenceMode), but it is off; call every cache operation under "
              "c10::InferenceMode, or build the cache outside it");
}

}  // namespace statickv
