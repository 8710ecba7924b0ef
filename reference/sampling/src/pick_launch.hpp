#pragma once
// The fused CUDA pick's launch (pick_cuda.cu): its arguments as raw
// pointers into FusedPick's tensors (pick_fused.hpp). Free of ATen, so the
// kernel compiles without it; pick_cuda.cpp makes the arguments and checks
// the launch.

#include "pick_grid.hpp"

#include <cuda_runtime_api.h>

#include <cstdint>

namespace statickv::reference::detail {

/// Threads per block of the fused pick.
constexpr int kPickThreads = 512;

/// FusedPick's tensors and sizes as the kernel reads them.
struct PickArgs {
  const float* logits;
  const float* params;
  int64_t* keys;
  bool* generated;
  bool* seen;
  float* penalty;
  const int64_t* bias_ids;
  const float* bias_vals;
  const int64_t* stop_ids;
  const int64_t* hashed_ids;
  const int64_t* take;
  const int64_t* top_ids;
  const float* top_logits;
  float* out;
  float* scratch;
  int64_t vocab, max_bias, max_stop, alternatives, width;
  bool logprobs;
  // The greedy grid (pick_grid.hpp): blocks per row (0: off), their
  // partials [b, ctas] and each row's count of finished blocks.
  int64_t ctas;
  Best* best_parts;
  Normalizer* norm_parts;
  unsigned int* done;
};

/// One block per row, or a.ctas for a row on the greedy grid, for `rows`
/// rows on `stream`.
void launch_fused_pick(const PickArgs& a, int64_t rows, cudaStream_t stream);

}  // namespace statickv::reference::detail
