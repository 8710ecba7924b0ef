#pragma once
// The greedy grid of the fused CUDA pick (Note [sampling head]): a row with
// nothing to apply before its argmax (greedy, no logit bias, no penalties,
// past min_tokens) is split over `ctas` blocks, each reducing its slice to
// a partial (its argmax and its log-normalizer terms); the last block to
// finish merges the row's partials and writes the result. Not installed.
// The slices, the partial of a slice and the merge are these host-and-
// device functions, so that the CPU twin (greedy_grid_cpu) walks the same
// grid serially and is tested against at::argmax and log_softmax at odd
// shapes where no GPU is.

#include <c10/macros/Macros.h>

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace statickv::reference::detail {

/// A value and where it is: the larger value wins and, on a tie, the lower
/// index (torch's argmax); index -1 is empty.
struct Best {
  float value;
  int64_t index;
};

C10_HOST_DEVICE inline Best better(Best a, Best b) {
  if (a.index < 0) return b;
  if (b.index < 0) return a;
  if (b.value > a.value || (b.value == a.value && b.index < a.index)) return b;
  return a;
}

/// A slice's share of the log-normalizer: its max and the sum of
/// exp(x - max) over it (top -inf: empty).
struct Normalizer {
  float top;
  double sum;
};

C10_HOST_DEVICE inline Normalizer merge(Normalizer a, Normalizer b) {
  if (a.top == -INFINITY) return b;
  if (b.top == -INFINITY) return a;
  const float top = a.top > b.top ? a.top : b.top;
  return Normalizer{top, a.sum * ::exp(static_cast<double>(a.top) - top) +
                             b.sum * ::exp(static_cast<double>(b.top) - top)};
}

/// Elements per block slice: the row split evenly, rounded up to a
/// multiple of 4 so that every slice starts 16 bytes into an aligned row.
C10_HOST_DEVICE inline int64_t slice_size(int64_t vocab, int64_t ctas) {
  return ((vocab + ctas - 1) / ctas + 3) / 4 * 4;
}

/// Slice c of a row: [begin, end), possibly empty at the end.
C10_HOST_DEVICE inline int64_t slice_begin(int64_t vocab, int64_t ctas, int64_t c) {
  const int64_t at = c * slice_size(vocab, ctas);
  return at < vocab ? at : vocab;
}

/// Blocks per row: about two per multiprocessor over the batch, at least
/// one, and none with fewer than `least` elements.
inline int64_t grid_ctas(int64_t vocab, int64_t batch, int64_t sms, int64_t least) {
  const int64_t by_sms = (2 * sms + batch - 1) / std::max<int64_t>(batch, 1);
  const int64_t by_vocab = std::max<int64_t>(1, vocab / std::max<int64_t>(least, 1));
  return std::max<int64_t>(1, std::min(by_sms, by_vocab));
}

/// The CPU twin: rows [0, b) of logits [b, vocab] (float32, contiguous)
/// reduced over the same `ctas` slices and merged in block order, as the
/// last block merges them. ids [b] and log-normalizers (top + log(sum))
/// [b] out.
inline void greedy_grid_cpu(const float* logits, int64_t b, int64_t vocab, int64_t ctas,
                            int64_t* ids, float* log_normalizers) {
  for (int64_t r = 0; r < b; ++r) {
    const float* x = logits + r * vocab;
    Best best{-INFINITY, -1};
    Normalizer norm{-INFINITY, 0.0};
    for (int64_t c = 0; c < ctas; ++c) {
      const int64_t begin = slice_begin(vocab, ctas, c), end = slice_begin(vocab, ctas, c + 1);
      Best part{-INFINITY, -1};
      float top = -INFINITY;
      for (int64_t i = begin; i < end; ++i)
        part = better(part, Best{x[i], i}), top = std::max(top, x[i]);
      double sum = 0;
      for (int64_t i = begin; i < end; ++i) sum += std::exp(x[i] - top);
      best = better(best, part);
      if (end > begin) norm = merge(norm, Normalizer{top, sum});
    }
    ids[r] = best.index < 0 ? 0 : best.index;
    log_normalizers[r] = static_cast<float>(norm.top + std::log(norm.sum));
  }
}

}  // namespace statickv::reference::detail
