// act_mul() and its CPU loop (reference/model/include/statickv/model/act_mul.hpp).

#include <statickv/kernel_switches.hpp>
#include <statickv/model/act_mul.hpp>

#include "act_math.hpp"

#include <ATen/Dispatch.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#ifdef STATICKV_HAS_CUDA
#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include <vector>

namespace statickv::reference {

namespace detail {

namespace {

/// The kernels' arguments: rows of 2 * inter inputs (`in`, row stride
/// in_stride elements), rows of inter outputs (contiguous).
struct ActMul {
  at::Tensor in, out;
  int64_t rows = 0, inter = 0, in_stride = 0;
  Activation act = Activation::kSilu;
};

template <typename T>
void act_mul_rows(const ActMul& a) {
  const T* in = a.in.const_data_ptr<T>();
  T* out = a.out.mutable_data_ptr<T>();
  const bool gelu = a.act == Activation::kGeluTanh;
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(a.inter, 1));
  at::parallel_for(0, a.rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* gate = in + r * a.in_stride;
      const T* up = gate + a.inter;
      T* dst = out + r * a.inter;
      for (int64_t i = 0; i < a.inter; ++i) dst[i] = act_times<T>(gate[i], up[i], gelu);
    }
  });
}

void act_mul_cpu(const ActMul& a) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, a.in.scalar_type(), "statickv_act_mul",
                                  [&] { act_mul_rows<scalar_t>(a); });
}

#ifdef STATICKV_HAS_CUDA
// One thread per output element, at most eight blocks per multiprocessor
// (a grid-stride loop covers the rest).
void act_mul_cuda(const ActMul& a) {
  const c10::cuda::CUDAGuard guard(a.in.device());
  const int64_t total = a.rows * a.inter;
  const int64_t most =
      static_cast<int64_t>(at::cuda::getCurrentDeviceProperties()->multiProcessorCount) * 8;
  const int blocks =
      static_cast<int>(std::min<int64_t>((total + kActMulThreads - 1) / kActMulThreads, most));
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  const bool gelu = a.act == Activation::kGeluTanh;
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, a.in.scalar_type(), "statickv_act_mul_cuda", [&] {
        launch_act_mul<scalar_t>(a.in.const_data_ptr<scalar_t>(),
                                 a.out.mutable_data_ptr<scalar_t>(), a.rows, a.inter, a.in_stride,
                                 gelu, blocks, stream);
      });
  C10_CUDA_KERNEL_LAUNCH_CHECK();
}
#endif

}  // namespace

}  // namespace detail

at::Tensor apply_activation(const at::Tensor& gate, Activation act) {
  return act == Activation::kGeluTanh ? at::gelu(gate, "tanh") : at::silu(gate);
}

at::Tensor act_mul(const at::Tensor& gate_up, Activation act) {
  TORCH_CHECK(gate_up.dim() >= 1 && gate_up.size(-1) % 2 == 0,
              "act_mul gate_up: expected [..., 2 * inter] but got ", gate_up.sizes());
  const at::ScalarType t = gate_up.scalar_type();
  TORCH_CHECK(t == at::kFloat || t == at::kHalf || t == at::kBFloat16,
              "act_mul gate_up: expected float32, float16 or bfloat16 but got ", t);
  const int64_t inter = gate_up.size(-1) / 2;
  RECORD_FUNCTION("statickv::act_mul", std::vector<c10::IValue>({gate_up}));
  // Note [kernel switches]: off, the two ops it replaces.
  if (!kernel_enabled("act_mul")) {
    return apply_activation(gate_up.narrow(-1, 0, inter), act)
        .mul_(gate_up.narrow(-1, inter, inter));
  }
  detail::ActMul a;
  a.in = gate_up.reshape({-1, 2 * inter});
  if (a.in.stride(1) != 1 || (a.in.size(0) > 1 && a.in.stride(0) < 2 * inter)) {
    a.in = a.in.contiguous();
  }
  a.rows = a.in.size(0);
  a.inter = inter;
  a.in_stride = a.rows > 1 ? a.in.stride(0) : 2 * inter;
  a.act = act;
  std::vector<int64_t> shape = gate_up.sizes().vec();
  shape.back() = inter;
  a.out = at::empty({a.rows, inter}, gate_up.options());
  if (a.rows > 0 && inter > 0) {
    if (gate_up.is_cuda()) {
#ifdef STATICKV_HAS_CUDA
      detail::act_mul_cuda(a);
#else
      TORCH_CHECK(false,
                  "gate_up: expected a CPU tensor (statickv was built without CUDA) but got ",
                  gate_up.device());
#endif
    } else {
      detail::act_mul_cpu(a);
    }
  }
  return a.out.view(shape);
}

}  // namespace statickv::reference
