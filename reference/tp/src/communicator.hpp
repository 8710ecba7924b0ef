#pragma once
// The decoder's Communicator over any c10d process group; only
// gloo_group.cpp and nccl_group.cpp know which backend it is.

#include <statickv/model/tensor_parallel.hpp>

#include <torch/csrc/distributed/c10d/Backend.hpp>
#include <torch/csrc/distributed/c10d/Store.hpp>

namespace statickv::reference::tp {

class ProcessGroupCommunicator final : public Communicator {
 public:
  ProcessGroupCommunicator(c10::intrusive_ptr<c10d::Store> store,
                           c10::intrusive_ptr<c10d::Backend> group, int64_t rank, int64_t world,
                           at::Device device);
  int64_t rank() const override { return rank_; }
  int64_t world() const override { return world_; }
  void all_reduce_sum(at::Tensor& t) override;
  at::Tensor all_gather_last(const at::Tensor& local) override;
  void barrier() override;
  void broadcast_bytes(std::string& bytes) override;
  void check_same(const char* what, int64_t value) override;

 private:
  c10::intrusive_ptr<c10d::Store> store_;  // the rendezvous; rank 0's serves the others
  c10::intrusive_ptr<c10d::Backend> group_;
  int64_t rank_, world_;
  at::Device device_;
};

/// The backends, each in its own TU (process_group.cpp: Gloo, compiled
/// against Debian's Gloo headers under the rule of docs/tensor_parallel.md;
/// nccl_group.cpp: NCCL, CUDA builds only).
c10::intrusive_ptr<c10d::Backend> make_gloo_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int64_t rank, int64_t world, bool loopback,
                                                  std::chrono::milliseconds timeout);
c10::intrusive_ptr<c10d::Backend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int64_t rank, int64_t world,
                                                  std::chrono::milliseconds timeout);

}  // namespace statickv::reference::tp
