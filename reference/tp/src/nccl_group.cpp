// ProcessGroupNCCL for CUDA ranks (CUDA builds with nccl.h, which is not
// under torch/include: PyPI's nvidia-nccl package ships it; CMake finds it).

#include "communicator.hpp"

#include <torch/csrc/distributed/c10d/ProcessGroupNCCL.hpp>

namespace statickv::reference::tp {

c10::intrusive_ptr<c10d::Backend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>& store,
                                                  int64_t rank, int64_t world,
                                                  std::chrono::milliseconds timeout) {
  auto options = c10d::ProcessGroupNCCL::Options::create();
  options->timeout = timeout;
  return c10::make_intrusive<c10d::ProcessGroupNCCL>(store, static_cast<int>(rank),
                                                     static_cast<int>(world), options);
}

}  // namespace statickv::reference::tp
