#pragma once
// The draws' host mirrors and the host sampler (docs/sampling.md): the
// oracle the head's tests hold its draws and distributions to, and
// statickv_bench_step's host baseline. No decode loop calls them.

#include <ATen/ATen.h>

#include <cstdint>

namespace statickv::reference {

/// The counter-based draw (Note [sampling head]): Gumbel noise for vocabulary
/// ids `ids` [b, n] (int64) of rows whose per-draw keys are `keys` [b]
/// (int64 in [0, 2^32)), from integer tensor ops only: the same bits on
/// every device. float32 [b, n].
at::Tensor sampling_noise(const at::Tensor& keys, const at::Tensor& ids);

/// The host sampler (tests and the benchmark's baseline): softmax(logits /
/// temperature) over transformers' top-k then top-p (the same rule as the
/// head's), per row of logits [..., vocab] (any device), on the CPU in the
/// logits' dtype.
at::Tensor host_sampling_probs(const at::Tensor& logits, double temperature, int64_t top_k,
                               double top_p);
/// One token per row of logits [b, vocab] drawn from host_sampling_probs
/// with `generator` (a seeded CPU generator). int64 [b] on the CPU.
at::Tensor host_sample_tokens(const at::Tensor& logits, double temperature, int64_t top_k,
                              double top_p, at::Generator& generator);

/// The per-draw key of a row with `seed` at draw `index`, as pick computes
/// it on the device (a host mirror for tests and docs).
int64_t draw_key(uint64_t seed, int64_t index);
}  // namespace statickv::reference
