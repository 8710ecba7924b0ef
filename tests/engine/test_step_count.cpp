// Note [counted step]: the counter means what it says, each family's
// decode step stays under the ceilings its measurement set, a DecodeStep
// is one step repeatable at will, and the sampling head's share of a step
// is counted apart (count_head_pick).

#include "support.hpp"

#include <statickv/engine/step_count.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/model/rms_norm.hpp>

#include <ATen/record_function.h>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

at::Tensor f32s(std::vector<int64_t> shape) { return at::randn(shape, f32()); }

int64_t launched(const OpCounts& counts, const std::string& name) {
  const auto region = counts.launched.find("");
  if (region == counts.launched.end()) return 0;
  const auto it = region->second.find(name);
  return it == region->second.end() ? 0 : it->second;
}

}  // namespace

TEST_CASE("the counter counts work, not views, allocations or do-nothing composites", "[counter]") {
  c10::InferenceMode inference;
  const at::Tensor x = f32s({4, 8});
  const at::Tensor w = f32s({6, 8});
  OpCounter ops;
  auto v = x.view({8, 4}).narrow(0, 1, 4).transpose(0, 1).unsqueeze(0).expand({2, 4, 4});
  (void)x.to(at::kFloat);  // the same dtype: nothing to do
  (void)x.contiguous();    // already contiguous
  (void)x.reshape({32});   // a view
  (void)at::empty({3});
  CHECK(ops.launches() == 0);
  for (const char* name : {"aten::view", "aten::narrow", "aten::transpose", "aten::expand",
                           "aten::unsqueeze", "aten::empty"}) {
    INFO(name);
    CHECK(ops.counts().left_out.count(name) == 1);
  }
  // A composite counts as what it runs: at::linear as one GEMM.
  (void)at::linear(x, w);
  CHECK(ops.launches() == 1);
  CHECK(launched(ops.counts(), "aten::linear") == 0);
  // A copy counts once, not as to, _to_copy and copy_.
  (void)x.to(at::kDouble);
  CHECK(ops.launches() == 2);
  (void)v.contiguous();
  CHECK(ops.launches() == 3);
  CHECK(ops.host_copies() == 0);
  CHECK(ops.syncs() == 0);
}

TEST_CASE("the counter counts what a wrapper runs, and a kernel of statickv's own once",
          "[counter]") {
  c10::InferenceMode inference;
  const at::Tensor x = f32s({2, 3, 16});
  const at::Tensor w = at::ones({16}, f32());
  OpCounter ops;
  {
    RECORD_FUNCTION("statickv::wrapper", std::vector<c10::IValue>({x}));
    (void)x.add(1).mul(2).sum();
  }
  CHECK(ops.launches() == 3);
  CHECK(launched(ops.counts(), "statickv::wrapper") == 0);
  ops.reset();
  (void)rms_norm(x, w, 1e-6);  // one pass on the CPU
  CHECK(ops.launches() == 1);
  CHECK(launched(ops.counts(), "statickv::rms_norm") == 1);
  ops.reset();
  (void)at::rms_norm(x, {16}, w, 1e-6);  // LibTorch's CPU composite
  CHECK(ops.launches() > 3);
}

TEST_CASE("the counter tells one name's overloads apart: a composite one does not hide a kernel",
          "[counter]") {
  c10::InferenceMode inference;
  const at::Tensor x = f32s({4, 8});
  const at::Tensor keep = x.gt(0);
  OpCounter ops;
  // where.ScalarOther is a composite (it runs where.self); where.self is the
  // kernel. Seen in this order, the second must count as itself.
  (void)at::where(keep, x, -1.0);
  CHECK(launched(ops.counts(), "aten::where") == 1);
  ops.reset();
  (void)at::where(keep, x, x.neg());
  CHECK(launched(ops.counts(), "aten::where") == 1);
  CHECK(launched(ops.counts(), "aten::neg") == 1);
}

