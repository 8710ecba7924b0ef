#pragma once
// Request traces for serving tests and benchmarks: Poisson arrivals, prompt
// and output lengths log-uniform between a minimum and a maximum (many short
// requests, a few long ones, as in chat traffic), random token ids. Seeded
// and reproducible on every platform (its own arithmetic over
// std::mt19937_64, no std::*_distribution, whose algorithms the standard
// leaves to the library).

#include <cstdint>
#include <vector>

namespace statickv::reference {

struct TraceOptions {
  int64_t requests = 200;
  /// Mean arrivals per unit of time (seconds for a server; steps in the
  /// tests); 0 = every request at time 0 (static batching's best case).
  double rate = 0.0;
  int64_t min_prompt = 1, max_prompt = 64;
  int64_t min_new_tokens = 1, max_new_tokens = 64;
  int64_t vocab_size = 128;  ///< ids in [0, vocab_size)
  uint64_t seed = 0;
};

struct TraceRequest {
  double arrival = 0.0;  ///< non-decreasing along the trace
  std::vector<int64_t> prompt;
  int64_t max_new_tokens = 1;
};

/// The trace the options describe; checks them (c10::Error naming the field).
std::vector<TraceRequest> make_trace(const TraceOptions& options);

}  // namespace statickv::reference
