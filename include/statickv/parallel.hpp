#pragma once
// Note [CPU kernels' threads] (docs/design.md): statickv's CPU kernels split
// their loops over LibTorch's intra-op threads with at::parallel_for, which
// reaches those threads only from sources compiled with OpenMP when
// LibTorch's CPU backend is OpenMP. kernel_threads() says what the compiled
// library reaches, so a build that lost the flag shows it.

#include <cstdint>

namespace statickv {

/// How many threads at::parallel_for runs a loop on from statickv's
/// compiled sources (src/), measured with a loop of that many items:
/// at::get_num_threads() in a build that reaches the intra-op threads, 1 in
/// one that does not.
int64_t kernel_threads();

}  // namespace statickv