TEST_CASE("the counter names every host sync and copy to the host", "[counter]") {
  c10::InferenceMode inference;
  const at::Tensor x = at::arange(6, at::TensorOptions().dtype(at::kLong));
  const at::Tensor mask = x.gt(2);
  struct Case {
    const char* what;
    std::function<void()> run;
    const char* name;
  };
  const std::vector<Case> syncs = {
      {"item", [&] { (void)x.sum().item<int64_t>(); }, "aten::item"},
      {"_local_scalar_dense", [&] { (void)at::_local_scalar_dense(x.sum()); },
       "aten::_local_scalar_dense"},
      {"nonzero", [&] { (void)mask.nonzero(); }, "aten::nonzero"},
      {"masked_select", [&] { (void)x.masked_select(mask); }, "aten::masked_select"},
      {"unique", [&] { (void)at::_unique2(x); }, "aten::_unique2"},
      {"unique_consecutive", [&] { (void)at::unique_consecutive(x); }, "aten::unique_consecutive"},
      {"unique_dim", [&] { (void)at::unique_dim(x, 0); }, "aten::unique_dim"},
      {"equal", [&] { (void)at::equal(x, x); }, "aten::equal"},
      {"is_nonzero", [&] { (void)x.narrow(0, 1, 1).is_nonzero(); }, "aten::is_nonzero"},
      {"repeat_interleave", [&] { (void)at::repeat_interleave(x.narrow(0, 0, 3)); },
       "aten::repeat_interleave"},
      {"repeat_interleave (self, repeats)",
       [&] { (void)at::repeat_interleave(x.narrow(0, 0, 3), x.narrow(0, 0, 3)); },
       "aten::repeat_interleave"},
  };
  for (const Case& c : syncs) {
    INFO(c.what);
    OpCounter ops;
    c.run();
    CHECK(ops.syncs() == 1);  // once, at the outermost call
    CHECK(ops.counts().synced.count(c.name) == 1);
  }
  {
    OpCounter ops;  // sized by the caller: no sync
    (void)at::repeat_interleave(x.narrow(0, 0, 3), x.narrow(0, 0, 3), 0, 3);
    (void)at::repeat_interleave(x, 2);
    CHECK(ops.syncs() == 0);
  }
  {
    OpCounter ops;  // the CPU proxy: a to() with a CPU device argument is the copy out
    (void)x.to(at::kCPU);
    (void)x.cpu();
    (void)x.to(at::kDouble);  // a dtype, not a device
    CHECK(ops.host_copies() == 2);
    CHECK(ops.counts().copies.at("aten::to") == 2);
  }
  {
    // On a GPU step the devices decide: from another device (a meta tensor
    // stands in; the copy is counted before it fails) to the host is a
    // copy; reading a host tensor is no sync.
    OpCounter ops(at::Device(at::kCUDA));
    const at::Tensor far = at::empty({4}, at::TensorOptions().device(at::kMeta));
    at::Tensor host = at::empty({4});
    CHECK_THROWS(far.to(at::kCPU));
    CHECK_THROWS(far.to(host));
    CHECK_THROWS(host.copy_(far));
    CHECK_THROWS(at::_to_copy(far, at::TensorOptions().device(at::kCPU)));
    CHECK(ops.host_copies() == 4);
    CHECK(ops.counts().copies.at("aten::to") == 2);
    CHECK(ops.counts().copies.at("aten::copy_") == 1);
    CHECK(ops.counts().copies.at("aten::_to_copy") == 1);
    (void)x.to(at::kCPU);  // already there
    (void)x.sum().item<int64_t>();
    CHECK(ops.host_copies() == 4);
    CHECK(ops.syncs() == 0);
  }
  {
    OpCounter ops;
    require_error([] { OpCounter second; }, {"one counter per thread"});
  }
}

