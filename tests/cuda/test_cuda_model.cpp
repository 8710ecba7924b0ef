// [cuda] The reference decoder on a GPU: generation through CUDA graphs
// (GraphRunner buckets) gives the eager path's tokens and logits.

#include "support.hpp"
#include "support/generation.hpp"

#include <statickv/engine/chained_decode.hpp>
#include <statickv/engine/generator.hpp>
#include <statickv/model/act_mul.hpp>
#include <statickv/model/checkpoint.hpp>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

TEST_CASE("on CUDA, graph-replayed generation equals eager generation", "[cuda][model]") {
  for (const std::string shape : {"tiny", "tiny-qwen2"}) {
    const ModelConfig config = named_config(shape);
    const LlamaModel model(config, random_weights(config, 3, at::kFloat, at::Device(at::kCUDA, 0)));
    INFO(shape);
    const GenerateResult graphed =
        require_bucketed_equals_plain(model, /*new_tokens=*/12, /*max_batch=*/8, /*tol=*/1e-3);
    CHECK(graphed.decode_runner.captures >= 1);
    CHECK(graphed.decode_runner.failed_captures == 0);
    CHECK(graphed.decode_runner.replays == 11);
    CHECK(graphed.prefill_runner.failed_captures == 0);
  }
}

TEST_CASE("on CUDA, graph-replayed generation with host offload equals the device cache's",
          "[cuda][model][offload]") {
  // Note [host offload]: the copy-ins fork to a side stream and join back
  // inside every captured step; tokens and logits are those of the cache
  // kept on the device.
  for (const std::string shape : {"tiny", "tiny-qwen2"}) {
    const ModelConfig config = named_config(shape);
    const LlamaModel model(config, random_weights(config, 3, at::kFloat, at::Device(at::kCUDA, 0)));
    INFO(shape);
    GenerateOptions options;
    options.max_new_tokens = 12;
    options.record_logits = true;
    const GenerateResult device = generate(model, ragged_prompts(), options, 8);
    options.host_offload = true;
    const GenerateResult offloaded = generate(model, ragged_prompts(), options, 8);
    CHECK(offloaded.tokens == device.tokens);
    for (size_t r = 0; r < ragged_prompts().size(); ++r) {
      INFO("row " << r << " max diff " << max_diff(offloaded.logits[r], device.logits[r]));
      CHECK(close(offloaded.logits[r], device.logits[r], 1e-5));
    }
    CHECK(offloaded.decode_runner.captures >= 1);
    CHECK(offloaded.decode_runner.failed_captures == 0);
    CHECK(offloaded.prefill_runner.failed_captures == 0);
    CHECK(offloaded.host_cache_bytes > 0);
  }
}

TEST_CASE(
    "on CUDA, the replayed chained step gives the eager chain's tokens, and a graph "
    "holds its kernels",
    "[cuda][model][chained]") {
  // Note [chained step]: the pick and the feedback are captured with the
  // forward; the replayed chain walks the same tokens as eager steps.
  const ModelConfig config = named_config("tiny");
  const LlamaModel model(config, random_weights(config, 3, at::kFloat, at::Device(at::kCUDA, 0)));
  for (DecodePath path : {DecodePath::kPlain, DecodePath::kFused}) {
    ChainedOptions o;
    o.path = path;
    o.batch = 3;
    o.prompt = 9;
    o.steps = 12;
    ChainedDecode replayed(model, o);
    o.graphs = false;
    ChainedDecode eager(model, o);
    INFO(to_string(path));
    REQUIRE(replayed.captured());
    CHECK_FALSE(eager.captured());
    replayed.rewind();
    eager.rewind();
    for (int64_t i = 0; i < o.steps; ++i) {
      replayed.step();
      eager.step();
      CHECK(at::equal(replayed.ids(), eager.ids()));
    }
    replayed.rewind();
    const auto kernels =
        statickv::detail::graph_kernels(at::Device(at::kCUDA, 0), 0, replayed.body());
    CHECK(kernels.size() >= static_cast<size_t>(config.num_hidden_layers));
    for (const auto& k : kernels) CHECK(k.grid[0] >= 1);
  }
}

TEST_CASE(
    "on CUDA in bfloat16, the fused LM head's float32 logits are the plain path's within "
    "bf16 rounding",
    "[cuda][model][fp32_logits]") {
  // The fused path takes float32 logits straight from the GEMM
  // (fp32_logits, Note [kernel switches]); the plain path rounds to bf16
  // and casts. The first token's logits see the same prompt on both paths:
  // they differ by the fused layer's rounding and the skipped one, a few
  // bf16 units in the last place of logits of this size.
  const ModelConfig config = named_config("tiny");
  const LlamaModel model(config,
                         random_weights(config, 3, at::kBFloat16, at::Device(at::kCUDA, 0)));
  GenerateOptions options;
  options.max_new_tokens = 2;
  options.bucketed = false;
  options.record_logits = true;
  options.path = DecodePath::kPlain;
  const GenerateResult plain = generate(model, ragged_prompts(), options);
  options.path = DecodePath::kFused;
  const GenerateResult fused = generate(model, ragged_prompts(), options);
  for (size_t r = 0; r < ragged_prompts().size(); ++r) {
    const at::Tensor a = fused.logits[r][0], b = plain.logits[r][0];
    CHECK(a.scalar_type() == at::kFloat);
    const double scale = 1.0 + b.abs().max().item<double>();
    INFO("row " << r << " max diff " << max_diff(a, b) << ", scale " << scale);
    CHECK(max_diff(a, b) <= 0.05 * scale);
  }
}

TEST_CASE("on CUDA, act_mul's kernel equals its CPU twin, every dtype and activation",
          "[cuda][act_mul]") {
  // The same float32 lines on both devices (act_math.hpp); the device's
  // exp and tanh may differ from the host's by a float32 ulp, which a
  // rounding to the dtype shows at most as one unit in its last place.
  at::manual_seed(9);
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    const double unit = dtype == at::kBFloat16 ? 1.0 / 128 : dtype == at::kHalf ? 1.0 / 1024 : 1e-6;
    for (Activation act : {Activation::kSilu, Activation::kGeluTanh}) {
      for (int64_t inter : {1, 37, 8192}) {
        const at::Tensor gate_up = at::randn({5, 2 * inter}).mul(4).to(dtype);
        const at::Tensor cpu = act_mul(gate_up, act);
        const at::Tensor gpu = act_mul(gate_up.to(at::kCUDA), act).cpu();
        INFO(c10::toString(dtype) << ", inter " << inter << ", max diff " << max_diff(gpu, cpu));
        CHECK(at::allclose(gpu.to(at::kFloat), cpu.to(at::kFloat), unit, unit));
      }
    }
  }
}
