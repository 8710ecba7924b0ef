// [cuda] The reference decoder on a GPU: generation through CUDA graphs
// (GraphRunner buckets) gives the eager path's tokens and logits.

#include "support.hpp"
#include "support/generation.hpp"

#include <statickv/reference/generate.hpp>

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
