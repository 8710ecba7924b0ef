#pragma once
// Host offload's test support (Note [host offload]): Twin drives a plain
// cache and an offloaded one with the same random steps and row
// operations and requires the same views, attention outputs and stored
// bytes after each, on the CPU or a GPU (tests/core/test_offload.cpp,
// tests/cuda/test_cuda_offload.cpp).

#include "../support.hpp"

#include <memory>
#include <random>
#include <vector>

namespace statickv::test {

inline CacheConfig offloaded(CacheConfig config) {
  config.host_offload = true;
  return config;
}

/// Snapshot of `cache` with every tensor on the host.
inline Snapshot on_cpu(const Cache& cache) {
  Snapshot s(cache);
  for (auto* list : {&s.keys, &s.values, &s.slot_positions}) {
    for (at::Tensor& t : *list) t = t.cpu();
  }
  s.seq_lengths = s.seq_lengths.cpu();
  return s;
}

/// A plain cache and an offloaded one driven by the same random calls.
class Twin {
 public:
  Twin(const CacheConfig& config, uint64_t seed)
      : plain_(make_cache(config)), offload_(make_cache(offloaded(config))), rng_(seed) {
    at::manual_seed(static_cast<uint64_t>(seed));
  }

  Cache& plain() { return *plain_; }
  Cache& offload() { return *offload_; }

  /// One random step on both caches, every layer: views and attention
  /// outputs compared as they come, whole buffers after.
  void step() {
    const CacheConfig& c = plain_->config();
    const int64_t b = uniform(1, c.max_batch);
    const int64_t q = coin(0.6) ? 1 : uniform(2, c.effective_max_chunk());
    const at::Tensor pos = coin(0.5) ? per_row_positions(b, q) : shared_positions(q);
    const int64_t attend = attend_len(pos);
    INFO("step positions " << pos << " live_batch " << b << " attend_len " << attend);
    const at::Tensor device_pos = pos.to(c.device);
    const StepPlan ps = plain_->prepare(device_pos, b, attend);
    const StepPlan os = offload_->prepare(device_pos, b, attend);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      const auto options = at::TensorOptions().dtype(c.dtype).device(c.device);
      const at::Tensor k = at::randn({b, c.num_kv_heads, q, c.head_dim}, options);
      const at::Tensor v = at::randn_like(k);
      const at::Tensor query = at::randn({b, 2 * c.num_kv_heads, q, c.head_dim}, options);
      const KV want = plain_->update(l, k, v, ps);
      const KV got = offload_->update(l, k, v, os);
      INFO("layer " << l);
      REQUIRE(bit_identical(got.keys, want.keys));
      REQUIRE(bit_identical(got.values, want.values));
      // The same attention path on both: on CUDA in fp16/bf16 the plain
      // cache's full layers would take the varlen kernel, which offload
      // refuses (Note [host offload]), and two kernels differ in the bits.
      REQUIRE(offload_->attention_path(l, query) == AttentionPath::kMasked);
      const AttentionPath masked = AttentionPath::kMasked;
      REQUIRE(bit_identical(offload_->attend(l, query, got, os, masked),
                            plain_->attend(l, query, want, ps, masked)));
    }
    require_same_state();
  }

