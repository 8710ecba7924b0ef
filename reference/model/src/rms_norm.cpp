// The fused path's RMSNorm (reference/model/include/statickv/model/rms_norm.hpp).

#include <statickv/detail/checks.hpp>
#include <statickv/model/rms_norm.hpp>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#include <cmath>
#include <vector>

namespace statickv::reference {

namespace {

// Offset of row `row` of x viewed as [rows, d]: the leading dims' strides.
int64_t row_offset(int64_t row, at::IntArrayRef sizes, at::IntArrayRef strides) {
  int64_t offset = 0;
  for (int64_t dim = static_cast<int64_t>(sizes.size()) - 2; dim >= 0; --dim) {
    offset += (row % sizes[dim]) * strides[dim];
    row /= sizes[dim];
  }
  return offset;
}

template <typename T>
void rms_norm_rows(const at::Tensor& x, const at::Tensor& weight, double eps, at::Tensor& out) {
  using Acc = at::opmath_type<T>;
  const int64_t d = x.size(-1);
  const int64_t rows = x.numel() / std::max<int64_t>(d, 1);
  const int64_t step = x.stride(-1);
  const T* in = x.const_data_ptr<T>();
  const T* w = weight.const_data_ptr<T>();
  T* dst = out.mutable_data_ptr<T>();
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(d, 1));
  at::parallel_for(0, rows, grain, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const T* src = in + row_offset(r, x.sizes(), x.strides());
      Acc sum = 0;
      for (int64_t i = 0; i < d; ++i) {
        const Acc v = static_cast<Acc>(src[i * step]);
        sum += v * v;
      }
      const Acc inv =
          static_cast<Acc>(1) / std::sqrt(sum / static_cast<Acc>(d) + static_cast<Acc>(eps));
      T* row = dst + r * d;
      for (int64_t i = 0; i < d; ++i) {
        row[i] = static_cast<T>(static_cast<Acc>(src[i * step]) * inv * static_cast<Acc>(w[i]));
      }
    }
  });
}

}  // namespace

at::Tensor rms_norm(const at::Tensor& x, const at::Tensor& weight, double eps) {
  TORCH_CHECK(x.dim() >= 1, "rms_norm x: expected [..., d] but got a scalar");
  detail::check_tensor("rms_norm weight", weight, x.scalar_type(), x.device());
  TORCH_CHECK(weight.dim() == 1 && weight.size(0) == x.size(-1),
              "rms_norm weight: expected shape [", x.size(-1), "] (x's last dim) but got ",
              weight.sizes());
  RECORD_FUNCTION("statickv::rms_norm", std::vector<c10::IValue>({x, weight}));
  if (!x.is_cpu()) return at::rms_norm(x, {x.size(-1)}, weight, eps);
  at::Tensor out = at::empty(x.sizes(), x.options().memory_format(at::MemoryFormat::Contiguous));
  const at::Tensor w = weight.contiguous();
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, x.scalar_type(), "statickv_rms_norm",
                                  [&] { rms_norm_rows<scalar_t>(x, w, eps, out); });
  return out;
}

}  // namespace statickv::reference
