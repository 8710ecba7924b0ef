// The stream route of cpu_linear (stream_linear.hpp; Note [CPU
// projections]): a few rows times a weight matrix, each weight row read once. The columns are split
// over the intra-op threads in blocks of kBlock weight rows; a block is read from memory once and,
// while it sits in the core's cache, multiplied by every row of x, three at a time, while the
// next block is prefetched. The accumulators of a tile are summed together, eight at a time.

#include <statickv/model/cpu_linear.hpp>

#include "stream_linear.hpp"

#include <statickv/detail/cpu_isa.hpp>

#include <ATen/Parallel.h>

#ifdef STATICKV_CPU_AVX2
#include <immintrin.h>
#endif

#include <algorithm>
#include <string>

namespace statickv::reference {

namespace {

/// One call's operands: y[r, n] (+)= x[r, :] . w[n, :] + bias[n] for the
/// rows r < rows and the columns n of a block.
struct Operands {
  const float* x;
  int64_t ldx;
  const float* w;
  int64_t ldw;
  const float* bias;  // or nullptr
  float* y;
  int64_t ldy;
  int64_t rows, in, out;
  bool add;
};

constexpr int64_t kBlock = 8;  // weight rows a block holds

void store(const Operands& o, int64_t r, int64_t n, float sum) {
  if (o.bias != nullptr) sum += o.bias[n];
  float& out = o.y[r * o.ldy + n];
  out = o.add ? out + sum : sum;
}

/// The portable loop: eight partial sums per dot product, which compilers
/// vectorize with the instructions the build targets.
void columns_portable(const Operands& o, int64_t n0, int64_t n1) {
  for (int64_t n = n0; n < n1; ++n) {
    const float* w = o.w + n * o.ldw;
    for (int64_t r = 0; r < o.rows; ++r) {
      const float* x = o.x + r * o.ldx;
      float part[8] = {0, 0, 0, 0, 0, 0, 0, 0};
      int64_t k = 0;
      for (; k + 8 <= o.in; k += 8) {
        for (int j = 0; j < 8; ++j) part[j] += x[k + j] * w[k + j];
      }
      float sum =
          ((part[0] + part[1]) + (part[2] + part[3])) + ((part[4] + part[5]) + (part[6] + part[7]));
      for (; k < o.in; ++k) sum += x[k] * w[k];
      store(o, r, n, sum);
    }
  }
}

#ifdef STATICKV_CPU_AVX2

/// The sums of eight accumulators at once, a[i]'s in lane i: three rounds
/// of pairwise adds instead of eight separate horizontal sums.
__attribute__((target("avx2,fma"))) inline __m256 sum_eight(const __m256 (&a)[8]) {
  const __m256 t0 = _mm256_hadd_ps(a[0], a[1]), t1 = _mm256_hadd_ps(a[2], a[3]);
  const __m256 t2 = _mm256_hadd_ps(a[4], a[5]), t3 = _mm256_hadd_ps(a[6], a[7]);
  const __m256 u0 = _mm256_hadd_ps(t0, t1), u1 = _mm256_hadd_ps(t2, t3);
  return _mm256_add_ps(_mm256_permute2f128_ps(u0, u1, 0x20), _mm256_permute2f128_ps(u0, u1, 0x31));
}

/// sums[t] = the lanes of acc[t] added, t < N, eight accumulators at a time.
template <int N>
__attribute__((target("avx2,fma"))) inline void sum_all(const __m256 (&acc)[N], float* sums) {
  for (int g = 0; g < N; g += 8) {
    __m256 group[8];
    for (int t = 0; t < 8; ++t) group[t] = g + t < N ? acc[g + t] : _mm256_setzero_ps();
    alignas(32) float lanes[8];
    _mm256_store_ps(lanes, sum_eight(group));
    for (int t = 0; t < 8 && g + t < N; ++t) sums[g + t] = lanes[t];
  }
}

/// Weight rows [n, n + NR) times rows [r, r + MR) of x: NR * MR eight-lane
/// accumulators over the whole input, summed together, then the tail one
/// element at a time. The first rows' tile also prefetches the same weight
/// rows of the next block, which the memory then streams while this one
/// computes.
template <int NR, int MR>
__attribute__((target("avx2,fma"))) void tile_avx2(const Operands& o, int64_t n, int64_t r) {
  __m256 acc[NR * MR];
  for (int t = 0; t < NR * MR; ++t) acc[t] = _mm256_setzero_ps();
  const float* x = o.x + r * o.ldx;
  const float* w = o.w + n * o.ldw;
  const bool fetch = r == 0 && n + kBlock + NR <= o.out;
  int64_t k = 0;
  for (; k + 8 <= o.in; k += 8) {
    __m256 xv[MR];
    for (int i = 0; i < MR; ++i) xv[i] = _mm256_loadu_ps(x + i * o.ldx + k);
    if (fetch && (k & 15) == 0) {
      for (int j = 0; j < NR; ++j)
        _mm_prefetch(reinterpret_cast<const char*>(w + (j + kBlock) * o.ldw + k), _MM_HINT_T0);
    }
    for (int j = 0; j < NR; ++j) {
      const __m256 wv = _mm256_loadu_ps(w + j * o.ldw + k);
      for (int i = 0; i < MR; ++i) acc[j * MR + i] = _mm256_fmadd_ps(wv, xv[i], acc[j * MR + i]);
    }
  }
  float sums[NR * MR];
  sum_all(acc, sums);
  for (int j = 0; j < NR; ++j) {
    for (int i = 0; i < MR; ++i) {
      float sum = sums[j * MR + i];
      for (int64_t t = k; t < o.in; ++t) sum += x[i * o.ldx + t] * w[j * o.ldw + t];
      store(o, r + i, n + j, sum);
    }
  }
}

/// NR weight rows times every row of x: three rows at a time (twelve
/// accumulators with NR = 4), then the two or one left.
template <int NR>
__attribute__((target("avx2,fma"))) void rows_avx2(const Operands& o, int64_t n) {
  int64_t r = 0;
  for (; r + 3 <= o.rows; r += 3) tile_avx2<NR, 3>(o, n, r);
  if (o.rows - r == 2) tile_avx2<NR, 2>(o, n, r);
  if (o.rows - r == 1) tile_avx2<NR, 1>(o, n, r);
}

/// A block of kBlock weight rows: one row of x meets all eight at once
/// (eight weight streams in flight); more rows meet four at a time.
__attribute__((target("avx2,fma"))) void block_avx2(const Operands& o, int64_t n) {
  if (o.rows == 1) return tile_avx2<kBlock, 1>(o, n, 0);
  rows_avx2<kBlock / 2>(o, n);
  rows_avx2<kBlock / 2>(o, n + kBlock / 2);
}

__attribute__((target("avx2,fma"))) void columns_avx2(const Operands& o, int64_t n0, int64_t n1) {
  int64_t n = n0;
  for (; n + kBlock <= n1; n += kBlock) block_avx2(o, n);
  for (; n < n1; ++n) rows_avx2<1>(o, n);
}

#endif

void run(const Operands& o, int64_t out, bool portable = false) {
  // Blocks of about 64 KiB of weights per task, so that two threads split
  // even the narrowest projection and a task is worth its dispatch.
  const int64_t blocks = (out + kBlock - 1) / kBlock;
  const int64_t grain = std::max<int64_t>(1, 16384 / std::max<int64_t>(1, kBlock * o.in));
  at::parallel_for(0, blocks, grain, [&](int64_t b0, int64_t b1) {
    const int64_t n0 = b0 * kBlock, n1 = std::min(out, b1 * kBlock);
#ifdef STATICKV_CPU_AVX2
    if (!portable && detail::cpu_has_avx2_fma()) return columns_avx2(o, n0, n1);
#else
    (void)portable;
#endif
    columns_portable(o, n0, n1);
  });
}

Operands operands(const at::Tensor& rows, const at::Tensor& weight, const at::Tensor& bias,
                  at::Tensor& y, bool add) {
  Operands o;
  o.x = rows.const_data_ptr<float>();
  o.ldx = rows.size(0) > 1 ? rows.stride(0) : rows.size(1);
  o.w = weight.const_data_ptr<float>();
  o.ldw = weight.stride(0);
  o.bias = bias.defined() ? bias.const_data_ptr<float>() : nullptr;
  o.y = y.mutable_data_ptr<float>();
  o.ldy = y.size(-1);
  o.rows = rows.size(0);
  o.in = rows.size(1);
  o.out = weight.size(0);
  o.add = add;
  return o;
}

}  // namespace

void stream_linear_into(const at::Tensor& rows, const at::Tensor& weight, const at::Tensor& bias,
                        at::Tensor& y, bool add, bool portable) {
  run(operands(rows, weight, bias, y, add), weight.size(0), portable);
}

std::string stream_loop_isa() {
#ifdef STATICKV_CPU_AVX2
  if (detail::cpu_has_avx2_fma()) return "avx2";
#endif
  return "portable";
}

}  // namespace statickv::reference
