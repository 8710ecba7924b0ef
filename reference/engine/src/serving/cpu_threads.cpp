// CPU threads fitted to what other processes leave idle (cpu_threads.hpp).

#include <statickv/engine/cpu_threads.hpp>

#include <ATen/Parallel.h>
#include <c10/util/Exception.h>

#include <algorithm>
#include <cctype>
#include <chrono>
#include <cmath>
#include <fstream>
#include <set>
#include <sstream>
#include <string>
#include <utility>

#if defined(__linux__)
#include <sched.h>
#include <sys/resource.h>
#include <unistd.h>
#endif

namespace statickv::reference {

namespace {

#if defined(__linux__)
/// The CPUs this process may run on.
std::set<int> allowed_cpus() {
  std::set<int> cpus;
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) != 0) return cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c) {
    if (CPU_ISSET(c, &set)) cpus.insert(c);
  }
  return cpus;
}

/// Busy seconds of `cpus` from /proc/stat: user, nice, system, irq, softirq
/// and steal (a hypervisor's other guests are co-tenants too); -1 if unread.
double busy_seconds(const std::set<int>& cpus) {
  std::ifstream stat("/proc/stat");
  if (!stat) return -1;
  const double tick = static_cast<double>(sysconf(_SC_CLK_TCK));
  double busy = 0;
  std::string line;
  while (std::getline(stat, line)) {
    if (line.rfind("cpu", 0) != 0 || line.size() < 4 || !std::isdigit(line[3])) continue;
    std::istringstream fields(line.substr(3));
    int cpu = -1;
    double user = 0, nice = 0, system = 0, idle = 0, iowait = 0, irq = 0, softirq = 0, steal = 0;
    fields >> cpu >> user >> nice >> system >> idle >> iowait >> irq >> softirq >> steal;
    if (cpus.count(cpu)) busy += (user + nice + system + irq + softirq + steal) / tick;
  }
  return busy;
}

double self_seconds() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  auto seconds = [](const timeval& t) { return t.tv_sec + t.tv_usec * 1e-6; };
  return seconds(usage.ru_utime) + seconds(usage.ru_stime);
}
#endif

double now_seconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

}  // namespace

std::optional<CpuSample> sample_cpus() {
#if defined(__linux__)
  const double busy = busy_seconds(allowed_cpus());
  if (busy < 0) return std::nullopt;
  return CpuSample{now_seconds(), busy, self_seconds()};
#else
  return std::nullopt;
#endif
}

double others_busy(const CpuSample& before, const CpuSample& after) {
  const double wall = after.wall - before.wall;
  if (wall <= 0) return 0;
  const double others = (after.busy - before.busy) - (after.self - before.self);
  return std::max(0.0, others / wall);
}

int threads_for(int max_threads, double others_busy_cpus) {
  const int taken = static_cast<int>(std::lround(std::max(0.0, others_busy_cpus)));
  return std::clamp(max_threads - taken, 1, std::max(1, max_threads));
}

CpuThreads::CpuThreads(int max_threads, double interval_s, Sampler sampler)
    : max_threads_(max_threads),
      threads_(max_threads),
      interval_s_(interval_s),
      sampler_(std::move(sampler)) {
  TORCH_CHECK(max_threads >= 1, "CpuThreads max_threads: expected >= 1 but got ", max_threads);
  TORCH_CHECK(interval_s > 0 && std::isfinite(interval_s),
              "CpuThreads interval_s: expected a finite number > 0 but got ", interval_s);
  TORCH_CHECK(sampler_, "CpuThreads sampler: expected a function but got none");
  last_ = sampler_();
  last_look_ = now_seconds();
}

int CpuThreads::update() {
  if (!last_ || now_seconds() - last_look_ < interval_s_) return threads_;
  last_look_ = now_seconds();
  const std::optional<CpuSample> now = sampler_();
  if (!now) return threads_;
  others_ = others_busy(*last_, *now);
  last_ = now;
  const int want = threads_for(max_threads_, others_);
  if (want == threads_) {
    pending_.reset();
  } else if (pending_ == want) {  // two looks in a row: not a moment's noise
    threads_ = want;
    pending_.reset();
    ++changes_;
    at::set_num_threads(threads_);
  } else {
    pending_ = want;
  }
  return threads_;
}

}  // namespace statickv::reference
