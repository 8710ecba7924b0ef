// The transport spike of issue #22 (docs/tensor_parallel.md, "The transport
// decision"): TCPStore rendezvous plus a ProcessGroupGloo all-reduce between
// two processes on loopback, compiled against Debian's libgloo-dev headers.
// Run without arguments it spawns itself twice (posix_spawn) as rank 0 and 1
// and exits non-zero unless both ranks saw the exact sum.
#include <spawn.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>
#include <vector>

#include <torch/csrc/distributed/c10d/ProcessGroupGloo.hpp>
#include <torch/csrc/distributed/c10d/TCPStore.hpp>

extern char** environ;

namespace {

constexpr std::chrono::seconds kTimeout{20};

int run_rank(int rank, int world, uint16_t port) {
  c10d::TCPStoreOptions store_options;
  store_options.port = port;
  store_options.isServer = rank == 0;
  store_options.numWorkers = world;
  store_options.timeout = kTimeout;
  auto store = c10::make_intrusive<c10d::TCPStore>("127.0.0.1", store_options);
  auto options = c10d::ProcessGroupGloo::Options::create(kTimeout);
  options->devices.push_back(c10d::ProcessGroupGloo::createDeviceForHostname("127.0.0.1"));
  options->threads = 1;
  auto group = c10::make_intrusive<c10d::ProcessGroupGloo>(store, rank, world, options);
  for (int round = 0; round < 3; ++round) {
    std::vector<at::Tensor> tensors{at::full({1000}, float(rank + 1 + round))};
    group->allreduce(tensors)->wait();
    float expected = 0;
    for (int r = 0; r < world; ++r) expected += float(r + 1 + round);
    if (!tensors[0].eq(expected).all().item<bool>()) {
      std::fprintf(stderr, "rank %d round %d: wrong sum %f, expected %f\n", rank, round,
                   tensors[0][0].item<float>(), expected);
      return 1;
    }
  }
  group->barrier()->wait();
  std::printf("rank %d of %d: allreduce ok\n", rank, world);
  return 0;
}

int spawn_ranks(const char* self, int world, uint16_t port) {
  std::vector<pid_t> pids;
  for (int rank = 0; rank < world; ++rank) {
    std::string r = std::to_string(rank), w = std::to_string(world), p = std::to_string(port);
    char* argv[] = {const_cast<char*>(self), r.data(), w.data(), p.data(), nullptr};
    pid_t pid = 0;
    if (posix_spawn(&pid, self, nullptr, nullptr, argv, environ) != 0) return 1;
    pids.push_back(pid);
  }
  int failures = 0;
  for (pid_t pid : pids) {
    int status = 0;
    waitpid(pid, &status, 0);
    failures += !(WIFEXITED(status) && WEXITSTATUS(status) == 0);
  }
  return failures == 0 ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc == 4)
    return run_rank(std::atoi(argv[1]), std::atoi(argv[2]), uint16_t(std::atoi(argv[3])));
  uint16_t port = uint16_t(29600 + getpid() % 1000);
  return spawn_ranks("/proc/self/exe", 2, port);
}
