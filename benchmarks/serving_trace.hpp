#pragma once
// What the serving benchmarks share (statickv_bench_serving,
// statickv_bench_prefix): one request's outcome, the trace's summary
// (throughput, time to first token and per-token latency percentiles), the
// clock arithmetic of a replayed trace, and their JSON and table rows.

#include "bench_util.hpp"

#include <statickv/engine/scheduler.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <vector>

namespace statickv::bench {

using reference::ServeClock;

/// One request's outcome, in seconds from its arrival.
struct Served {
  std::vector<int64_t> tokens;
  double ttft = 0, per_token = 0, finish = 0;  // finish: from the trace's start
};

struct Summary {
  double throughput = 0, makespan = 0;
  double ttft_p50 = 0, ttft_p99 = 0, tpot_p50 = 0, tpot_p99 = 0;
};

inline double percentile(std::vector<double> v, double p) {
  if (v.empty()) return 0.0;
  std::sort(v.begin(), v.end());
  const size_t rank = static_cast<size_t>(std::ceil(p * static_cast<double>(v.size())));
  return v[std::min(v.size() - 1, rank == 0 ? 0 : rank - 1)];
}

inline Summary summarize(const std::vector<Served>& served, int64_t tokens) {
  Summary s;
  std::vector<double> ttft, tpot;
  for (const Served& r : served) {
    s.makespan = std::max(s.makespan, r.finish);
    ttft.push_back(r.ttft);
    if (r.tokens.size() >= 2) tpot.push_back(r.per_token);
  }
  s.throughput = s.makespan > 0 ? static_cast<double>(tokens) / s.makespan : 0.0;
  s.ttft_p50 = percentile(ttft, 0.5);
  s.ttft_p99 = percentile(ttft, 0.99);
  s.tpot_p50 = percentile(tpot, 0.5);
  s.tpot_p99 = percentile(tpot, 0.99);
  return s;
}

inline ServeClock::time_point due_at(ServeClock::time_point start, double seconds) {
  return start +
         std::chrono::duration_cast<ServeClock::duration>(std::chrono::duration<double>(seconds));
}

inline double since(ServeClock::time_point start, ServeClock::time_point t) {
  return std::chrono::duration<double>(t - start).count();
}

inline Json to_json(const Summary& s) {
  return Json::object({{"tokens_per_s", s.throughput},
                       {"makespan_s", s.makespan},
                       {"ttft_p50_s", s.ttft_p50},
                       {"ttft_p99_s", s.ttft_p99},
                       {"per_token_p50_s", s.tpot_p50},
                       {"per_token_p99_s", s.tpot_p99}});
}

inline void print_row(const char* name, const Summary& s) {
  fmt::print("{:<12} {:>10.1f} {:>10.2f} {:>10.1f} {:>10.1f} {:>12.2f} {:>12.2f}\n", name,
             s.throughput, s.makespan, s.ttft_p50 * 1e3, s.ttft_p99 * 1e3, s.tpot_p50 * 1e3,
             s.tpot_p99 * 1e3);
}

}  // namespace statickv::bench
