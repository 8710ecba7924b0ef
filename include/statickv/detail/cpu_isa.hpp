#pragma once
// What the CPU's kernels may use beyond the baseline x86-64 the library is
// compiled for: a kernel with an AVX2 + FMA build (a function with
// __attribute__((target("avx2,fma")))) takes it when the processor running it
// has both, chosen at run time, and its portable build elsewhere.

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#define STATICKV_CPU_AVX2 1
#endif

namespace statickv::detail {

/// Whether this processor has AVX2 and FMA (false off x86-64 or off GCC and
/// Clang), asked once.
inline bool cpu_has_avx2_fma() {
#ifdef STATICKV_CPU_AVX2
  static const bool yes = __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma");
  return yes;
#else
  return false;
#endif
}

}  // namespace statickv::detail
