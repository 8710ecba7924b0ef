#pragma once
// The intra-op threads of a CPU engine fitted to the CPUs other processes
// leave idle (Note [threads beside a co-tenant], docs/design.md).
//
// OpenMP's parallel ops end at a barrier that waits for the slowest thread,
// so one intra-op thread sharing its CPU with a busy process slows every
// parallel op to that CPU's time slices: with two threads on two CPUs and a
// busy loop on one, a server's decode step takes 4x as long as with one
// thread (BENCHMARKS.md item 23). CpuThreads watches how much CPU time other
// processes take on the CPUs this process may run on and gives the engine
// one thread fewer for each CPU they keep busy, and the threads back when
// they leave.

#include <cstdint>
#include <functional>
#include <optional>

namespace statickv::reference {

/// The CPUs this process may run on, their busy time and this process's
/// CPU time, in seconds, at one moment.
struct CpuSample {
  double wall = 0;  ///< steady clock
  double busy = 0;  ///< every process's CPU time on those CPUs (stolen time included)
  double self = 0;  ///< this process's CPU time (every thread)
};

/// A sample now; nullopt where /proc/stat cannot be read (not Linux).
std::optional<CpuSample> sample_cpus();

/// The CPUs other processes kept busy between two samples: their CPU
/// seconds over the wall seconds, >= 0.
double others_busy(const CpuSample& before, const CpuSample& after);

/// The rule: max_threads less the CPUs others keep busy, rounded to the
/// nearest whole CPU, and at least 1.
int threads_for(int max_threads, double others_busy_cpus);

class CpuThreads {
 public:
  using Sampler = std::function<std::optional<CpuSample>()>;

  /// max_threads: the most intra-op threads (>= 1); interval_s: seconds
  /// between looks (> 0); sampler: where the samples come from (tests give
  /// their own).
  explicit CpuThreads(int max_threads, double interval_s = 0.5, Sampler sampler = sample_cpus);

  /// Call between steps, on the thread that runs them. Once per interval it
  /// samples the CPUs; when the rule's count differs from the current one
  /// at two looks in a row, sets at::set_num_threads to it. Returns the
  /// count now.
  int update();

  int threads() const { return threads_; }
  int max_threads() const { return max_threads_; }
  int64_t changes() const { return changes_; }  ///< times the count changed
  double others() const { return others_; }     ///< the last look's others_busy

 private:
  int max_threads_, threads_;
  double interval_s_;
  Sampler sampler_;
  double last_look_ = 0;  // steady clock seconds of the last look
  std::optional<CpuSample> last_;
  std::optional<int> pending_;  // the rule's count at the last look, if it differed
  int64_t changes_ = 0;
  double others_ = 0;
};

}  // namespace statickv::reference
