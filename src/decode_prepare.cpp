// The fused decode prepare's dispatch and its CPU twin
// (include/statickv/detail/decode_prepare.hpp; Note [decode prepare],
// docs/design.md).

#include "decode_prepare_row.hpp"

#include <ATen/record_function.h>
#include <c10/util/Exception.h>

#include <vector>

namespace statickv::detail {

void decode_prepare_cpu(const DecodePrepare& p) {
  const PrepareArgs a = prepare_args(p);
  for (int64_t r = 0; r < a.live_batch; ++r) prepare_row(a, r);
}

void decode_prepare(const DecodePrepare& p) {
  // One operator on either device (Note [counted step]).
  RECORD_FUNCTION("statickv::decode_prepare", std::vector<c10::IValue>({p.positions}));
  if (p.positions.is_cuda()) {
#ifdef STATICKV_HAS_CUDA
    decode_prepare_cuda(p);
#else
    TORCH_CHECK(false,
                "cache_position: expected a CPU tensor (statickv was built without CUDA) but got ",
                p.positions.device());
#endif
  } else {
    decode_prepare_cpu(p);
  }
}

}  // namespace statickv::detail
