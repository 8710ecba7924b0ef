#pragma once
// Test support, the one include of every test file: config builders
// (support/config.hpp), cache snapshots for bit-identity checks
// (support/snapshot.hpp), GraphRunner steps (support/runner.hpp), tensor
// helpers, and a plain reference that keeps every token of every row,
// against which the caches' attention outputs are compared.

#include "support/config.hpp"
#include "support/runner.hpp"
#include "support/snapshot.hpp"

#include <statickv/statickv.hpp>

#include <ATen/ATen.h>
#include <catch2/catch.hpp>
#include <statickv/op_counter.hpp>

#include <limits>
#include <memory>
#include <string>
#include <vector>

namespace statickv::test {

inline at::TensorOptions f32() { return at::TensorOptions().dtype(at::kFloat); }
inline at::TensorOptions i64() { return at::TensorOptions().dtype(at::kLong); }

inline at::Tensor positions(std::vector<int64_t> values) { return at::tensor(values, i64()); }
inline at::Tensor positions(int64_t rows, std::vector<int64_t> values) {
  const int64_t cols = static_cast<int64_t>(values.size()) / rows;
  return at::tensor(values, i64()).view({rows, cols});
}
inline at::Tensor bools(std::vector<int64_t> values) {
  return at::tensor(values, i64()).to(at::kBool);
}
/// A HybridCache when `config` has a sliding layer, else a StaticCache.
inline std::unique_ptr<Cache> make_cache(const CacheConfig& config) {
  if (config.has_type(LayerType::kSliding)) return std::make_unique<HybridCache>(config);
  return std::make_unique<StaticCache>(config);
}
inline at::Tensor arange_positions(int64_t start, int64_t count) {
  return at::arange(start, start + count, i64());
}

/// Keeps every token ever written, per row and position, for one layer.
/// Attention over it is the specification the caches must match.
class ReferenceLayer {
 public:
  ReferenceLayer(int64_t max_batch, int64_t kv_heads, int64_t max_len, int64_t head_dim,
                 int64_t window)
      : keys_(at::zeros({max_batch, kv_heads, max_len, head_dim}, f32())),
        values_(at::zeros_like(keys_)),
        present_(at::zeros({max_batch, max_len}, at::kBool)),
        window_(window) {}

  /// pos: [b, q] (negative = padding); key/value [b, H, q, D].
  void write(const at::Tensor& pos, const at::Tensor& key, const at::Tensor& value) {
    auto acc = pos.accessor<int64_t, 2>();
    for (int64_t r = 0; r < pos.size(0); ++r) {
      for (int64_t t = 0; t < pos.size(1); ++t) {
        const int64_t p = acc[r][t];
        if (p < 0 || p >= keys_.size(2)) continue;
        keys_[r].select(1, p).copy_(key[r].select(1, t));
        values_[r].select(1, p).copy_(value[r].select(1, t));
        present_[r][p] = true;
      }
    }
  }

  /// Attention of queries [b, Hq, q, D] at positions [b, q].
  at::Tensor attend(const at::Tensor& query, const at::Tensor& pos) const {
    const int64_t b = query.size(0);
    const int64_t len = keys_.size(2);
    const at::Tensor kpos = at::arange(len, i64()).view({1, 1, len});
    const at::Tensor qpos = pos.unsqueeze(2);
    at::Tensor mask =
        present_.narrow(0, 0, b).unsqueeze(1).logical_and(kpos.le(qpos)).logical_and(qpos.ge(0));
    if (window_ > 0) mask = mask.logical_and(qpos.sub(kpos).lt(window_));
    return reference_attention(query.to(at::kFloat), keys_.narrow(0, 0, b), values_.narrow(0, 0, b),
                               mask.unsqueeze(1));
  }

  void reset_row(int64_t row) { present_[row].fill_(false); }
  /// Row i becomes old row indices[i].
  void reorder(const std::vector<int64_t>& indices) {
    const at::Tensor index = at::tensor(indices, i64());
    const int64_t n = index.numel();
    keys_.narrow(0, 0, n).copy_(keys_.index_select(0, index));
    values_.narrow(0, 0, n).copy_(values_.index_select(0, index));
    present_.narrow(0, 0, n).copy_(present_.index_select(0, index));
  }
  void copy_row(int64_t src, int64_t dst) {
    keys_[dst].copy_(keys_[src]);
    values_[dst].copy_(values_[src]);
    present_[dst].copy_(present_[src]);
  }

 private:
  at::Tensor keys_, values_, present_;
  int64_t window_;
};

/// Attention recomputed over whole sequences without any cache: causal (and
/// windowed when window > 0). q/k/v: [b, H, T, D].
inline at::Tensor recompute(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                            int64_t window = 0) {
  const int64_t len = q.size(2);
  const at::Tensor i = at::arange(len, i64()).view({len, 1});
  const at::Tensor j = at::arange(len, i64()).view({1, len});
  at::Tensor mask = j.le(i);
  if (window > 0) mask = mask.logical_and(i.sub(j).lt(window));
  return reference_attention(q, k, v, mask.view({1, 1, len, len}).expand({q.size(0), 1, len, len}));
}

/// Tolerance of an attention output in `dtype` against a float32 reference.
inline double tolerance(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return 5e-3;
    case at::kBFloat16:
      return 3e-2;
    default:
      return 1e-5;
  }
}

