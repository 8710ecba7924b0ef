// rotary_update() and its CPU twin (include/statickv/rotary.hpp; Note
// [fused rotary write], docs/design.md).

#include <statickv/detail/checks.hpp>
#include <statickv/rotary.hpp>

#include <ATen/Dispatch.h>
#include <ATen/OpMathType.h>
#include <ATen/Parallel.h>
#include <ATen/record_function.h>

#ifdef STATICKV_HAS_CUDA
#include "rotary_launch.hpp"

#include <ATen/cuda/CUDAContext.h>
#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAGuard.h>
#endif

#include <vector>

namespace statickv {

namespace detail {

namespace {

// x * cos + rotate_half(x) * sin for one element, rounded as the unfused
// ops round (each product to T, then the sum), so the twin equals them.
template <typename T>
T rotate(T x, T partner, T c, T s, bool first_half) {
  using Acc = at::opmath_type<T>;
  const T a = static_cast<T>(static_cast<Acc>(x) * static_cast<Acc>(c));
  const Acc r = first_half ? -static_cast<Acc>(partner) : static_cast<Acc>(partner);
  const T b = static_cast<T>(r * static_cast<Acc>(s));
  return static_cast<T>(static_cast<Acc>(a) + static_cast<Acc>(b));
}

// One (row, head) of the query, or of the key and value, for every token.
template <typename T>
void rotate_row(const at::TensorAccessor<T, 2>& x, const at::TensorAccessor<T, 2>& c,
                const at::TensorAccessor<T, 2>& s, int64_t t, at::TensorAccessor<T, 1> out) {
  const int64_t d = x.size(1);
  const int64_t half = d / 2;
  for (int64_t i = 0; i < d; ++i) {
    const bool first = i < half;
    out[i] = rotate<T>(x[t][i], x[t][first ? i + half : i - half], c[t][i], s[t][i], first);
  }
}

template <typename T>
void rotary_write_typed(const RotaryWrite& w) {
  const auto q = w.query.accessor<T, 4>();
  const auto k = w.key.accessor<T, 4>();
  const auto v = w.value.accessor<T, 4>();
  const auto c = w.cos.accessor<T, 4>();
  const auto s = w.sin.accessor<T, 4>();
  const auto slots = w.slots.accessor<int64_t, 2>();
  auto q_out = w.query_out.accessor<T, 4>();
  auto k_buf = w.key_buffer.accessor<T, 4>();
  auto v_buf = w.value_buffer.accessor<T, 4>();
  const int64_t heads = q.size(1);
  const int64_t kv_heads = k.size(1);
  const int64_t tokens = q.size(2);
  const int64_t d = q.size(3);
  const int64_t items = q.size(0) * (heads + kv_heads);
  const int64_t grain = std::max<int64_t>(1, 32768 / std::max<int64_t>(1, tokens * d));
  // Each item owns one (row, head): its tokens run in order, so two tokens
  // sent to one slot (the scratch slot) leave the later one, as index_copy_.
  at::parallel_for(0, items, grain, [&](int64_t begin, int64_t end) {
    for (int64_t item = begin; item < end; ++item) {
      const int64_t row = item / (heads + kv_heads);
      const int64_t h = item % (heads + kv_heads);
      for (int64_t t = 0; t < tokens; ++t) {
        if (h < heads) {
          rotate_row<T>(q[row][h], c[row][0], s[row][0], t, q_out[row][h][t]);
          continue;
        }
        const int64_t kh = h - heads;
        const int64_t slot = slots[row][t];
        rotate_row<T>(k[row][kh], c[row][0], s[row][0], t, k_buf[row][kh][slot]);
        for (int64_t i = 0; i < d; ++i) v_buf[row][kh][slot][i] = v[row][kh][t][i];
      }
    }
  });
}

// rotary_update()'s own arguments (update()'s are checked by write_target()).
void check_rotary_inputs(const Cache& cache, const at::Tensor& query, const at::Tensor& cos,
                         const at::Tensor& sin, const StepPlan& step) {
  const CacheConfig& config = cache.config();
  check_rotary_config(config);
  TORCH_CHECK(config.head_dim % 2 == 0,
              "CacheConfig.head_dim: expected an even head_dim for the rotary embedding but got ",
              config.head_dim);
  const int64_t b = step.live_batch();
  const int64_t q = step.query_len();
  check_tensor("query", query, config.dtype, config.device);
  check_rank("query", query, 4, "[live_batch, heads, q, head_dim]");
  TORCH_CHECK(query.size(0) == b && query.size(2) == q && query.size(3) == config.head_dim,
              "query: expected shape [live_batch, heads, q, head_dim] = [", b, ", heads, ", q, ", ",
              config.head_dim, "] but got ", query.sizes());
  TORCH_CHECK(query.size(1) >= 1 && query.size(1) % config.num_kv_heads == 0,
              "query: expected heads to be a multiple of kv_heads=", config.num_kv_heads,
              " but got ", query.size(1));
  const std::vector<int64_t> shape = {b, 1, q, config.head_dim};
  for (const auto& [name, t] : {std::make_pair("cos", cos), std::make_pair("sin", sin)}) {
    check_tensor(name, t, config.dtype, config.device);
    TORCH_CHECK(t.sizes() == at::IntArrayRef(shape), name,
                ": expected shape [live_batch, 1, q, head_dim] = ", at::IntArrayRef(shape),
                " but got ", t.sizes());
  }
}

}  // namespace

void check_rotary_config(const CacheConfig& config) {
  // Plain storage: the buffers hold keys and values in config.dtype itself,
  // so the kernel writes them as they are. A storage type that encodes them
  // (quantized: Note [quantized storage]) keeps update()'s ATen path.
  config.validate();
  TORCH_CHECK(config.plain_storage(),
              "CacheConfig.kv_storage: expected compute with the fused rotary write "
              "(rotary_update writes plain storage; use the plain decoder path for quantized "
              "storage) but got ",
              config.kv_storage);
  // Host offload keeps the buffers in host memory; update() writes the
  // staging ring and the host copy (Note [host offload]).
  TORCH_CHECK(!config.host_offload,
              "CacheConfig.host_offload: expected false with the fused rotary write "
              "(rotary_update writes the stored buffers, which offload keeps in host memory; use "
              "the plain decoder path with host offload) but got true");
}

void rotary_write_cpu(const RotaryWrite& w) {
  AT_DISPATCH_FLOATING_TYPES_AND2(at::kHalf, at::kBFloat16, w.query.scalar_type(),
                                  "rotary_write_cpu", [&] { rotary_write_typed<scalar_t>(w); });
}

#ifdef STATICKV_HAS_CUDA
namespace {

template <typename T>
RotaryAcc4<T> acc4(const at::Tensor& t) {
  return t.packed_accessor64<T, 4, RotaryRestrict>();
}

}  // namespace

void rotary_write_cuda(const RotaryWrite& w) {
  const c10::cuda::CUDAGuard guard(w.query.device());
  const int64_t total =
      w.query.size(0) * (w.query.size(1) + w.key.size(1)) * w.query.size(2) * w.query.size(3);
  if (total == 0) return;
  const cudaStream_t stream = at::cuda::getCurrentCUDAStream();
  AT_DISPATCH_FLOATING_TYPES_AND2(
      at::kHalf, at::kBFloat16, w.query.scalar_type(), "rotary_write_cuda", [&] {
        using T = scalar_t;
        const RotaryOperands<T> operands{
            acc4<T>(w.query),     acc4<T>(w.key),        acc4<T>(w.value),
            acc4<T>(w.cos),       acc4<T>(w.sin),        w.slots.packed_accessor64<int64_t, 2>(),
            acc4<T>(w.query_out), acc4<T>(w.key_buffer), acc4<T>(w.value_buffer)};
        launch_rotary_write<T>(operands, total, stream);
        C10_CUDA_KERNEL_LAUNCH_CHECK();
      });
}
#endif

}  // namespace detail

RotaryKV rotary_update(Cache& cache, int64_t layer, const at::Tensor& query, const at::Tensor& key,
                       const at::Tensor& value, const at::Tensor& cos, const at::Tensor& sin,
                       const StepPlan& step) {
  // Every check first (Invariant [checked before written]).
  const detail::WriteTarget target = cache.write_target(layer, key, value, step);
  detail::check_rotary_inputs(cache, query, cos, sin, step);
  detail::RotaryWrite w;
  w.query = query;
  w.key = key;
  w.value = value;
  w.cos = cos;
  w.sin = sin;
  w.slots = target.slots;
  w.query_out = at::empty(query.sizes(), query.options());
  w.key_buffer = target.keys;
  w.value_buffer = target.values;
  // One kernel on either device; named for OpCounter (Note [counted step]).
  RECORD_FUNCTION("statickv::rotary_write", std::vector<c10::IValue>({query, key, value}));
  if (query.is_cuda()) {
#ifdef STATICKV_HAS_CUDA
    detail::rotary_write_cuda(w);
#else
    TORCH_CHECK(false, "query: expected a CPU tensor (statickv was built without CUDA) but got ",
                query.device());
#endif
  } else {
    detail::rotary_write_cpu(w);
  }
  return RotaryKV{w.query_out, target.views};
}

}  // namespace statickv
