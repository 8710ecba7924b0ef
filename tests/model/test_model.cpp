// LlamaModel (reference/model/include/statickv/model/model.hpp): the logits a
// forward pass gives (every token, each row's last, none), a cache decoded
// token by token against the full forward, on the plain and the fused path;
// what the model reports of itself (config, dtype, device, cache geometry,
// its single-process plan), which decode path it runs, the step check, and
// the weights and inputs it refuses.

#include "support.hpp"
#include "support/model.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/model.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

LlamaModel tiny_model(const std::string& name, at::ScalarType dtype = at::kFloat) {
  return random_model(name, /*seed=*/7, dtype);
}

// One rank of one: the collectives are the identity; it counts the
// all-reduces and records each step check.
class OneRank final : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t world() const override { return 1; }
  void all_reduce_sum(at::Tensor&) override { ++reduces; }
  at::Tensor all_gather_last(const at::Tensor& local) override { return local; }
  void barrier() override {}
  void broadcast_bytes(std::string&) override {}
  void check_same(const char*, int64_t value) override { checked.push_back(value); }
  int64_t reduces = 0;
  std::vector<int64_t> checked;
};

LlamaModel one_rank_model(const std::shared_ptr<OneRank>& comm, bool check_divergence) {
  const ModelConfig config = named_config("tiny");
  TpShard shard;
  shard.comm = comm;
  shard.check_divergence = check_divergence;
  return LlamaModel(config, random_weights(config, /*seed=*/7, at::kFloat, at::kCPU), shard);
}

at::Tensor ids_of(int64_t rows, std::vector<int64_t> ids) { return positions(rows, ids); }

}  // namespace

TEST_CASE("forward gives float32 logits of every token, of each row's last, or none", "[model]") {
  const LlamaModel model = tiny_model("tiny");
  const at::Tensor ids = ids_of(2, {5, 9, 14, 2, 77, 11, 4, 90, 0, 0});
  // Row 1 holds three tokens, then padding.
  const at::Tensor pos = positions(2, {0, 1, 2, 3, 4, 0, 1, 2, -1, -1});
  DynamicCache all_backend(model.config());
  const at::Tensor all = model.forward(ids, pos, all_backend);
  CHECK(all.sizes() == at::IntArrayRef({2, 5, 128}));
  CHECK(all.scalar_type() == at::kFloat);
  DynamicCache last_backend(model.config());
  const at::Tensor last = model.forward(ids, pos, last_backend, -1, Logits::kLast);
  REQUIRE(last.sizes() == at::IntArrayRef({2, 128}));
  CHECK(close(last[0], all[0][4], 1e-5));
  CHECK(close(last[1], all[1][2], 1e-5));  // the row's highest position, not its last column
  DynamicCache none_backend(model.config());
  CHECK_FALSE(model.forward(ids, pos, none_backend, -1, Logits::kNone).defined());
  // kNone still fills the cache: the next token sees the prompt.
  const at::Tensor next = model.forward(ids_of(2, {3, 3}), positions(2, {5, 3}), none_backend);
  DynamicCache whole(model.config());
  const at::Tensor full =
      model.forward(ids_of(1, {5, 9, 14, 2, 77, 3}), positions(1, {0, 1, 2, 3, 4, 5}), whole);
  CHECK(close(next[0][0], full[0][5], 1e-4));
}

