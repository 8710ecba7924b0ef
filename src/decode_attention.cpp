// cpu_decode_attention() (include/statickv/attention.hpp; Note [decode
// attention on the CPU], docs/design.md): one query a row, each (row, kv
// head) streaming its keys and values once for its group of query heads.

#include <statickv/attention.hpp>
#include <statickv/detail/cpu_isa.hpp>

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace statickv {

namespace {

// The arguments the kernel takes beyond check_attention_args' (the
// query's dtype for the mask; one query a row; a CPU tensor).
void check_decode_args(const at::Tensor& query, const at::Tensor& keys, const at::Tensor& values,
                       const at::Tensor& mask) {
  detail::check_attention_args(query, keys, values, mask, /*allow_additive=*/true);
  TORCH_CHECK(query.size(2) == 1,
              "query: expected one query a row [b, heads, 1, head_dim] but got ", query.sizes());
  const at::ScalarType t = query.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kBFloat16 || t == at::kHalf,
              "query: expected dtype Float, BFloat16 or Half (float accumulation) but got ", t);
  TORCH_CHECK(query.device().is_cpu(), "query: expected a CPU tensor but got device ",
              query.device());
  detail::check_dtype("keys", keys, query.scalar_type(), " (the query's)");
  detail::check_dtype("values", values, query.scalar_type(), " (the query's)");
  detail::check_dtype("mask", mask, query.scalar_type(), " (the query's: an additive mask)");
}

template <typename T>
using Row = at::TensorAccessor<T, 1>;

// The helpers below are inlined into both builds of attend_items, so each
// is compiled for the portable target and for AVX2 + FMA.
#define STATICKV_INLINE inline __attribute__((always_inline))

// a . b in float over eight independent lanes, which the compiler turns
// into vector multiply-adds (a single running sum would stay scalar).
template <typename T>
STATICKV_INLINE float dot(const T* a, const T* b, int64_t n) {
  float lanes[8] = {};
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    for (int l = 0; l < 8; ++l)
      lanes[l] += static_cast<float>(a[i + l]) * static_cast<float>(b[i + l]);
  }
  float sum = 0.f;
  for (const float lane : lanes) sum += lane;
  for (; i < n; ++i) sum += static_cast<float>(a[i]) * static_cast<float>(b[i]);
  return sum;
}

// A mask value at or below this blocks its key outright: added to any
// score, its exp is 0 beside any key not so blocked. A cache's additive
// mask blocks with the dtype's lowest value (float16's is -65504), so the
// keys past a row's length cost nothing.
template <typename T>
float blocked_at() {
  return std::max(-1e30f, static_cast<float>(std::numeric_limits<T>::lowest()));
}

// The scores of `group` query heads against one kv head's keys, scaled and
// masked, in float: scores[g * kv + j]; -inf for a blocked key. The keys
// not blocked go to live[0, n) in order; returns n.
template <typename T>
STATICKV_INLINE int64_t group_scores(const at::TensorAccessor<T, 3>& q, int64_t first_head,
                                     int64_t group, const at::TensorAccessor<T, 2>& k,
                                     const Row<T>& mask, float scale, float* scores,
                                     int64_t* live) {
  const int64_t kv = k.size(0), d = k.size(1);
  const float blocked = blocked_at<T>();
  int64_t n = 0;
  for (int64_t j = 0; j < kv; ++j) {
    const float m = static_cast<float>(mask[j]);
    if (m <= blocked) {
      for (int64_t g = 0; g < group; ++g) {
        scores[g * kv + j] = -std::numeric_limits<float>::infinity();
      }
      continue;
    }
    live[n++] = j;
    for (int64_t g = 0; g < group; ++g) {
      scores[g * kv + j] = dot<T>(&q[first_head + g][0][0], &k[j][0], d) * scale + m;
    }
  }
  return n;
}

// softmax over each of `group` score rows of length kv, in place; a row
// whose every key is blocked gets zeros (as reference_attention), not NaN.
STATICKV_INLINE void softmax_rows(float* scores, int64_t group, int64_t kv) {
  for (int64_t g = 0; g < group; ++g) {
    float* s = scores + g * kv;
    const float top = *std::max_element(s, s + kv);
    if (top == -std::numeric_limits<float>::infinity()) {
      std::fill(s, s + kv, 0.f);
      continue;
    }
    float sum = 0.f;
    for (int64_t j = 0; j < kv; ++j) sum += (s[j] = std::exp(s[j] - top));
    const float inv = 1.f / sum;
    for (int64_t j = 0; j < kv; ++j) s[j] *= inv;
  }
}

