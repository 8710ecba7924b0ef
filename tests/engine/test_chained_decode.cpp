// Note [chained step]: the chained decode step is the decoding loop's step.
// Its tokens are Generator's, its buffers never move, a rewound chain
// repeats itself, its body is one step on its own cache, and what it
// cannot do it refuses by name.

#include "support.hpp"
#include "support/model.hpp"

#include <statickv/engine/chained_decode.hpp>
#include <statickv/engine/generator.hpp>
#include <statickv/model/checkpoint.hpp>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

LlamaModel chained_model(const std::string& shape) { return random_model(shape, /*seed=*/5); }

ChainedOptions chained_options(DecodePath path, int64_t batch) {
  ChainedOptions o;
  o.path = path;
  o.batch = batch;
  o.prompt = 7;
  o.steps = 9;
  o.seed = 11;
  return o;
}

// The chain's ids [batch, 1 + steps]: the prefill's pick, then each step's.
std::vector<std::vector<int64_t>> chained_tokens(ChainedDecode& chain) {
  const int64_t b = chain.options().batch;
  std::vector<std::vector<int64_t>> out(static_cast<size_t>(b));
  auto take = [&] {
    const at::Tensor ids = chain.ids().cpu();
    for (int64_t r = 0; r < b; ++r)
      out[static_cast<size_t>(r)].push_back(ids[r][0].item<int64_t>());
  };
  chain.rewind();
  take();
  for (int64_t i = 0; i < chain.options().steps; ++i) {
    chain.step();
    take();
  }
  return out;
}

}  // namespace

TEST_CASE("the chained step's greedy tokens are Generator's, on both paths and every family",
          "[model][chained]") {
  for (const std::string shape : {"tiny", "tiny-qwen3", "tiny-gemma3"}) {
    const LlamaModel model = chained_model(shape);
    for (DecodePath path : {DecodePath::kPlain, DecodePath::kFused}) {
      ChainedDecode chain(model, chained_options(path, 3));
      std::vector<std::vector<int64_t>> prompts;
      for (int64_t r = 0; r < 3; ++r) prompts.push_back(chain.prompt(r));
      GenerateOptions g;
      g.max_new_tokens = chain.options().steps + 1;
      g.stop_at_eos = false;
      g.bucketed = false;
      g.path = path;
      INFO(shape << ", " << to_string(path));
      CHECK(chained_tokens(chain) == generate(model, prompts, g).tokens);
    }
  }
}

TEST_CASE("a chain keeps its buffers and a rewound chain repeats itself, sampled too",
          "[model][chained]") {
  const LlamaModel model = chained_model("tiny");
  ChainedOptions o = chained_options(DecodePath::kFused, 2);
  o.sampling.temperature = 0.9;
  o.sampling.top_p = 0.8;
  o.sampling.seed = 17;
  ChainedDecode chain(model, o);
  const void* ids = chain.ids().data_ptr();
  const void* positions = chain.positions().data_ptr();
  const auto first = chained_tokens(chain);
  CHECK(chained_tokens(chain) == first);
  CHECK(chain.ids().data_ptr() == ids);
  CHECK(chain.positions().data_ptr() == positions);
  CHECK(chain.positions()[0][0].item<int64_t>() == o.prompt + o.steps);
  CHECK(chain.attend() == o.prompt + o.steps);
  CHECK_FALSE(chain.captured());  // the CPU runs the same launches eagerly
}

TEST_CASE("a chain refuses bad options and a step past its cache by name", "[model][chained]") {
  const LlamaModel model = chained_model("tiny");
  ChainedOptions o = chained_options(DecodePath::kFused, 1);
  o.batch = 0;
  require_error([&] { ChainedDecode c(model, o); }, {"batch", ">= 1", "0"});
  o = chained_options(DecodePath::kAuto, 1);
  require_error([&] { ChainedDecode c(model, o); }, {"path", "auto"});
  o = chained_options(DecodePath::kPlain, 1);
  o.prompt = model.config().max_position_embeddings;
  require_error([&] { ChainedDecode c(model, o); }, {"prompt + steps", "max_position_embeddings"});
  o = chained_options(DecodePath::kPlain, 1);
  o.steps = 2;
  ChainedDecode chain(model, o);
  chain.step();
  chain.step();
  require_error([&] { chain.step(); }, {"step", "at most 2", "step 3"});
  chain.rewind();
  chain.step();  // rewound: the chain starts again
}

TEST_CASE("body runs one step as step does, on the chain's own cache of prompt + steps positions",
          "[model][chained]") {
  const LlamaModel model = chained_model("tiny");
  const ChainedOptions o = chained_options(DecodePath::kFused, 2);
  ChainedDecode chain(model, o);
  CHECK(chain.cache().config().max_batch == o.batch);
  CHECK(chain.cache().config().max_len == chain.attend());
  CHECK(chain.cache().seq_lengths()[1].item<int64_t>() == o.prompt);  // prefilled
  const auto stepped = chained_tokens(chain);
  CHECK(chain.cache().seq_lengths()[1].item<int64_t>() == o.prompt + o.steps);
  chain.rewind();
  const std::function<void()> body = chain.body();
  std::vector<std::vector<int64_t>> by_body(2);
  for (int64_t i = 0; i <= o.steps; ++i) {
    if (i > 0) {
      OpCounter counter;
      body();
      CHECK(counter.syncs() == 0);  // no host value: a capture of one's own can take it
      CHECK(counter.host_copies() == 0);
    }
    const at::Tensor ids = chain.ids().cpu();
    for (int64_t r = 0; r < 2; ++r)
      by_body[static_cast<size_t>(r)].push_back(ids[r][0].item<int64_t>());
  }
  CHECK(by_body == stepped);
  CHECK(chain.positions()[0][0].item<int64_t>() == o.prompt + o.steps);
}
