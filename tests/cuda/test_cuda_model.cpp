// [cuda] The reference decoder on a GPU: generation through CUDA graphs
// (GraphRunner buckets) gives the eager path's tokens and logits.

#include "support.hpp"
#include "support/generation.hpp"

#include <statickv/reference/checkpoint.hpp>
#include <statickv/reference/generator.hpp>

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
