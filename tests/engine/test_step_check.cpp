// The tensor-parallel step check (Note [ranks issue identical steps],
// docs/tensor_parallel.md): every pass's fingerprint is summed from the
// host inputs it was packed from, so the check never reads the device, and
// run_pass, not forward, issues it, so a replayed step is checked too. A
// rank of a world of 1 with a recording communicator stands in for the
// transport (tests/tp runs the real one across processes).

#include "support.hpp"

#include <statickv/engine/generator.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/op_counter.hpp>

#include <memory>
#include <string>
#include <vector>

using namespace statickv;
using namespace statickv::reference;

namespace {

// One rank of one: every collective is the identity; check_same records
// what each pass compared.
class RecordingCommunicator final : public Communicator {
 public:
  int64_t rank() const override { return 0; }
  int64_t world() const override { return 1; }
  void all_reduce_sum(at::Tensor&) override {}
  at::Tensor all_gather_last(const at::Tensor& local) override { return local; }
  void barrier() override {}
  void broadcast_bytes(std::string&) override {}
  void check_same(const char* what, int64_t value) override {
    whats.emplace_back(what);
    values.push_back(value);
  }
  std::vector<std::string> whats;
  std::vector<int64_t> values;
};

struct Rank {
  std::shared_ptr<RecordingCommunicator> comm = std::make_shared<RecordingCommunicator>();
  LlamaModel model;
  explicit Rank(bool check = true) : model(make(comm, check)) {}

  static LlamaModel make(const std::shared_ptr<RecordingCommunicator>& comm, bool check) {
    const ModelConfig config = named_config("tiny");
    TpShard shard;
    shard.comm = comm;
    shard.check_divergence = check;
    return LlamaModel(config, random_weights(config, /*seed=*/5, at::kFloat, at::kCPU), shard);
  }
};

at::Tensor host_ids(std::vector<int64_t> ids, int64_t b) {
  const int64_t q = static_cast<int64_t>(ids.size()) / b;
  return at::tensor(ids, at::TensorOptions(at::kLong)).view({b, q});
}

}  // namespace

TEST_CASE("the step check reads only the pass's host inputs: nothing launches, copies or syncs",
          "[step_check]") {
  Rank rank;
  const at::Tensor ids = host_ids({5, 9, 14, 2, 7, 1}, 2);
  OpCounter counter;
  rank.model.check_same_step(ids, 3, Logits::kLast);
  CHECK(counter.launches() == 0);
  CHECK(counter.host_copies() == 0);
  CHECK(counter.syncs() == 0);
  REQUIRE(rank.comm->values.size() == 1);
  CHECK(rank.comm->whats[0].find("a pass's host inputs (pass number, batch, query length, "
                                 "attend_len, token checksum)") != std::string::npos);
}

TEST_CASE("two ranks fed the same passes agree, and a token, a shape or a pass apart they differ",
          "[step_check]") {
  Rank a, b;
  const at::Tensor ids = host_ids({5, 9, 14, 2, 7, 1}, 2);
  for (Rank* r : {&a, &b}) r->model.check_same_step(ids, 3, Logits::kLast);
  CHECK(a.comm->values == b.comm->values);

  a.model.check_same_step(ids, 3, Logits::kLast);
  CHECK(a.comm->values[1] != a.comm->values[0]);  // the pass number counts
  b.model.check_same_step(host_ids({5, 9, 14, 2, 7, 2}, 2), 3, Logits::kLast);
  CHECK(b.comm->values[1] != a.comm->values[1]);  // one token apart

  const auto second = [&](const at::Tensor& t, int64_t attend, Logits logits) {
    Rank r;
    r.model.check_same_step(ids, 3, Logits::kLast);
    r.model.check_same_step(t, attend, logits);
    return r.comm->values[1];
  };
  CHECK(second(ids, 3, Logits::kLast) == a.comm->values[1]);
  CHECK(second(ids.view({3, 2}), 3, Logits::kLast) != a.comm->values[1]);  // shape
  CHECK(second(ids, 4, Logits::kLast) != a.comm->values[1]);               // attended length
  CHECK(second(ids, 3, Logits::kAll) != a.comm->values[1]);                // logits mode
  // The same tokens in another order.
  CHECK(second(host_ids({9, 5, 14, 2, 7, 1}, 2), 3, Logits::kLast) != a.comm->values[1]);
}

TEST_CASE("forward issues no step check, and each decoder pass is checked once, replayed or eager",
          "[step_check]") {
  const std::vector<std::vector<int64_t>> prompts = {{5, 9, 14, 2, 77}, {11, 4}, {90, 13, 27}};
  GenerateOptions options;
  options.max_new_tokens = 5;
  options.stop_at_eos = false;
  std::vector<std::vector<int64_t>> tokens;
  for (bool bucketed : {true, false}) {
    INFO("bucketed " << bucketed);
    options.bucketed = bucketed;
    Rank rank;
    const GenerateResult result = generate(rank.model, prompts, options);
    // One prefill pass (every prompt fits one chunk), then one pass per
    // further token.
    CHECK(rank.comm->values.size() == static_cast<size_t>(options.max_new_tokens));
    tokens.push_back(result.tokens[0]);

    const size_t before = rank.comm->values.size();
    DynamicCache once(rank.model.config());
    rank.model.forward(host_ids({5, 9, 14}, 1), host_ids({0, 1, 2}, 1), once);
    CHECK(rank.comm->values.size() == before);
  }
  CHECK(tokens[0] == tokens[1]);

  Rank unchecked(/*check=*/false);
  generate(unchecked.model, prompts, options);
  CHECK(unchecked.comm->values.empty());
}

TEST_CASE("the step check refuses ids off the host, naming the argument", "[step_check]") {
  Rank rank;
  const at::Tensor meta = at::empty({1, 3}, at::TensorOptions(at::kLong).device(at::kMeta));
  try {
    rank.model.check_same_step(meta, 3, Logits::kLast);
    FAIL("expected a c10::Error");
  } catch (const c10::Error& e) {
    const std::string what = e.what_without_backtrace();
    INFO(what);
    CHECK(what.find("ids: expected the pass's host inputs (cpu) but got meta") !=
          std::string::npos);
  }
  CHECK(rank.comm->values.empty());
}