TEST_CASE("decoding token by token through a cache gives the full forward's logits, either path",
          "[model]") {
  const std::vector<int64_t> tokens = {5, 9, 14, 2, 77, 31, 8, 64, 3, 19, 42, 7};
  const int64_t n = static_cast<int64_t>(tokens.size());
  for (const char* name : {"tiny", "tiny-gemma2", "tiny-qwen3"}) {
    const LlamaModel model = tiny_model(name);
    DynamicCache no_cache(model.config());
    const at::Tensor full =
        model.forward(ids_of(1, tokens), arange_positions(0, n).view({1, n}), no_cache);
    const CacheConfig cc = model.cache_config(1, 32);
    for (DecodePath path : {DecodePath::kPlain, model.resolve_path(DecodePath::kAuto, cc)}) {
      INFO(name << ", " << to_string(path));
      const std::unique_ptr<Cache> cache = make_cache(cc);
      CacheBackend backend(*cache, AttentionKernel::kSdpa, path);
      const int64_t prompt = 4;
      const at::Tensor first = model.forward(
          ids_of(1, std::vector<int64_t>(tokens.begin(), tokens.begin() + prompt)),
          arange_positions(0, prompt).view({1, prompt}), backend, prompt, Logits::kLast);
      CHECK(close(first[0], full[0][prompt - 1], 1e-4));
      for (int64_t t = prompt; t < n; ++t) {
        const at::Tensor step = model.forward(ids_of(1, {tokens[static_cast<size_t>(t)]}),
                                              positions(1, {t}), backend, t + 1);
        INFO("position " << t << " max diff " << max_diff(step[0][0], full[0][t]));
        CHECK(close(step[0][0], full[0][t], 1e-4));
      }
    }
  }
}

TEST_CASE("config, dtype, device and cache_config describe the model's weights", "[model]") {
  const LlamaModel model = tiny_model("tiny-mistral", at::kBFloat16);
  CHECK(model.config().model_type == "mistral");
  CHECK(model.config().sliding_window == 8);
  CHECK(model.dtype() == at::kBFloat16);
  CHECK(model.device() == at::Device(at::kCPU));
  const CacheConfig c = model.cache_config(3, 40);
  CHECK(c.num_layers == 2);
  CHECK(c.num_kv_heads == 2);
  CHECK(c.head_dim == 16);
  CHECK(c.max_batch == 3);
  CHECK(c.max_len == 40);
  CHECK(c.dtype == at::kBFloat16);
  CHECK(c.device == at::Device(at::kCPU));
  CHECK(c.layer_types == model.config().layer_types);
  CHECK(c.sliding_window == 8);
  // Without a sliding layer, no window, whatever the config's field says.
  ModelConfig full = named_config("tiny");
  full.sliding_window = 8;
  const LlamaModel plain(full, random_weights(full, 7, at::kFloat, at::kCPU));
  CHECK(plain.cache_config(1, 16).sliding_window == 0);
  CHECK(plain.dtype() == at::kFloat);
}

TEST_CASE("tp_plan of a single process is rank 0 of 1 holding every head, column and row",
          "[model]") {
  const LlamaModel model = tiny_model("tiny");
  const TpPlan& plan = model.tp_plan();
  CHECK(plan.tp.rank == 0);
  CHECK(plan.tp.world == 1);
  CHECK(plan.q_first == 0);
  CHECK(plan.q_heads == 4);
  CHECK(plan.kv.first == 0);
  CHECK(plan.kv.count == 2);
  CHECK(plan.inter == 128);
  CHECK(plan.vocab_first == 0);
  CHECK(plan.vocab == 128);
}

TEST_CASE("auto resolves to fused for a single process on plain storage, plain elsewhere",
          "[model]") {
  const LlamaModel model = tiny_model("tiny");
  const CacheConfig plain = model.cache_config(1, 16);
  CHECK(model.resolve_path(DecodePath::kAuto, plain) == DecodePath::kFused);
  CacheConfig offloaded = plain;
  offloaded.host_offload = true;
  CHECK(model.resolve_path(DecodePath::kAuto, offloaded) == DecodePath::kPlain);
  CacheConfig quantized = plain;
  quantized.kv_storage = KvStorage::kInt8;
  CHECK(model.resolve_path(DecodePath::kAuto, quantized) == DecodePath::kPlain);
  // An explicit path is kept as asked.
  CHECK(model.resolve_path(DecodePath::kPlain, plain) == DecodePath::kPlain);
  CHECK(model.resolve_path(DecodePath::kFused, offloaded) == DecodePath::kFused);
  CHECK_NOTHROW(model.check_path(DecodePath::kFused));

  const auto comm = std::make_shared<OneRank>();
  const LlamaModel rank = one_rank_model(comm, false);
  CHECK(rank.resolve_path(DecodePath::kAuto, plain) == DecodePath::kPlain);
  CHECK_NOTHROW(rank.check_path(DecodePath::kPlain));
  CHECK_NOTHROW(rank.check_path(DecodePath::kAuto));
  require_error([&] { rank.check_path(DecodePath::kFused); },
                {"path: expected plain or auto with tp=1", "all-reduce", "got fused"});
  StaticCache cache(plain);
  CacheBackend fused(cache, AttentionKernel::kSdpa, DecodePath::kFused);
  require_error([&] { rank.forward(ids_of(1, {1}), positions(1, {0}), fused); },
                {"path", "got fused"});
}

