// Builds without NCCL (no CUDA, or no nccl.h found): CUDA ranks are refused.

#include "communicator.hpp"

namespace statickv::reference::tp {

c10::intrusive_ptr<c10d::Backend> make_nccl_group(const c10::intrusive_ptr<c10d::Store>&, int64_t,
                                                  int64_t, std::chrono::milliseconds) {
  TORCH_CHECK(false, "device: expected cpu for tensor parallelism in this build (statickv::tp was ",
              "built without NCCL: no CUDA, or no nccl.h; docs/tensor_parallel.md) but got cuda");
}

}  // namespace statickv::reference::tp
