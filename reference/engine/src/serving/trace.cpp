// make_trace: Poisson arrivals (exponential gaps of mean 1 / rate) and
// log-uniform lengths.

#include <statickv/engine/trace.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <cmath>
#include <random>

namespace statickv::reference {

namespace {

/// Uniform in [0, 1) from the top 53 bits.
double uniform(std::mt19937_64& rng) { return static_cast<double>(rng() >> 11) * 0x1.0p-53; }

/// An integer in [lo, hi] whose logarithm is uniform: P(n) ~ 1/n.
int64_t log_uniform(std::mt19937_64& rng, int64_t lo, int64_t hi) {
  const double a = std::log(static_cast<double>(lo));
  const double b = std::log(static_cast<double>(hi) + 1.0);
  const auto n = static_cast<int64_t>(std::floor(std::exp(a + uniform(rng) * (b - a))));
  return std::clamp(n, lo, hi);
}

void check_range(const char* lo_name, int64_t lo, const char* hi_name, int64_t hi) {
  TORCH_CHECK(lo >= 1, lo_name, ": expected >= 1 but got ", lo);
  TORCH_CHECK(hi >= lo, hi_name, ": expected >= ", lo_name, "=", lo, " but got ", hi);
}

}  // namespace

std::vector<TraceRequest> make_trace(const TraceOptions& o) {
  TORCH_CHECK(o.requests >= 0, "requests: expected >= 0 but got ", o.requests);
  TORCH_CHECK(std::isfinite(o.rate) && o.rate >= 0.0,
              "rate: expected a finite number >= 0 (0 = all at once) but got ", o.rate);
  check_range("min_prompt", o.min_prompt, "max_prompt", o.max_prompt);
  check_range("min_new_tokens", o.min_new_tokens, "max_new_tokens", o.max_new_tokens);
  TORCH_CHECK(o.vocab_size >= 1, "vocab_size: expected >= 1 but got ", o.vocab_size);
  std::mt19937_64 rng(o.seed);
  std::vector<TraceRequest> trace;
  double t = 0.0;
  for (int64_t i = 0; i < o.requests; ++i) {
    if (o.rate > 0.0) t += -std::log1p(-uniform(rng)) / o.rate;
    TraceRequest r;
    r.arrival = t;
    const int64_t len = log_uniform(rng, o.min_prompt, o.max_prompt);
    for (int64_t k = 0; k < len; ++k) {
      r.prompt.push_back(static_cast<int64_t>(rng() % static_cast<uint64_t>(o.vocab_size)));
    }
    r.max_new_tokens = log_uniform(rng, o.min_new_tokens, o.max_new_tokens);
    trace.push_back(std::move(r));
  }
  return trace;
}

}  // namespace statickv::reference
