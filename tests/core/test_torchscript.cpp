// The TorchScript consumer: a scripted step that takes the cache's views and
// write slots and does its own index_copy_/scatter_ and attention must agree
// with the C++ path, bit for bit in the cache and within float tolerance in
// the attention output.

#include "support.hpp"

#include <torch/jit.h>

using namespace statickv;
using namespace statickv::test;

namespace {

constexpr const char* kScriptedSteps = R"JIT(
def attend(k_cache: Tensor, v_cache: Tensor, query: Tensor, mask: Tensor, view_len: int):
    k = k_cache.narrow(2, 0, view_len)
    v = v_cache.narrow(2, 0, view_len)
    group = query.size(1) // k.size(1)
    k = k.repeat_interleave(group, 1)
    v = v.repeat_interleave(group, 1)
    scores = torch.matmul(query, k.transpose(-1, -2)) / (query.size(-1) ** 0.5)
    scores = scores.masked_fill(mask.logical_not(), float('-inf'))
    probs = torch.softmax(scores, -1).masked_fill(mask.logical_not(), 0.0)
    return torch.matmul(probs, v)

def shared_positions_step(k_cache: Tensor, v_cache: Tensor, slots: Tensor, key: Tensor,
                          value: Tensor, query: Tensor, mask: Tensor, view_len: int):
    k_cache.index_copy_(2, slots, key)
    v_cache.index_copy_(2, slots, value)
    return attend(k_cache, v_cache, query, mask, view_len)

def per_row_step(k_cache: Tensor, v_cache: Tensor, slots: Tensor, key: Tensor,
                 value: Tensor, query: Tensor, mask: Tensor, view_len: int):
    index = slots.unsqueeze(1).unsqueeze(3).expand(key.size(0), key.size(1), key.size(2), key.size(3))
    k_cache.scatter_(2, index, key)
    v_cache.scatter_(2, index, value)
    return attend(k_cache, v_cache, query, mask, view_len)
)JIT";

}  // namespace

TEST_CASE("a TorchScript step over the cache views agrees with the C++ path", "[torchscript]") {
  const auto unit = torch::jit::compile(kScriptedSteps);
  const CacheConfig config = ConfigBuilder().num_layers(1).max_batch(4).max_len(16);
  StaticCache native(config);
  StaticCache scripted(config);
  at::manual_seed(13);
  const int64_t b = 3;
  const std::vector<std::pair<std::string, at::Tensor>> steps = {
      {"shared_positions_step", arange_positions(0, 5)},
      {"shared_positions_step", positions({5})},
      {"per_row_step", positions(b, {6, 7, 5, -1, 6, 7})},
      {"per_row_step", positions(b, {8, 6, 8})},
  };
  for (const auto& [function, pos] : steps) {
    const int64_t q = pos.size(-1);
    const at::Tensor key = at::randn({b, 2, q, 8});
    const at::Tensor value = at::randn({b, 2, q, 8});
    const at::Tensor query = at::randn({b, 4, q, 8});

    StepPlan step = native.prepare(pos, b);
    KV kv = native.update(/*layer=*/0, key, value, step);
    const at::Tensor want = reference_attention(query, kv.keys, kv.values, step.mask(0));

    StepPlan plan = scripted.prepare(pos, b);
    const at::Tensor got =
        unit->get_function(function)({scripted.keys(0).narrow(0, 0, b),
                                      scripted.values(0).narrow(0, 0, b), plan.write_slots(0), key,
                                      value, query, plan.mask(0), plan.view_len(0)})
            .toTensor();
    INFO(function << " max diff " << max_diff(got, want));
    CHECK(close(got, want, 1e-5));
    // Only scratch-slot contents may differ (padding writes race there).
    CHECK(at::equal(scripted.keys(0).narrow(2, 0, 16), native.keys(0).narrow(2, 0, 16)));
    CHECK(at::equal(scripted.values(0).narrow(2, 0, 16), native.values(0).narrow(2, 0, 16)));
  }
}
