// [cuda] The reference decoder on a GPU: generation through CUDA graphs
// (GraphRunner buckets) gives the eager path's tokens and logits.

#include "support.hpp"

#include <statickv/reference/generate.hpp>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

TEST_CASE("on CUDA, graph-replayed generation equals eager generation", "[cuda][model]") {
  for (const std::string shape : {"tiny", "tiny-qwen2"}) {
    const ModelConfig config = named_config(shape);
    const LlamaModel model(config, random_weights(config, 3, at::kFloat, at::Device(at::kCUDA, 0)));
    const std::vector<std::vector<int64_t>> prompts = {
        {5, 9, 14, 2, 77, 31, 8, 64, 3, 19, 42, 7, 1}, {11, 4}, {90, 13, 27, 6, 55}};
    GenerateOptions options;
    options.max_new_tokens = 12;
    options.record_logits = true;
    options.bucketed = false;
    const GenerateResult eager = generate(model, prompts, options);
    options.bucketed = true;
    const GenerateResult graphed = generate(model, prompts, options, /*max_batch=*/8);
    INFO(shape);
    CHECK(graphed.tokens == eager.tokens);
    for (size_t r = 0; r < prompts.size(); ++r) {
      INFO("row " << r << " max diff " << max_diff(graphed.logits[r], eager.logits[r]));
      CHECK(close(graphed.logits[r], eager.logits[r], 1e-3));
    }
    CHECK(graphed.decode_runner.captures >= 1);
    CHECK(graphed.decode_runner.failed_captures == 0);
    CHECK(graphed.decode_runner.replays == 11);
    CHECK(graphed.prefill_runner.failed_captures == 0);
  }
}
