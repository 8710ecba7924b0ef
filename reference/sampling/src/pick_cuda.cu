// The fused CUDA pick of the sampling head (pick_fused.hpp; Note
// [sampling head]): one block per row, on the current stream. A taking
// row's block penalizes its logits into the scratch row (the composition's
// order: bias, min_tokens mask, repetition, presence and frequency), takes
// the greedy argmax and, for a sampled row, scales by the temperature,
// finds its filters' floor by bisection on the floats' order (top-k: the
// kth smallest value by count; top-p: the smallest value whose ascending
// mass exceeds 1 - top_p; min-p: max + log(min_p)) and draws the argmax of
// scaled + Gumbel noise above it, the noise from the integer hash every
// device shares. As on the CPU, the draw races the top-k and min-p
// survivors first and finds top-p's floor only when top-p drops the
// winner. Thread 0 then writes the result row, the draw index and the
// token marks. Products and sums are rounded as the unfused ops round
// them (no fused multiply-add). Its CPU twin is pick_cpu.cpp.

// pick_cuda.cpp makes the kernel's arguments from the tensors and checks
// the launch (pick_launch.hpp): no ATen here.

#include "pick_block.cuh"
#include "pick_grid.hpp"
#include "pick_launch.hpp"
#include "pick_tables.hpp"

#include <cstdint>

