// statickv-serve's closing report (report.hpp).

#include "serve/report.hpp"

#include <statickv/cache.hpp>
#include <statickv/model/cpu_linear.hpp>

#include <cstdio>

namespace statickv::serve {

using namespace statickv::reference;

namespace {

// The cache's bytes, the staging buffer of a quantized cache on its own line.
void print_cache_bytes(const Cache& cache) {
  std::fprintf(stderr, "statickv-serve: cache %lld bytes (kv-dtype %s)\n",
               static_cast<long long>(cache.memory_bytes()), to_string(cache.config().kv_storage));
  if (cache.config().host_offload) {
    std::fprintf(stderr,
                 "statickv-serve: of which %lld bytes in host memory (offloaded keys and values), "
                 "%lld on the device (staging ring of two layers %lld)\n",
                 static_cast<long long>(cache.host_memory_bytes()),
                 static_cast<long long>(cache.device_memory_bytes()),
                 static_cast<long long>(cache.staging_bytes()));
  } else if (!cache.config().plain_storage()) {
    std::fprintf(stderr, "statickv-serve: of which staging buffer %lld bytes (one layer)\n",
                 static_cast<long long>(cache.staging_bytes()));
  }
}

// Which route a float32 CPU model's projections took (Note [CPU projections]).
void print_projections(const Cache& cache) {
  const CacheConfig& c = cache.config();
  if (!c.device.is_cpu() || c.dtype != at::kFloat) return;
  std::fprintf(stderr,
               "statickv-serve: projections of 1 to %lld rows by %s, more by %s (measured fastest "
               "on this CPU; stream loop %s)\n",
               static_cast<long long>(kStreamRows), route_name(linear_route()).c_str(),
               route_name(many_rows_route()).c_str(), stream_loop_isa().c_str());
}

}  // namespace

void report(const Scheduler& scheduler, const Options& o) {
  const SchedulerStats s = scheduler.stats();
  print_cache_bytes(scheduler.cache());
  print_projections(scheduler.cache());
  std::fprintf(stderr,
               "statickv-serve: %lld requests (%lld completed, %lld cancelled, %lld rejected), "
               "%lld steps (%lld with prefill, mean %.2f ms), occupancy %.3f, padded fraction "
               "%.3f, captures %lld, replays %lld, eager runs %lld\n",
               static_cast<long long>(s.submitted + s.rejected),
               static_cast<long long>(s.completed), static_cast<long long>(s.cancelled),
               static_cast<long long>(s.rejected), static_cast<long long>(s.steps),
               static_cast<long long>(s.mixed_steps), 1e3 * s.mean_step_seconds(), s.occupancy(),
               s.padded_fraction(), static_cast<long long>(s.runner.captures),
               static_cast<long long>(s.runner.replays),
               static_cast<long long>(s.runner.eager_runs));
  if (s.max_threads > 0) {
    std::fprintf(stderr, "statickv-serve: fitted threads: %d of %d at the end, %lld changes\n",
                 s.threads, s.max_threads, static_cast<long long>(s.thread_changes));
  }
  if (s.prefix_budget > 0) {
    std::fprintf(
        stderr,
        "statickv-serve: prefix cache: %lld hits, %lld prompt tokens reused, %lld entries "
        "holding %lld of %lld bytes, %lld evictions\n",
        static_cast<long long>(s.prefix_hits), static_cast<long long>(s.prefix_tokens_reused),
        static_cast<long long>(s.prefix_entries), static_cast<long long>(s.prefix_bytes),
        static_cast<long long>(s.prefix_budget), static_cast<long long>(s.prefix_evictions));
  }
  if (scheduler.options().speculate == 0) return;
  const SpeculationStats& spec = s.speculation;
  std::fprintf(stderr,
               "statickv-serve: speculation: %lld drafts per step by %s; acceptance rate %.1f%% "
               "(%lld of %lld drafts) over %lld verification steps\n",
               static_cast<long long>(scheduler.options().speculate),
               apps::drafting_name(o.spec).c_str(), 100.0 * spec.acceptance_rate(),
               static_cast<long long>(spec.accepted), static_cast<long long>(spec.drafted),
               static_cast<long long>(spec.verify_steps));
}

}  // namespace statickv::serve
