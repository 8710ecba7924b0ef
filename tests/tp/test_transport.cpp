// transport.hpp within seconds, in this process and copies of it: the
// launcher environment read by rendezvous_from_env (and its refusals by
// variable), connect for a world of 1 over Gloo on loopback, and
// spawn_ranks starting ranks of this very executable (the hidden
// [transport_rank] case below is what they run), each rank's environment,
// and its failure reporting: the first failure's status, the others killed
// after the grace. Decoding across ranks end to end is test_tp.cpp.

#include "support.hpp"

#include <statickv/tp/transport.hpp>

#include <signal.h>
#include <unistd.h>

#include <chrono>
#include <cstdlib>
#include <optional>
#include <string>
#include <thread>
#include <utility>
#include <vector>

namespace sr = statickv::reference;
using statickv::test::require_error;

namespace {

const char* const kLauncherVariables[] = {"RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR",
                                          "MASTER_PORT"};
/// What the spawned ranks do: "check" their rendezvous, "fail", "kill".
const char* const kRankMode = "STATICKV_TEST_TRANSPORT_RANK";

using Variables = std::vector<std::pair<const char*, const char*>>;

/// The launcher variables set to `values` (the rest unset) for one scope.
class LauncherEnv {
 public:
  explicit LauncherEnv(const Variables& values) {
    for (const char* name : kLauncherVariables) {
      const char* was = std::getenv(name);
      saved_.emplace_back(name, was ? std::optional<std::string>(was) : std::nullopt);
      ::unsetenv(name);
    }
    for (const auto& [name, value] : values) ::setenv(name, value, 1);
  }
  ~LauncherEnv() {
    for (const auto& [name, was] : saved_) {
      if (was) {
        ::setenv(name, was->c_str(), 1);
      } else {
        ::unsetenv(name);
      }
    }
  }
  LauncherEnv(const LauncherEnv&) = delete;
  LauncherEnv& operator=(const LauncherEnv&) = delete;