namespace statickv::reference::detail {

namespace {

/// The argmax of scaled + Gumbel noise over the tokens of `s` at or above `floor`.
__device__ int64_t race_above(const PickArgs& a, const float* s, float floor, uint32_t draw_key) {
  Best best{-INFINITY, -1};
  for (int64_t i = threadIdx.x; i < a.vocab; i += kThreads) {
    const float v = s[i];
    if (v < floor || v == -INFINITY) continue;
    const float score =
        __fadd_rn(v, gumbel(mix32(static_cast<uint32_t>(a.hashed_ids[i]) ^ draw_key)));
    best = better(best, Best{score, i});
  }
  const Best picked = block_best(best);
  return picked.index < 0 ? 0 : picked.index;
}

/// Whether top-p keeps `value`: it is the largest, or the mass at or below
/// it (over the values >= `kth`) exceeds `drop` of the whole.
__device__ bool top_p_keeps(const float* s, int64_t vocab, float value, float top, float kth,
                            float drop) {
  if (value == top) return true;
  double total = 0, above = 0;
  for (int64_t i = threadIdx.x; i < vocab; i += kThreads) {
    if (s[i] < kth || s[i] == -INFINITY) continue;
    const double w = expf(__fsub_rn(s[i], top));
    total += w;
    if (s[i] > value) above += w;
  }
  total = block_sum(total);
  above = block_sum(above);
  return total - above > static_cast<double>(drop) * total;
}

/// A sampled row's draw over its scaled logits `s`: the race over the
/// top-k and min-p survivors, whose winner is the draw whenever top-p keeps
/// it; only otherwise is top-p's floor found and the race rerun above it.
__device__ int64_t draw(const PickArgs& a, const float* s, float top, const float* param,
                        const int64_t* key) {
  float floor = __fadd_rn(top, param[kLogMinP]);  // -inf when min_p is off
  float kth = -INFINITY;
  if (key[kKthPosition] > 0) {
    kth = kth_smallest(s, a.vocab, key[kKthPosition]);
    floor = fmaxf(floor, kth);
  }
  const auto draw_key =
      static_cast<uint32_t>((key[kSeedKey] + key[kDrawIndex] * 0x9e3779b1LL) & 0xffffffffLL);
  const int64_t pick = race_above(a, s, floor, draw_key);
  const float drop = param[kOneMinusTopP];
  if (drop <= 0.0f || top_p_keeps(s, a.vocab, s[pick], top, kth, drop)) return pick;
  floor = fmaxf(floor, top_p_floor(s, a.vocab, top, kth, drop));
  return race_above(a, s, floor, draw_key);
}

/// Row r's penalized logits into `s`; returns this thread's greedy best.
__device__ Best penalize(const PickArgs& a, int64_t r, float* s, const float* param, bool masking) {
  const float* x = a.logits + r * a.vocab;
  for (int64_t i = threadIdx.x; i < a.vocab; i += kThreads) s[i] = x[i];
  __syncthreads();
  // Padded bias entries add 0 to id 0, hence atomics.
  for (int64_t j = threadIdx.x; j < a.max_bias; j += kThreads) {
    atomicAdd(&s[a.bias_ids[r * a.max_bias + j]], a.bias_vals[r * a.max_bias + j]);
  }
  __syncthreads();
  if (masking) {
    for (int64_t j = threadIdx.x; j < a.max_stop; j += kThreads) {
      s[a.stop_ids[r * a.max_stop + j]] = -INFINITY;
    }
  }
  __syncthreads();
  const float rep = param[kRepetition];
  const bool* seen = a.seen + r * a.vocab;
  const float* penalty = a.penalty + r * a.vocab;
  Best best{-INFINITY, -1};
  for (int64_t i = threadIdx.x; i < a.vocab; i += kThreads) {
    float v = s[i];
    if (rep != 1.0f && seen[i]) v = v < 0.0f ? __fmul_rn(v, rep) : __fdiv_rn(v, rep);
    v = __fsub_rn(v, penalty[i]);
    s[i] = v;
    best = better(best, Best{v, i});
  }
  return best;
}

/// log(sum(exp(x - max))) and max of row r's raw logits.
__device__ float2 log_normalizer(const PickArgs& a, int64_t r) {
  const float* x = a.logits + r * a.vocab;
  float top = -INFINITY;
  for (int64_t i = threadIdx.x; i < a.vocab; i += kThreads) top = fmaxf(top, x[i]);
  top = block_max(top);
  double sum = 0;
  for (int64_t i = threadIdx.x; i < a.vocab; i += kThreads) sum += expf(__fsub_rn(x[i], top));
  return make_float2(top, static_cast<float>(log(block_sum(sum))));
}

/// Thread 0: row r's result, draw index and marks (SamplingHead::mark).
__device__ void finish(const PickArgs& a, int64_t r, int64_t pick, float2 normalizer,
                       const float* param, int64_t* key) {
  float* out = a.out + r * a.width;
  out[0] = static_cast<float>(pick);
  out[1] = 0.0f;
  if (a.logprobs) {
    const float* x = a.logits + r * a.vocab;
    const auto logprob = [&](float v) {
      return __fsub_rn(__fsub_rn(v, normalizer.x), normalizer.y);
    };
    out[2] = logprob(x[pick]);
    for (int64_t j = 0; j < a.alternatives; ++j) {
      out[3 + 2 * j] = static_cast<float>(a.top_ids[r * a.alternatives + j]);
      out[4 + 2 * j] = logprob(a.top_logits[r * a.alternatives + j]);
    }
  }
  key[kDrawIndex] += 1;
  bool& generated = a.generated[r * a.vocab + pick];
  a.penalty[r * a.vocab + pick] =
      __fadd_rn(a.penalty[r * a.vocab + pick],
                __fadd_rn(param[kFrequency], (generated ? 0.0f : 1.0f) * param[kPresence]));
  generated = true;
  a.seen[r * a.vocab + pick] = true;
}

/// Whether row r takes the greedy grid: greedy, nothing to add or mask
/// before its argmax (the head sets kPlain), past min_tokens.
__device__ bool on_grid(const PickArgs& a, const int64_t* key) {
  return a.ctas > 0 && key[kPlain] != 0 && key[kDrawIndex] >= key[kMinTokens];
}

/// This block's slice of row r: its argmax and, with log-probabilities,
/// its log-normalizer terms; 16-byte loads where the row is aligned.
__device__ void slice_partial(const PickArgs& a, int64_t r, int64_t c, Best* best,
                              Normalizer* norm) {
  const float* x = a.logits + r * a.vocab;
  const int64_t begin = slice_begin(a.vocab, a.ctas, c), end = slice_begin(a.vocab, a.ctas, c + 1);
  const bool aligned = reinterpret_cast<uintptr_t>(x) % 16 == 0;
  Best mine{-INFINITY, -1};
  int64_t rest = begin;  // where the one-at-a-time loop starts
  if (aligned) {
    // Thread t takes groups of four t, t + kThreads, ...; begin is a
    // multiple of 4, so every group is 16 bytes on a 16-byte boundary.
    const int64_t groups = (end - begin) / 4;
    for (int64_t g = threadIdx.x; g < groups; g += kThreads) {
      const int64_t i = begin + 4 * g;
      const float4 v = *reinterpret_cast<const float4*>(x + i);
      mine = better(mine, Best{v.x, i});
      mine = better(mine, Best{v.y, i + 1});
      mine = better(mine, Best{v.z, i + 2});
      mine = better(mine, Best{v.w, i + 3});
    }
    rest = begin + 4 * groups;  // fewer than four left: only at the row's end
  }
  for (int64_t k = rest + threadIdx.x; k < end; k += kThreads) mine = better(mine, Best{x[k], k});
  *best = block_best(mine);
  if (!a.logprobs) return;
  const float top = best->index < 0 ? -INFINITY : best->value;
  double sum = 0;
  for (int64_t k = begin + threadIdx.x; k < end; k += kThreads) sum += expf(__fsub_rn(x[k], top));
  *norm = Normalizer{top, block_sum(sum)};
}

/// The greedy grid's block (c, r): its partial, then, in the row's last
/// block to finish, the merge and the row's result.
__device__ void grid_block(const PickArgs& a, int64_t r, int64_t c, const float* param,
                           int64_t* key) {
  Best best;
  Normalizer norm{-INFINITY, 0.0};
  slice_partial(a, r, c, &best, &norm);
  __shared__ bool last;
  if (threadIdx.x == 0) {
    a.best_parts[r * a.ctas + c] = best;
    a.norm_parts[r * a.ctas + c] = norm;
    __threadfence();  // the partial is visible before the count says so
    last = atomicAdd(&a.done[r], 1U) == static_cast<unsigned int>(a.ctas - 1);
  }
  __syncthreads();
  if (!last || threadIdx.x != 0) return;
  __threadfence();
  Best all{-INFINITY, -1};
  Normalizer total{-INFINITY, 0.0};
  for (int64_t k = 0; k < a.ctas; ++k) {  // block order, as the CPU twin merges
    const Best* pb = a.best_parts + r * a.ctas + k;
    all = better(all,
                 Best{__ldcg(&pb->value), __ldcg(reinterpret_cast<const long long*>(&pb->index))});
    const Normalizer* pn = a.norm_parts + r * a.ctas + k;
    total = merge(total, Normalizer{__ldcg(&pn->top), __ldcg(&pn->sum)});
  }
  a.done[r] = 0;  // for the next pick (a kernel boundary orders it)
  const float2 normalizer = make_float2(total.top, static_cast<float>(log(total.sum)));
  finish(a, r, all.index < 0 ? 0 : all.index, normalizer, param, key);
}

__global__ void fused_pick_kernel(PickArgs a) {
  const int64_t r = blockIdx.y;
  if (a.take[r] == 0) return;
  const float* param = a.params + r * kParams;
  int64_t* key = a.keys + r * kKeys;
  if (on_grid(a, key)) {
    grid_block(a, r, blockIdx.x, param, key);
    return;
  }
  if (blockIdx.x != 0) return;  // a row off the grid: one block does it all
  const bool masking = key[kDrawIndex] < key[kMinTokens];
  const bool sampled = key[kSampled] != 0;
  float* s = a.scratch + r * a.vocab;
  const Best top = block_best(penalize(a, r, s, param, masking));
  int64_t pick = top.index < 0 ? 0 : top.index;
  if (sampled) {
    const float t = param[kTemperature];
    for (int64_t i = threadIdx.x; i < a.vocab; i += kThreads) s[i] = __fdiv_rn(s[i], t);
    __syncthreads();
    pick = draw(a, s, __fdiv_rn(top.value, t), param, key);
  }
  const float2 normalizer = a.logprobs ? log_normalizer(a, r) : make_float2(0.0f, 0.0f);
  __syncthreads();  // every thread has read the row's keys
  if (threadIdx.x == 0) finish(a, r, pick, normalizer, param, key);
}

}  // namespace

void launch_fused_pick(const PickArgs& a, int64_t rows, cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(a.ctas > 1 ? a.ctas : 1), static_cast<unsigned>(rows));
  fused_pick_kernel<<<grid, kThreads, 0, stream>>>(a);
}

}  // namespace statickv::reference::detail
