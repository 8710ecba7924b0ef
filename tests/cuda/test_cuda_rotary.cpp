// [cuda] rotary_update()'s CUDA kernel (src/rotary.cu) against apply_rotary()
// then update() on the same steps, whole buffers compared (scratch slot
// included), in fp32, fp16 and bf16; and the fused decoder path against the
// plain one on the GPU, eagerly and through CUDA graphs. At most one padded
// token per row and step, so no two threads race for one scratch slot (a
// race update()'s index_copy_ has too; the CPU tests cover several).

#include "support.hpp"
#include "support/generation.hpp"
#include "support/rotary.hpp"

#include <statickv/engine/generator.hpp>
#include <statickv/model/checkpoint.hpp>

using namespace statickv;
using namespace statickv::test;

namespace {

const at::ScalarType kDtypes[] = {at::kFloat, at::kHalf, at::kBFloat16};

ConfigBuilder on_gpu(at::ScalarType dtype) {
  ConfigBuilder c;
  c.head_dim(64).device(at::Device(at::kCUDA, 0)).dtype(dtype);
  return c;
}

// The kernel rounds each product and the sum as the unfused kernels do;
// the tolerance only allows for LibTorch's kernels rounding differently.
double key_tolerance(at::ScalarType dtype) { return dtype == at::kFloat ? 1e-6 : 1e-2; }

}  // namespace

TEST_CASE("on CUDA, rotary_update equals apply_rotary then update on ragged rows",
          "[cuda][rotary][memcheck]") {
  for (at::ScalarType dtype : kDtypes) {
    const std::vector<at::Tensor> steps = {positions(3, {0, 1, 2, 3, 4, -1, 0, 1, 2, 3, -1, 0}),
                                           positions(3, {4, 4, 1}), positions(3, {5, -1, 2})};
    expect_rotary_matches_update(on_gpu(dtype), steps, 3, key_tolerance(dtype));
  }
}

// Not in [memcheck]: the ragged test above runs the same kernel's reads and
// writes, and the sanitizer stage has about 100 s.
TEST_CASE("on CUDA, rotary_update equals apply_rotary then update with shared positions",
          "[cuda][rotary]") {
  for (at::ScalarType dtype : kDtypes) {
    const std::vector<at::Tensor> steps = {arange_positions(0, 4), positions({4}), positions({-1}),
                                           positions({5})};
    expect_rotary_matches_update(on_gpu(dtype), steps, 2, key_tolerance(dtype));
  }
}

TEST_CASE("on CUDA, rotary_update writes ring slots as update does once a ring wraps",
          "[cuda][rotary][memcheck]") {
  for (at::ScalarType dtype : kDtypes) {
    std::vector<at::Tensor> steps = {positions(2, {0, 1, 2, -1, 0, 1}),
                                     positions(2, {3, 4, 5, 2, 3, 4})};
    for (int64_t p = 6; p < 16; ++p) steps.push_back(positions(2, {p, p - 1}));
    const CacheConfig config = on_gpu(dtype).max_len(32).hybrid(4, 3);
    expect_rotary_matches_update(config, steps, 2, key_tolerance(dtype));
  }
}

TEST_CASE("on CUDA, the fused decoder path generates the plain path's tokens, eager and graphed",
          "[cuda][model][rotary]") {
  using namespace statickv::reference;
  for (const std::string shape : {"tiny", "tiny-qwen2"}) {
    const ModelConfig config = named_config(shape);
    const LlamaModel model(config, random_weights(config, 3, at::kFloat, at::Device(at::kCUDA, 0)));
    for (bool bucketed : {false, true}) {
      INFO(shape << (bucketed ? ", CUDA graphs" : ", eager"));
      GenerateOptions options;
      options.max_new_tokens = 12;
      options.bucketed = bucketed;
      require_fused_equals_plain(model, options, 1e-3);
    }
  }
}
