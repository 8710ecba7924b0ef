#pragma once
// A command run in a child process, for tests that start a program or a copy
// of themselves (a different environment, a rank) and read what it printed.

#include <catch2/catch.hpp>

#include <sys/wait.h>

#include <chrono>
#include <cstdio>
#include <string>

namespace statickv::test {

struct CommandRun {
  std::string output;  ///< what the command wrote to its stdout
  int status = -1;     ///< its exit status, or 128 + the signal that ended it
  double seconds = 0;  ///< wall time from start to exit
};

/// Runs `command` through /bin/sh and waits for it (redirect stderr in the
/// command to collect it too).
inline CommandRun run_command(const std::string& command) {
  CommandRun run;
  const auto start = std::chrono::steady_clock::now();
  FILE* pipe = popen(command.c_str(), "r");
  REQUIRE(pipe != nullptr);
  char buffer[4096];
  while (size_t n = fread(buffer, 1, sizeof(buffer), pipe)) run.output.append(buffer, n);
  const int status = pclose(pipe);
  run.status = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
  run.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return run;
}

}  // namespace statickv::test
