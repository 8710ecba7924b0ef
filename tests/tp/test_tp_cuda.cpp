// Tensor parallelism on the GPU: world 1 through c10d's ProcessGroupNCCL
// (docs/tensor_parallel.md, "The GPU path"). One rank's all-reduce is the
// identity, so a one-rank model must give the plain model's ids exactly,
// through every collective it issues (two all-reduces per layer, the
// vocab-parallel all-gather, the divergence check's MAX), and its logits up
// to the order of a sum: cuBLAS picks its kernel by shape, and the sharded
// products (the vocab-parallel head, the split projections) differ in shape
// from the plain model's, so their float32 sums may round apart (the H200
// run saw it; on the CPU they agree to the bit).

#include <statickv/engine/generator.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/tp/transport.hpp>

#include <ATen/ATen.h>
#include <catch2/catch.hpp>

#include <unistd.h>

namespace sr = statickv::reference;

TEST_CASE("world 1 through NCCL gives the plain model's ids and logits", "[cuda][tp]") {
  const at::Device cuda(at::kCUDA, 0);
  const sr::ModelConfig config = sr::named_config("tiny");
  const sr::Weights weights = sr::random_weights(config, 11, at::kFloat, cuda);
  sr::Rendezvous where;
  where.master_port = 20000 + getpid() % 20000;
  sr::TpShard shard;
  shard.comm = sr::connect(where, cuda);
  shard.vocab_parallel = true;
  shard.check_divergence = true;
  const sr::LlamaModel plain(config, weights);
  const sr::LlamaModel one_rank(config, weights, shard);
  sr::GenerateOptions options;
  options.max_new_tokens = 8;
  options.stop_at_eos = false;
  options.record_logits = true;
  options.cuda_graphs = false;  // collectives inside captured graphs: not supported
  const std::vector<std::vector<int64_t>> prompts = {{5, 9, 14, 2, 77}, {11, 4}, {90, 13, 27}};
  const sr::GenerateResult a = sr::generate(plain, prompts, options);
  const sr::GenerateResult b = sr::generate(one_rank, prompts, options);
  CHECK(a.tokens == b.tokens);
  for (size_t i = 0; i < prompts.size(); ++i) {
    INFO("prompt " << i << " max diff " << (a.logits[i] - b.logits[i]).abs().max().item<float>());
    CHECK(at::allclose(a.logits[i], b.logits[i], /*rtol=*/1e-4, /*atol=*/1e-4));
  }
}
