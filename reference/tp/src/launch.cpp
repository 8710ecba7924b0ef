// `--tp N` on one machine: N copies of this executable, started with
// posix_spawn (a bare fork after LibTorch has started its thread pools would
// copy locks held by threads that do not exist in the child).

#include <statickv/tp/transport.hpp>

#include <netinet/in.h>
#include <signal.h>
#include <spawn.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <string>
#include <thread>
#include <vector>

extern char** environ;

namespace statickv::reference {

int64_t free_loopback_port() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  TORCH_CHECK(fd >= 0, "free_loopback_port: socket() failed");
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  socklen_t len = sizeof(addr);
  const bool ok = ::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) == 0 &&
                  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) == 0;
  ::close(fd);
  TORCH_CHECK(ok, "free_loopback_port: no free port on 127.0.0.1");
  return ntohs(addr.sin_port);
}

namespace {

// This process's environment without the launcher variables, plus rank's.
std::vector<std::string> rank_environment(int64_t rank, int64_t world, int64_t port) {
  std::vector<std::string> env;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string entry(*e);
    const std::string name = entry.substr(0, entry.find('='));
    if (name != "RANK" && name != "WORLD_SIZE" && name != "LOCAL_RANK" && name != "MASTER_ADDR" &&
        name != "MASTER_PORT") {
      env.push_back(entry);
    }
  }
  env.push_back("RANK=" + std::to_string(rank));
  env.push_back("LOCAL_RANK=" + std::to_string(rank));
  env.push_back("WORLD_SIZE=" + std::to_string(world));
  env.push_back("MASTER_ADDR=127.0.0.1");
  env.push_back("MASTER_PORT=" + std::to_string(port));
  return env;
}

std::vector<char*> pointers(std::vector<std::string>& strings) {
  std::vector<char*> out;
  for (std::string& s : strings) out.push_back(s.data());
  out.push_back(nullptr);
  return out;
}

int exit_status(int status) {
  if (WIFEXITED(status)) return WEXITSTATUS(status);
  return WIFSIGNALED(status) ? 128 + WTERMSIG(status) : 1;
}

// Waits for every child; after the first failure, gives the rest `grace`.
int wait_ranks(std::vector<pid_t>& pids, std::chrono::milliseconds grace) {
  int first_failure = 0;
  auto deadline = std::chrono::steady_clock::time_point::max();
  size_t running = pids.size();
  while (running > 0) {
    int status = 0;
    const pid_t pid = ::waitpid(-1, &status, WNOHANG);
    if (pid <= 0) {
      if (std::chrono::steady_clock::now() > deadline) {
        for (pid_t p : pids) {
          if (p > 0) ::kill(p, SIGKILL);
        }
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      continue;
    }
    for (size_t rank = 0; rank < pids.size(); ++rank) {
      if (pids[rank] != pid) continue;
      pids[rank] = -1;
      --running;
      const int code = exit_status(status);
      if (code == 0) continue;
      std::fprintf(stderr, "statickv: tensor-parallel rank %zu exited with status %d\n", rank,
                   code);
      if (first_failure == 0) {
        first_failure = code;
        deadline = std::chrono::steady_clock::now() + grace;
      }
    }
  }
  return first_failure;
}

}  // namespace

int spawn_ranks(int64_t world, const std::vector<std::string>& argv,
                std::chrono::milliseconds grace) {
  TORCH_CHECK(world >= 1, "--tp: expected a world size >= 1 but got ", world);
  TORCH_CHECK(!argv.empty(), "spawn_ranks: expected argv with at least the program name");
  const int64_t port = free_loopback_port();
  std::vector<pid_t> pids;
  for (int64_t rank = 0; rank < world; ++rank) {
    std::vector<std::string> args = argv, env = rank_environment(rank, world, port);
    std::vector<char*> arg_ptrs = pointers(args), env_ptrs = pointers(env);
    pid_t pid = 0;
    const int rc =
        ::posix_spawn(&pid, "/proc/self/exe", nullptr, nullptr, arg_ptrs.data(), env_ptrs.data());
    if (rc != 0) {
      for (pid_t p : pids) ::kill(p, SIGKILL);
      TORCH_CHECK(false, "--tp: starting rank ", rank, " failed: posix_spawn returned ", rc);
    }
    pids.push_back(pid);
  }
  return wait_ranks(pids, grace);
}

}  // namespace statickv::reference