TEST_CASE("a rank's forward all-reduces each row-parallel projection and equals the process's",
          "[model]") {
  const auto comm = std::make_shared<OneRank>();
  const LlamaModel rank = one_rank_model(comm, true);
  const LlamaModel alone = tiny_model("tiny");
  const at::Tensor ids = ids_of(1, {5, 9, 14}), pos = positions(1, {0, 1, 2});
  DynamicCache a(alone.config()), b(rank.config());
  const at::Tensor want = alone.forward(ids, pos, a);
  const at::Tensor got = rank.forward(ids, pos, b);
  CHECK(comm->reduces == 2 * 2);  // o_proj and down_proj of each of 2 layers
  CHECK(at::equal(got, want));
  CHECK(comm->checked.empty());  // forward issues no step check
}

TEST_CASE("check_same_step sends one fingerprint a pass where checking is on, else nothing",
          "[model]") {
  const at::Tensor ids = ids_of(2, {5, 9, 14, 2});
  CHECK_NOTHROW(tiny_model("tiny").check_same_step(ids, 2, Logits::kLast));  // no group: no-op

  const auto off = std::make_shared<OneRank>();
  one_rank_model(off, false).check_same_step(ids, 2, Logits::kLast);
  CHECK(off->checked.empty());

  const auto on = std::make_shared<OneRank>();
  const LlamaModel rank = one_rank_model(on, true);
  rank.check_same_step(ids, 2, Logits::kLast);
  rank.check_same_step(ids, 2, Logits::kLast);
  REQUIRE(on->checked.size() == 2);
  CHECK(on->checked[0] != on->checked[1]);  // the pass number is part of it
  require_error([&] { rank.check_same_step(ids.to(at::kInt), 2, Logits::kLast); },
                {"ids", "int64 [b, q]", "Int"});
  CHECK(on->checked.size() == 2);
}

TEST_CASE("the constructor names a missing, misshapen or mistyped parameter", "[model]") {
  const ModelConfig config = named_config("tiny");
  const Weights weights = random_weights(config, 7, at::kFloat, at::kCPU);
  Weights missing = weights;
  missing.erase("model.norm.weight");
  require_error([&] { (void)LlamaModel(config, missing); },
                {"weights: expected parameter model.norm.weight", "missing"});
  Weights misshapen = weights;
  const std::string q = parameter_name(1, LayerParam::kQProj);
  misshapen[q] = at::zeros({64, 63});
  require_error([&] { (void)LlamaModel(config, misshapen); }, {q, "[64, 64]", "[64, 63]"});
  Weights mistyped = weights;
  mistyped[q] = mistyped[q].to(at::kDouble);
  require_error([&] { (void)LlamaModel(config, mistyped); }, {q, "like the embedding", "Double"});
}

TEST_CASE("forward refuses ids or positions that are not int64 [b, q] alike", "[model]") {
  const LlamaModel model = tiny_model("tiny");
  DynamicCache backend(model.config());
  require_error(
      [&] {
        model.forward(ids_of(1, {1, 2}), positions(1, {0, 1, 2}), backend);
      },
      {"positions: expected shape [1, 2]", "[1, 3]"});
  require_error([&] { model.forward(ids_of(1, {1}).to(at::kInt), positions(1, {0}), backend); },
                {"ids", "Int"});
  require_error([&] { model.forward(ids_of(1, {1}), positions({0}), backend); },
                {"positions", "int64 [b, q]"});
}
