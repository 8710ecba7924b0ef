// Tensor-parallel sharding (include/statickv/sharding.hpp,
// reference/model/src/tensor_parallel.cpp): which kv heads, query heads, MLP
// columns and vocabulary rows each rank holds, and the rules that refuse a
// model that cannot be split. No transport needed.

#include "support.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/tensor_parallel.hpp>

#include <functional>
#include <map>
#include <string>
#include <vector>

using namespace statickv;
namespace sr = statickv::reference;

namespace {

void require_error(const std::function<void()>& f, const std::vector<std::string>& parts) {
  try {
    f();
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    for (const std::string& part : parts) {
      INFO(what);
      CHECK(what.find(part) != std::string::npos);
    }
    return;
  }
  FAIL("expected a c10::Error");
}

sr::ModelConfig tiny(int64_t heads, int64_t kv_heads) {
  sr::ModelConfig c = sr::named_config("tiny");
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  return c;
}

}  // namespace

TEST_CASE("kv heads that divide by the world are split in rank order", "[sharding]") {
  for (int64_t rank = 0; rank < 4; ++rank) {
    const KvHeadShard shard = shard_kv_heads(8, rank, 4);
    CHECK(shard.first == 2 * rank);
    CHECK(shard.count == 2);
    CHECK(shard.replicas == 1);
  }
}

TEST_CASE("a world that divides by the kv heads replicates each head on world/kv ranks",
          "[sharding]") {
  std::vector<int64_t> holders(2, 0);
  for (int64_t rank = 0; rank < 4; ++rank) {
    const KvHeadShard shard = shard_kv_heads(2, rank, 4);
    CHECK(shard.count == 1);
    CHECK(shard.replicas == 2);
    CHECK(shard.first == rank / 2);
    holders[static_cast<size_t>(shard.first)] += 1;
  }
  CHECK(holders == std::vector<int64_t>{2, 2});
}

TEST_CASE("kv heads neither dividing nor divided by the world are refused", "[sharding]") {
  require_error([] { shard_kv_heads(3, 0, 2); }, {"num_kv_heads", "world size 2", "but got 3"});
  require_error([] { shard_kv_heads(4, 2, 2); }, {"rank", "[0, 2)", "but got 2"});
  require_error([] { shard_kv_heads(4, 0, 0); }, {"world", ">= 1", "but got 0"});
}

TEST_CASE("a sharded cache config allocates only the rank's kv heads", "[sharding]") {
  const CacheConfig config = test::ConfigBuilder().num_kv_heads(4);
  const CacheConfig shard = shard_cache_config(config, 1, 2);
  CHECK(shard.num_kv_heads == 2);
  CHECK(shard.num_layers == config.num_layers);
  CHECK(shard.max_batch == config.max_batch);
  CHECK(shard.max_len == config.max_len);
  StaticCache cache(shard);
  CHECK(cache.keys(0).size(1) == 2);
}

TEST_CASE("the plan refuses a model that cannot be split, naming the field", "[sharding]") {
  require_error(
      [] {
        sr::plan_tensor_parallel(tiny(6, 2), {0, 4});
      },
      {"ModelConfig.num_attention_heads", "world size 4", "but got 6"});
  require_error(
      [] {
        sr::plan_tensor_parallel(tiny(6, 3), {0, 2});
      },
      {"ModelConfig.num_key_value_heads", "world size 2", "but got 3"});
  sr::ModelConfig odd_mlp = tiny(4, 2);
  odd_mlp.intermediate_size = 130;
  require_error(
      [&] {
        sr::plan_tensor_parallel(odd_mlp, {0, 4});
      },
      {"ModelConfig.intermediate_size", "but got 130"});
  sr::ModelConfig odd_vocab = tiny(4, 2);
  odd_vocab.vocab_size = 130;
  require_error(
      [&] {
        sr::plan_tensor_parallel(odd_vocab, {0, 4, /*vocab_parallel=*/true});
      },
      {"ModelConfig.vocab_size", "vocab-parallel", "but got 130"});
  // Replicated, the LM head needs no divisible vocabulary.
  CHECK(sr::plan_tensor_parallel(odd_vocab, {0, 4}).vocab == 130);
}

TEST_CASE("every rank's slices put together are the whole checkpoint", "[sharding]") {
  sr::ModelConfig config = tiny(4, 2);
  config.attention_bias = true;
  const sr::Weights full = sr::random_weights(config, 7, at::kFloat, at::kCPU);
  for (int64_t world : {2, 4}) {
    for (bool vocab_parallel : {false, true}) {
      std::map<std::string, std::vector<at::Tensor>> parts;
      std::map<std::string, int64_t> dims;
      for (int64_t rank = 0; rank < world; ++rank) {
        const sr::TpPlan plan = sr::plan_tensor_parallel(config, {rank, world, vocab_parallel});
        const auto shapes = sr::expected_parameters(config, plan);
        for (const auto& [name, slice] : sr::shard_slices(config, plan)) {
          const at::Tensor part = full.at(name).narrow(slice.dim, slice.start, slice.length);
          parts[name].push_back(part);
          dims[name] = slice.dim;
          for (const auto& [shape_name, shape] : shapes) {
            if (shape_name == name) CHECK(part.sizes() == at::IntArrayRef(shape));
          }
        }
      }
      for (const auto& [name, pieces] : parts) {
        INFO(name << " of world " << world);
        // Replicated kv heads: consecutive ranks hold the same head; keep one.
        std::vector<at::Tensor> distinct;
        for (const at::Tensor& piece : pieces) {
          if (distinct.empty() || !at::equal(distinct.back(), piece)) distinct.push_back(piece);
        }
        CHECK(at::equal(at::cat(distinct, dims[name]), full.at(name)));
      }
      CHECK(parts.count(sr::kLmHead) == (vocab_parallel ? 1u : 0u));
    }
  }
}