// out[head] = sum_j p[g][j] v[j] for the group's heads, accumulated in
// float, over the n live keys group_scores listed.
template <typename T>
STATICKV_INLINE void group_outputs(const float* probs, int64_t first_head, int64_t group,
                                   const at::TensorAccessor<T, 2>& v, const int64_t* live,
                                   int64_t n, float* acc, at::TensorAccessor<T, 3> out) {
  const int64_t kv = v.size(0), d = v.size(1);
  std::fill(acc, acc + group * d, 0.f);
  for (int64_t l = 0; l < n; ++l) {
    const int64_t j = live[l];
    const T* value = &v[j][0];
    for (int64_t g = 0; g < group; ++g) {
      const float p = probs[g * kv + j];
      float* a = acc + g * d;
      for (int64_t i = 0; i < d; ++i) a[i] += p * static_cast<float>(value[i]);
    }
  }
  for (int64_t g = 0; g < group; ++g) {
    T* o = &out[first_head + g][0][0];
    for (int64_t i = 0; i < d; ++i) o[i] = static_cast<T>(acc[g * d + i]);
  }
}

// One call's operands, as accessors.
template <typename T>
struct Operands {
  at::TensorAccessor<T, 4> q, k, v, m, o;
  int64_t kv_heads, group;
  float scale;
};

// One worker's scratch: an item's scores [group, kv], its outputs in float
// [group, head_dim] and its live keys [kv].
struct Scratch {
  std::vector<float> scores, acc;
  std::vector<int64_t> live;
};

// Items [begin, end) of (row, kv head): that head's keys, then its values,
// once for its group of query heads.
template <typename T>
STATICKV_INLINE void attend_items_body(const Operands<T>& a, int64_t begin, int64_t end,
                                       Scratch& s) {
  const int64_t kv = a.k.size(2);
  for (int64_t item = begin; item < end; ++item) {
    const int64_t row = item / a.kv_heads, h = item % a.kv_heads;
    const int64_t n = group_scores<T>(a.q[row], h * a.group, a.group, a.k[row][h], a.m[row][0][0],
                                      a.scale, s.scores.data(), s.live.data());
    softmax_rows(s.scores.data(), a.group, kv);
    group_outputs<T>(s.scores.data(), h * a.group, a.group, a.v[row][h], s.live.data(), n,
                     s.acc.data(), a.o[row]);
  }
}

template <typename T>
void attend_items(const Operands<T>& a, int64_t begin, int64_t end, Scratch& s) {
  attend_items_body<T>(a, begin, end, s);
}

#ifdef STATICKV_CPU_AVX2
template <typename T>
__attribute__((target("avx2,fma"))) void attend_items_avx2(const Operands<T>& a, int64_t begin,
                                                           int64_t end, Scratch& s) {
  attend_items_body<T>(a, begin, end, s);
}
#endif

template <typename T>
void decode_attention_typed(const at::Tensor& query, const at::Tensor& keys,
                            const at::Tensor& values, const at::Tensor& mask, at::Tensor& out) {
  const int64_t kv_heads = keys.size(1), kv = keys.size(2), d = keys.size(3);
  const int64_t group = query.size(1) / kv_heads;
  const Operands<T> a{query.accessor<T, 4>(),
                      keys.accessor<T, 4>(),
                      values.accessor<T, 4>(),
                      mask.accessor<T, 4>(),
                      out.accessor<T, 4>(),
                      kv_heads,
                      group,
                      1.f / std::sqrt(static_cast<float>(d))};
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, group * kv * d));
  at::parallel_for(0, query.size(0) * kv_heads, grain, [&](int64_t begin, int64_t end) {
    Scratch s{std::vector<float>(static_cast<size_t>(group * kv)),
              std::vector<float>(static_cast<size_t>(group * d)),
              std::vector<int64_t>(static_cast<size_t>(kv))};
#ifdef STATICKV_CPU_AVX2
    if (detail::cpu_has_avx2_fma()) return attend_items_avx2<T>(a, begin, end, s);
#endif
    attend_items<T>(a, begin, end, s);
  });
}

}  // namespace

at::Tensor cpu_decode_attention(const at::Tensor& query, const at::Tensor& keys,
                                const at::Tensor& values, const at::Tensor& mask) {
  check_decode_args(query, keys, values, mask);
  RECORD_FUNCTION("statickv::decode_attention", std::vector<c10::IValue>({query, keys, values}));
  const at::Tensor q = query.contiguous();
  at::Tensor out = at::empty_like(q);
  // Each key and value row is read as head_dim contiguous elements.
  const at::Tensor k = keys.stride(3) == 1 ? keys : keys.contiguous();
  const at::Tensor v = values.stride(3) == 1 ? values : values.contiguous();
  switch (q.scalar_type()) {
    case at::kFloat:
      decode_attention_typed<float>(q, k, v, mask, out);
      break;
    case at::kBFloat16:
      decode_attention_typed<at::BFloat16>(q, k, v, mask, out);
      break;
    default:  // check_decode_args let nothing else through
      decode_attention_typed<at::Half>(q, k, v, mask, out);
  }
  return out;
}

}  // namespace statickv
