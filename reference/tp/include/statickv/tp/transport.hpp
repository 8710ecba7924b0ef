#pragma once
// The tensor-parallel transport and launcher (target statickv::tp;
// docs/tensor_parallel.md): a c10d TCPStore rendezvous, a c10d process group
// (Gloo on the CPU, NCCL on CUDA devices) behind the decoder's Communicator,
// and `--tp N`'s way of starting N ranks on this machine.

#include <statickv/model/tensor_parallel.hpp>

#include <ATen/ATen.h>

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace statickv::reference {

/// Where a rank finds its group: torchrun's environment (RANK, WORLD_SIZE,
/// MASTER_ADDR, MASTER_PORT, LOCAL_RANK).
struct Rendezvous {
  int64_t rank = 0;
  int64_t world = 1;
  int64_t local_rank = 0;  ///< the CUDA device index on a GPU machine
  std::string master_addr = "127.0.0.1";
  int64_t master_port = 29500;
  /// Of the store and of every collective: a peer that died or hangs turns
  /// into an error on every other rank within this time.
  std::chrono::milliseconds timeout{std::chrono::seconds(20)};
};

/// The launcher environment, or nullopt when WORLD_SIZE is unset. Throws
/// c10::Error naming the variable when one is set but malformed or missing.
std::optional<Rendezvous> rendezvous_from_env();

/// Joins the group: rank 0 serves a TCPStore at master_addr:master_port,
/// then every rank builds the process group: ProcessGroupGloo for a CPU
/// `device`, ProcessGroupNCCL for a CUDA one (builds with NCCL only).
std::shared_ptr<Communicator> connect(const Rendezvous& where, at::Device device);

/// A TCP port that was free a moment ago on 127.0.0.1 (the kernel's pick
/// of an ephemeral port): spawn_ranks' master port, and a test's.
int64_t free_loopback_port();

/// `--tp N` on one machine: starts `world` copies of this executable
/// (posix_spawn of /proc/self/exe, never a bare fork) with `argv` and the
/// launcher environment on 127.0.0.1 and a free port, waits for them, and
/// returns 0 when every rank exited 0. When one fails, the others get
/// `grace` to fail on their own (they do: their collectives error out)
/// and are then killed; the status returned is the first failure's (its
/// exit status, or 128 + the signal that ended it).
int spawn_ranks(int64_t world, const std::vector<std::string>& argv,
                std::chrono::milliseconds grace = std::chrono::seconds(30));

}  // namespace statickv::reference