/// One unit in the last place of `dtype` near 1, relative: a kernel's one
/// rounding to fp16 or bf16; in float32 a few units (sums in another
/// order, a library's exp or tanh an ulp away).
inline double unit_in_last_place(at::ScalarType dtype) {
  switch (dtype) {
    case at::kHalf:
      return 1.0 / 1024;
    case at::kBFloat16:
      return 1.0 / 128;
    default:
      return 1e-6;
  }
}

/// `got` has `want`'s shape and is within one unit of `dtype` of it, of each
/// value and of the output's scale (1 + max |want|).
inline bool within_units(const at::Tensor& got, const at::Tensor& want, at::ScalarType dtype) {
  const at::Tensor g = got.to(at::kFloat), w = want.to(at::kFloat);
  const double unit = unit_in_last_place(dtype);
  const double scale = 1.0 + w.abs().max().item<double>();
  return g.sizes() == w.sizes() && at::allclose(g, w, unit, unit * scale);
}

inline bool close(const at::Tensor& actual, const at::Tensor& expected, double tol) {
  const at::Tensor a = actual.to(at::kFloat);
  const at::Tensor e = expected.to(at::kFloat);
  if (a.sizes() != e.sizes()) return false;
  return at::allclose(a, e, /*rtol=*/tol, /*atol=*/tol);
}

inline double max_diff(const at::Tensor& actual, const at::Tensor& expected) {
  return (actual.to(at::kFloat) - expected.to(at::kFloat)).abs().max().item<double>();
}

/// FlashAttention's varlen forward (Note [attention paths]), emulated with
/// plain ATen over exactly the arguments given, reading keys through the
/// very views (and offsets) the kernel would get: row r's queries
/// query[cum_seq_q[r] ..), keys keys[cum_seq_k[r] .. + seqused_k[r]), causal
/// aligned to the end of the row's keys, query head h on kv head h / group,
/// scale 1/sqrt(head_dim). Tokens the kernel does not write are NaN (so a
/// caller that reads them fails); a row with no keys gets zeros, as
/// FlashAttention gives. Returns [total_q, heads, head_dim] in float32.
inline at::Tensor emulate_flash_varlen(const detail::VarlenArgs& a) {
  at::Tensor out = at::full(a.query.sizes(), std::numeric_limits<float>::quiet_NaN(), f32());
  const at::Tensor cq = a.cum_seq_q.cpu(), ck = a.cum_seq_k.cpu(), used = a.seqused_k.cpu();
  REQUIRE(cq.scalar_type() == at::kInt);
  REQUIRE(ck.scalar_type() == at::kInt);
  REQUIRE(used.scalar_type() == at::kInt);
  REQUIRE(used.numel() == a.batch);
  const int64_t heads = a.query.size(1), group = heads / a.keys.size(1);
  const double scale = 1.0 / std::sqrt(static_cast<double>(a.query.size(2)));
  for (int64_t r = 0; r < a.batch; ++r) {
    const int64_t q0 = cq[r].item<int>(), nq = cq[r + 1].item<int>() - q0;
    const int64_t k0 = ck[r].item<int>(), nk = used[r].item<int>();
    REQUIRE(nq >= 0);
    REQUIRE(nq <= a.max_q);
    REQUIRE(nk >= 0);
    REQUIRE(nk <= a.max_k);
    REQUIRE(k0 + nk <= a.keys.size(0));
    if (nq == 0) continue;
    if (nk == 0) {
      out.narrow(0, q0, nq).zero_();
      continue;
    }
    const at::Tensor q = a.query.narrow(0, q0, nq).to(at::kFloat).transpose(0, 1);
    const at::Tensor k =
        a.keys.narrow(0, k0, nk).to(at::kFloat).transpose(0, 1).repeat_interleave(group, 0);
    const at::Tensor v =
        a.values.narrow(0, k0, nk).to(at::kFloat).transpose(0, 1).repeat_interleave(group, 0);
    at::Tensor scores = at::matmul(q, k.transpose(1, 2)).mul_(scale);  // [heads, nq, nk]
    if (a.causal) {
      const at::Tensor i = at::arange(nq, i64()).view({nq, 1});
      const at::Tensor j = at::arange(nk, i64()).view({1, nk});
      const at::Tensor blocked = j.gt(i.add(nk - nq));
      scores.masked_fill_(blocked, -std::numeric_limits<double>::infinity());
      // A query that sees no key (nq > nk): FlashAttention writes 0.
      at::Tensor probs = at::softmax(scores, -1).nan_to_num_(0.0);
      out.narrow(0, q0, nq).copy_(at::matmul(probs, v).transpose(0, 1));
    } else {
      out.narrow(0, q0, nq).copy_(at::matmul(at::softmax(scores, -1), v).transpose(0, 1));
    }
  }
  return out;
}

/// The counter the benchmarks share (Note [counted step]).
using statickv::OpCounter;

/// Expects `fn` to throw c10::Error whose message contains every fragment.
template <typename Fn>
void require_error(Fn&& fn, const std::vector<std::string>& fragments) {
  try {
    fn();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    for (const auto& fragment : fragments) {
      INFO("message: " << what);
      CHECK(what.find(fragment) != std::string::npos);
    }
    return;
  }
  FAIL("expected c10::Error mentioning " << fragments.front());
}

}  // namespace statickv::test
