// The decoder's Communicator over a c10d process group (Gloo or NCCL).

#include "communicator.hpp"

#include <cstring>
#include <exception>
#include <string>
#include <vector>

namespace statickv::reference::tp {

namespace {

// A collective failed: a peer exited, raised or hangs. Every rank that gets
// here names the collective, its own rank and c10d's reason.
[[noreturn]] void collective_failed(const char* op, int64_t rank, int64_t world,
                                    const std::exception& e) {
  TORCH_CHECK(false, "tensor parallel: ", op, " failed on rank ", rank, " of ", world,
              " (a peer rank exited, raised or timed out): ", e.what());
}

}  // namespace

ProcessGroupCommunicator::ProcessGroupCommunicator(c10::intrusive_ptr<c10d::Store> store,
                                                   c10::intrusive_ptr<c10d::Backend> group,
                                                   int64_t rank, int64_t world, at::Device device)
    : store_(std::move(store)),
      group_(std::move(group)),
      rank_(rank),
      world_(world),
      device_(device) {}

void ProcessGroupCommunicator::all_reduce_sum(at::Tensor& t) {
  TORCH_CHECK(t.is_contiguous(), "all_reduce_sum: expected a contiguous tensor but got strides ",
              t.strides());
  std::vector<at::Tensor> tensors{t};
  try {
    group_->allreduce(tensors)->wait();
  } catch (const std::exception& e) {
    collective_failed("all_reduce", rank_, world_, e);
  }
}

at::Tensor ProcessGroupCommunicator::all_gather_last(const at::Tensor& local) {
  std::vector<at::Tensor> inputs{local.contiguous()};
  std::vector<std::vector<at::Tensor>> outputs(1);
  for (int64_t r = 0; r < world_; ++r) outputs[0].push_back(at::empty_like(inputs[0]));
  try {
    group_->allgather(outputs, inputs)->wait();
  } catch (const std::exception& e) {
    collective_failed("all_gather", rank_, world_, e);
  }
  return at::cat(outputs[0], -1);
}

void ProcessGroupCommunicator::barrier() {
  try {
    group_->barrier()->wait();
  } catch (const std::exception& e) {
    collective_failed("barrier", rank_, world_, e);
  }
}

void ProcessGroupCommunicator::broadcast_bytes(std::string& bytes) {
  // The length first, then the bytes (rank 0's), both on the group's device.
  const auto options = at::TensorOptions(at::kLong);
  std::vector<at::Tensor> size{
      at::tensor(std::vector<int64_t>{static_cast<int64_t>(bytes.size())}, options).to(device_)};
  try {
    group_->broadcast(size)->wait();
    const int64_t n = size[0].cpu().item<int64_t>();
    std::vector<at::Tensor> data{at::empty({n}, at::TensorOptions(at::kByte))};
    if (rank_ == 0) std::memcpy(data[0].data_ptr(), bytes.data(), static_cast<size_t>(n));
    data[0] = data[0].to(device_);
    group_->broadcast(data)->wait();
    const at::Tensor host = data[0].cpu();
    bytes.assign(static_cast<const char*>(host.data_ptr()), static_cast<size_t>(n));
  } catch (const std::exception& e) {
    collective_failed("broadcast", rank_, world_, e);
  }
}

void ProcessGroupCommunicator::check_same(const char* what, int64_t value) {
  // max(v) and max(~v) = ~min(v) in one all-reduce: equal on every rank iff
  // all agree (~v, unlike -v, never overflows).
  std::vector<at::Tensor> tensors{
      at::tensor(std::vector<int64_t>{value, ~value}, at::TensorOptions(at::kLong)).to(device_)};
  c10d::AllreduceOptions options;
  options.reduceOp = c10d::ReduceOp::MAX;
  try {
    group_->allreduce(tensors, options)->wait();
  } catch (const std::exception& e) {
    collective_failed("the divergence check", rank_, world_, e);
  }
  const at::Tensor host = tensors[0].cpu();
  const int64_t largest = host[0].item<int64_t>(), smallest = ~host[1].item<int64_t>();
  TORCH_CHECK(largest == smallest, "tensor parallel: ranks diverged at ", what, ": rank ", rank_,
              " of ", world_, " has ", value, ", the ranks range from ", smallest, " to ", largest,
              " (Note [ranks issue identical steps], docs/design.md)");
}

}  // namespace statickv::reference::tp