 private:
  std::vector<std::pair<const char*, std::optional<std::string>>> saved_;
};

/// spawn_ranks of this executable running the [transport_rank] case in `mode`.
int spawn_in_mode(const char* mode, int64_t world, std::chrono::milliseconds grace) {
  ::setenv(kRankMode, mode, 1);
  const LauncherEnv none{Variables()};
  const int status = sr::spawn_ranks(world, {"statickv_tp_tests", "[transport_rank]"}, grace);
  ::unsetenv(kRankMode);
  return status;
}

double seconds_since(std::chrono::steady_clock::time_point start) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace

TEST_CASE("rendezvous_from_env is empty without WORLD_SIZE and reads torchrun's variables",
          "[transport]") {
  {
    const LauncherEnv env(Variables{{"RANK", "1"}});
    CHECK_FALSE(sr::rendezvous_from_env().has_value());
  }
  {
    const LauncherEnv env(Variables{{"WORLD_SIZE", "4"}, {"RANK", "2"}});
    const std::optional<sr::Rendezvous> where = sr::rendezvous_from_env();
    REQUIRE(where.has_value());
    CHECK(where->world == 4);
    CHECK(where->rank == 2);
    CHECK(where->local_rank == 2);  // LOCAL_RANK unset: the rank
    CHECK(where->master_addr == "127.0.0.1");
    CHECK(where->master_port == 29500);
    CHECK(where->timeout == std::chrono::seconds(20));
  }
  const LauncherEnv env(Variables{{"WORLD_SIZE", "2"},
                                  {"RANK", "1"},
                                  {"LOCAL_RANK", "0"},
                                  {"MASTER_ADDR", "10.1.2.3"},
                                  {"MASTER_PORT", "1234"}});
  const std::optional<sr::Rendezvous> where = sr::rendezvous_from_env();
  REQUIRE(where.has_value());
  CHECK(where->world == 2);
  CHECK(where->rank == 1);
  CHECK(where->local_rank == 0);
  CHECK(where->master_addr == "10.1.2.3");
  CHECK(where->master_port == 1234);
}

TEST_CASE("rendezvous_from_env refuses a missing or malformed variable by its name",
          "[transport][errors]") {
  const auto refused = [](const Variables& values, const std::vector<std::string>& fragments) {
    const LauncherEnv env(values);
    require_error([] { sr::rendezvous_from_env(); }, fragments);
  };
  refused({{"WORLD_SIZE", "2"}}, {"RANK", "unset"});
  refused({{"WORLD_SIZE", "two"}, {"RANK", "0"}}, {"WORLD_SIZE", "integer", "\"two\""});
  refused({{"WORLD_SIZE", "2"}, {"RANK", "1x"}}, {"RANK", "integer", "\"1x\""});
  refused({{"WORLD_SIZE", "2"}, {"RANK", "0"}, {"LOCAL_RANK", "a"}}, {"LOCAL_RANK", "\"a\""});
  refused({{"WORLD_SIZE", "2"}, {"RANK", "2"}}, {"rank", "[0, 2)", "got 2"});
  refused({{"WORLD_SIZE", "0"}, {"RANK", "0"}}, {"world", ">= 1", "got 0"});
  refused({{"WORLD_SIZE", "1"}, {"RANK", "0"}, {"MASTER_PORT", "70000"}},
          {"MASTER_PORT", "[1, 65535]", "70000"});
  refused({{"WORLD_SIZE", "1"}, {"RANK", "0"}, {"MASTER_PORT", "0"}}, {"MASTER_PORT", "got 0"});
}

TEST_CASE("free_loopback_port gives an ephemeral port nothing listens on", "[transport]") {
  const int64_t port = sr::free_loopback_port();
  CHECK(port > 1024);
  CHECK(port < 65536);
  // Free: a store can be served on it at once (connect, below, serves one).
  sr::Rendezvous where;
  where.master_port = port;
  where.timeout = std::chrono::seconds(5);
  CHECK(sr::connect(where, at::Device(at::kCPU))->world() == 1);
}

TEST_CASE("connect with a world of one gives a communicator whose collectives are identities",
          "[transport]") {
  sr::Rendezvous where;
  where.master_port = sr::free_loopback_port();
  where.timeout = std::chrono::seconds(5);
  const std::shared_ptr<sr::Communicator> comm = sr::connect(where, at::Device(at::kCPU));
  REQUIRE(comm != nullptr);
  CHECK(comm->rank() == 0);
  CHECK(comm->world() == 1);
  at::Tensor t = at::arange(6, at::kFloat);
  comm->all_reduce_sum(t);
  CHECK(t.equal(at::arange(6, at::kFloat)));
  const at::Tensor local = at::arange(6, at::kFloat).view({2, 3});
  CHECK(comm->all_gather_last(local).equal(local));
  std::string bytes = "rank 0's";
  comm->broadcast_bytes(bytes);
  CHECK(bytes == "rank 0's");
  comm->check_same("step", 7);
  comm->barrier();
  // Refused before any store is served: a rank outside the world, a device
  // neither cpu nor cuda.
  sr::Rendezvous outside = where;
  outside.rank = 1;
  require_error([&] { sr::connect(outside, at::Device(at::kCPU)); }, {"rank", "[0, 1)", "got 1"});
  require_error([&] { sr::connect(where, at::Device(at::kMeta)); },
                {"device", "cpu or cuda", "meta"});
}

TEST_CASE("spawn_ranks starts ranks of this executable, each with its launcher environment",
          "[transport]") {
  const auto start = std::chrono::steady_clock::now();
  CHECK(spawn_in_mode("check", 2, std::chrono::seconds(10)) == 0);
  CHECK(seconds_since(start) < 60);
  require_error([] { sr::spawn_ranks(0, {"statickv_tp_tests"}); }, {"--tp", ">= 1", "got 0"});
  require_error([] { sr::spawn_ranks(1, {}); }, {"argv", "program name"});
}

TEST_CASE("spawn_ranks returns the first failure's status and kills ranks past the grace",
          "[transport]") {
  // Rank 1 exits 7 at once; rank 0 would sleep a minute.
  auto start = std::chrono::steady_clock::now();
  CHECK(spawn_in_mode("fail", 2, std::chrono::milliseconds(300)) == 7);
  CHECK(seconds_since(start) < 30);
  // A rank killed by a signal is a failure too.
  start = std::chrono::steady_clock::now();
  CHECK(spawn_in_mode("kill", 2, std::chrono::seconds(10)) != 0);
  CHECK(seconds_since(start) < 30);
}

TEST_CASE("a rank that spawn_ranks started, for the spawn_ranks cases", "[.][transport_rank]") {
  const char* mode = std::getenv(kRankMode);
  REQUIRE(mode != nullptr);
  std::optional<sr::Rendezvous> where = sr::rendezvous_from_env();
  REQUIRE(where.has_value());
  const std::string m = mode;
  if (m == "fail") {
    if (where->rank == 1) std::_Exit(7);
    std::this_thread::sleep_for(std::chrono::seconds(60));
    std::_Exit(0);
  }
  if (m == "kill") {
    if (where->rank == 1) ::kill(::getpid(), SIGKILL);
    std::_Exit(0);
  }
  CHECK(where->world == 2);
  CHECK(where->local_rank == where->rank);
  CHECK(where->master_addr == "127.0.0.1");
  // The environment is connect's: the ranks join one group and sum.
  where->timeout = std::chrono::seconds(10);
  const std::shared_ptr<sr::Communicator> comm = sr::connect(*where, at::Device(at::kCPU));
  at::Tensor t = at::full({3}, static_cast<float>(where->rank + 1));
  comm->all_reduce_sum(t);
  CHECK(t.equal(at::full({3}, 3.0f)));
}
