// The rendezvous: the launcher environment, the TCPStore, the process group.

#include "communicator.hpp"

#include <statickv/tp/transport.hpp>

#include <torch/csrc/distributed/c10d/TCPStore.hpp>

#include <cstdlib>
#include <string>

namespace statickv::reference {

namespace {

/// An integer environment variable; `fallback` when unset.
int64_t env_int(const char* name, std::optional<int64_t> fallback) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0') {
    TORCH_CHECK(fallback.has_value(), name,
                ": expected an integer in the environment (WORLD_SIZE is set) but it is unset");
    return *fallback;
  }
  char* end = nullptr;
  const long long value = std::strtoll(text, &end, 10);
  TORCH_CHECK(*end == '\0', name, ": expected an integer but got \"", text, "\"");
  return value;
}

bool is_loopback(const std::string& addr) {
  return addr == "localhost" || addr.rfind("127.", 0) == 0 || addr == "::1";
}

}  // namespace

std::optional<Rendezvous> rendezvous_from_env() {
  if (std::getenv("WORLD_SIZE") == nullptr) return std::nullopt;
  Rendezvous where;
  where.world = env_int("WORLD_SIZE", std::nullopt);
  where.rank = env_int("RANK", std::nullopt);
  where.local_rank = env_int("LOCAL_RANK", where.rank);
  where.master_port = env_int("MASTER_PORT", where.master_port);
  if (const char* addr = std::getenv("MASTER_ADDR"); addr != nullptr && *addr != '\0') {
    where.master_addr = addr;
  }
  detail::check_rank_of_world(where.rank, where.world);
  TORCH_CHECK(where.master_port > 0 && where.master_port < 65536,
              "MASTER_PORT: expected a port in [1, 65535] but got ", where.master_port);
  return where;
}

std::shared_ptr<Communicator> connect(const Rendezvous& where, at::Device device) {
  detail::check_rank_of_world(where.rank, where.world);
  TORCH_CHECK(device.is_cpu() || device.is_cuda(), "device: expected cpu or cuda but got ", device);
  c10d::TCPStoreOptions options;
  options.port = static_cast<uint16_t>(where.master_port);
  options.isServer = where.rank == 0;
  options.numWorkers = static_cast<size_t>(where.world);
  options.timeout = where.timeout;
  auto store = c10::make_intrusive<c10d::TCPStore>(where.master_addr, options);
  c10::intrusive_ptr<c10d::Backend> group =
      device.is_cpu() ? tp::make_gloo_group(store, where.rank, where.world,
                                            is_loopback(where.master_addr), where.timeout)
                      : tp::make_nccl_group(store, where.rank, where.world, where.timeout);
  return std::make_shared<tp::ProcessGroupCommunicator>(store, group, where.rank, where.world,
                                                        device);
}

}  // namespace statickv::reference