  /// One random row operation on both caches (those that throw on the plain
  /// cache, a too-deep ring rollback, must throw alike and change nothing).
  void row_operation() {
    const int64_t max_batch = plain_->config().max_batch;
    const Snapshot before = on_cpu(*plain_);
    switch (uniform(0, 5)) {
      case 0: {
        const at::Tensor rows = at::randperm(max_batch, i64())
                                    .narrow(0, 0, uniform(1, max_batch))
                                    .to(plain_->config().device);
        both([&](Cache& cache) { cache.reset_rows(rows); });
        break;
      }
      case 1: {
        const int64_t src = uniform(0, max_batch - 1);
        const int64_t dst = uniform(0, max_batch - 1);
        both([&](Cache& cache) { cache.copy_row(src, dst); });
        break;
      }
      case 2: {
        const at::Tensor index =
            at::randint(max_batch, {uniform(1, max_batch)}, i64()).to(plain_->config().device);
        both([&](Cache& cache) { cache.reorder(index); });
        break;
      }
      case 3: {
        const at::Tensor seq = plain_->seq_lengths().cpu();
        std::vector<int64_t> lengths;
        const int64_t rows = uniform(1, max_batch);
        for (int64_t r = 0; r < rows; ++r) {
          lengths.push_back(std::max<int64_t>(0, seq[r].item<int64_t>() - uniform(0, 3)));
        }
        bool plain_threw = false;
        try {
          plain_->rollback(lengths);
        } catch (const c10::Error&) {
          plain_threw = true;
          REQUIRE(on_cpu(*plain_) == before);
        }
        if (plain_threw) {
          REQUIRE_THROWS_AS(offload_->rollback(lengths), c10::Error);
        } else {
          offload_->rollback(lengths);
        }
        break;
      }
      case 4: {
        const int64_t src = uniform(0, max_batch - 1);
        const int64_t dst = uniform(0, max_batch - 1);
        const RowState saved = plain_->save_row(src);
        const RowState offload_saved = offload_->save_row(src);
        REQUIRE(offload_saved.length == saved.length);
        for (size_t l = 0; l < saved.keys.size(); ++l) {
          REQUIRE(bit_identical(offload_saved.keys[l], saved.keys[l]));  // both on the host
          REQUIRE(bit_identical(offload_saved.values[l], saved.values[l]));
          REQUIRE(bit_identical(offload_saved.positions[l], saved.positions[l]));
        }
        const RowState on_device = saved.to(plain_->config().device);
        both([&](Cache& cache) { cache.restore_row(on_device, dst); });
        break;
      }
      default:
        if (coin(0.3)) both([](Cache& cache) { cache.reset(); });
    }
    require_same_state();
  }

  /// Both caches hold the same bytes: every layer's keys and values (the
  /// offloaded cache's host copies, read after the device's writes: the
  /// plain cache's copies to the host synchronize first) and bookkeeping,
  /// the scratch slot aside (Snapshot::without_scratch).
  void require_same_state() const {
    // A blocking copy on the stream the write-backs ran on: the host
    // buffers hold them after it.
    (void)offload_->seq_lengths().cpu();
    const Snapshot want = on_cpu(*plain_).without_scratch();
    const Snapshot got = on_cpu(*offload_).without_scratch();
    REQUIRE(got == want);
  }

 private:
  template <typename Fn>
  void both(Fn&& fn) {
    fn(*plain_);
    fn(*offload_);
  }

  int64_t uniform(int64_t lo, int64_t hi) {
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng_);
  }
  bool coin(double p) { return std::bernoulli_distribution(p)(rng_); }

  // Row r continues from its length; some rows are all padding, some
  // padded on the right, and a row that would pass max_len is cut.
  at::Tensor per_row_positions(int64_t b, int64_t q) {
    const int64_t max_len = plain_->config().max_len;
    at::Tensor pos = at::full({b, q}, -1, i64());
    const at::Tensor lengths = plain_->seq_lengths().cpu();
    for (int64_t r = 0; r < b; ++r) {
      if (coin(0.15)) continue;
      const int64_t start = lengths[r].item<int64_t>();
      const int64_t real = uniform(1, q);
      for (int64_t t = 0; t < real && start + t < max_len; ++t) pos[r][t] = start + t;
    }
    return pos;
  }

  at::Tensor shared_positions(int64_t q) {
    const int64_t start = uniform(0, plain_->config().max_len - q);
    return arange_positions(start, q);
  }

  // -1 (max_len) or a bucket that covers the step's positions.
  int64_t attend_len(const at::Tensor& pos) {
    const int64_t max_len = plain_->config().max_len;
    if (coin(0.4)) return -1;
    const int64_t needed = std::max<int64_t>(1, pos.max().item<int64_t>() + 1);
    return std::min(max_len, (needed + 3) / 4 * 4);
  }

  std::unique_ptr<Cache> plain_, offload_;
  std::mt19937_64 rng_;
};

/// `steps` random steps, a random row operation after every third, on a
/// Twin; the offloaded cache's addresses never change.
inline void random_session(const CacheConfig& config, uint64_t seed, int steps) {
  Twin twin(config, seed);
  const std::vector<const void*> addresses_before = addresses(twin.offload());
  for (int i = 0; i < steps; ++i) {
    INFO("seed " << seed << ", step " << i);
    twin.step();
    if (i % 3 == 2) twin.row_operation();
  }
  REQUIRE(addresses(twin.offload()) == addresses_before);
}

}  // namespace statickv::test