namespace {

/// A family's measured decode step, per path: the ceilings the step must
/// stay under (set from the measurement; BENCHMARKS.md, item 13).
struct Ceilings {
  const char* shape;
  double fused_per_layer;
  int64_t fused_outside;
  double plain_per_layer;
  int64_t plain_outside;
};

// Tiny models of each family's structure in bfloat16: counts do not depend
// on widths (or on the batch). Per layer: the step's launches inside the
// layers over the layer count (the first layer of each type also builds
// its mask: Note [lazy masks]). Measured with LibTorch 2.11 on the CPU.
// The fused layer counts act(gate) * up as one kernel (act_mul) and both
// paths gather cos and sin from the rope table (Note [rope table]); the
// cache's prepare() is one kernel outside the layers (Note [decode
// prepare]). Each layer type's additive mask counts its where (the
// counter once took it for the composite overload of the same name).
const Ceilings kCeilings[] = {
    {"tiny", 11, 11, 44, 19},
    {"tiny-mistral", 12.5, 11, 45.5, 19},
    {"tiny-qwen2", 11.75, 11, 44.75, 19},
    {"tiny-qwen3", 13, 11, 62, 19},
    {"tiny-gemma2", 30.75, 16, 85.75, 26},
    {"tiny-gemma3", 101.0 / 6, 14, 557.0 / 6, 24},
};

std::string top_launches(const OpCounts& counts, const std::string& region) {
  std::string out;
  const auto it = counts.launched.find(region);
  if (it == counts.launched.end()) return out;
  for (const auto& [name, n] : it->second) out += " " + name + " x" + std::to_string(n);
  return out;
}

}  // namespace

TEST_CASE("each family's decode step stays under its ceilings: launches, one copy out, no sync",
          "[counter][model]") {
  for (const Ceilings& c : kCeilings) {
    const ModelConfig config = named_config(c.shape);
    const LlamaModel model(config, random_weights(config, 3, at::kBFloat16, at::kCPU));
    for (int64_t batch : {1, 4}) {
      for (DecodePath path : {DecodePath::kPlain, DecodePath::kFused}) {
        const StepCount n = count_decode_step(model, path, batch, 6);
        const bool fused = path == DecodePath::kFused;
        INFO(c.shape << ", " << to_string(path) << ", batch " << batch
                     << "\n  layers:" << top_launches(n.counts, kLayerRegion)
                     << "\n  outside:" << top_launches(n.counts, ""));
        CHECK(n.per_layer() <= (fused ? c.fused_per_layer : c.plain_per_layer));
        CHECK(n.outside <= (fused ? c.fused_outside : c.plain_outside));
        CHECK(n.host_copies == 1);  // the ids
        CHECK(n.syncs == 0);
        CHECK(n.counts.copies.at("aten::to") == 1);
      }
    }
  }
}

TEST_CASE("a DecodeStep's run is its device_step's ids on the host, the same every call",
          "[counter][model]") {
  const ModelConfig config = named_config("tiny");
  const LlamaModel model(config, random_weights(config, 3, at::kFloat, at::kCPU));
  DecodeStep plain(model, DecodePath::kPlain, 2, 6);
  const at::Tensor ids = plain.run();
  CHECK(ids.sizes() == at::IntArrayRef({2}));
  CHECK(ids.scalar_type() == at::kLong);
  CHECK(ids.device().is_cpu());
  CHECK(((ids >= 0) & (ids < config.vocab_size)).all().item<bool>());
  {
    OpCounter ops;  // the forward pass and the argmax, nothing to the host
    const at::Tensor on_device = plain.device_step();
    CHECK(ops.syncs() == 0);
    CHECK(ops.host_copies() == 0);
    CHECK(ops.launches() > 0);
    CHECK(on_device.device() == model.device());
    CHECK(at::equal(on_device, ids));  // each call rewrites the same slot
  }
  CHECK(at::equal(plain.run(), ids));
  DecodeStep fused(model, DecodePath::kFused, 2, 6);
  CHECK(at::equal(fused.run(), ids));  // the same step on the fused path
}

TEST_CASE("count_head_pick counts one pick and fetch: launches outside, one copy out, no sync",
          "[counter][sampling]") {
  Sampling sampled;
  sampled.temperature = 0.8, sampled.top_p = 0.9, sampled.presence_penalty = 0.5;
  sampled.logprobs = 2;
  for (const Sampling& s : {Sampling{}, sampled}) {
    INFO("temperature " << s.temperature);
    const StepCount fused = count_head_pick(128, 4, s, at::kCPU);
    const StepCount composed = count_head_pick(128, 4, s, at::kCPU, /*fused=*/false);
    for (const StepCount& n : {fused, composed}) {
      CHECK(n.layers == 0);
      CHECK(n.in_layers == 0);
      CHECK(n.outside == n.counts.launches);
      CHECK(n.outside > 0);
      CHECK(n.host_copies == 1);  // the fetch
      CHECK(n.syncs == 0);
    }
    CHECK(fused.outside < composed.outside);  // one kernel against the composition
  }
}
