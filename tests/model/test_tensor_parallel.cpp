// Tensor parallelism in one process (reference/model/include/statickv/model/
// tensor_parallel.hpp): each rank's plan, the parameter slices it holds and
// their shapes, and two ranks on threads, talking through a Communicator
// that meets at one in-process table, giving the single process's logits
// with a replicated or a vocabulary-parallel LM head; ranks fed different
// passes are told apart by the step check. The sharding rules in depth are
// tests/tp/test_sharding.cpp's; ranks as processes over Gloo, tests/tp/test_tp.cpp's.

#include "support.hpp"

#include <statickv/model/checkpoint.hpp>
#include <statickv/model/model.hpp>
#include <statickv/model/tensor_parallel.hpp>

#include <chrono>
#include <condition_variable>
#include <cstring>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <thread>
#include <vector>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

// Where `world` ranks on threads meet: each collective is one exchange.
class Table {
 public:
  explicit Table(int64_t world) : world_(world), slots_(static_cast<size_t>(world)) {}
  int64_t world() const { return world_; }

  // Every rank's `mine` in rank order, once every rank has put its own.
  std::vector<at::Tensor> exchange(int64_t rank, at::Tensor mine) {
    std::unique_lock<std::mutex> lock(mutex_);
    wait(lock, [&] { return leaving_ == 0; });  // the last round's readers are gone
    slots_[static_cast<size_t>(rank)] = std::move(mine);
    if (++arrived_ == world_) {
      result_ = slots_;
      arrived_ = 0;
      leaving_ = world_;
      ++round_;
      changed_.notify_all();
    } else {
      const int64_t round = round_;
      wait(lock, [&] { return round_ != round; });
    }
    std::vector<at::Tensor> out = result_;
    if (--leaving_ == 0) changed_.notify_all();
    return out;
  }

 private:
  template <typename Pred>
  void wait(std::unique_lock<std::mutex>& lock, Pred ready) {
    TORCH_CHECK(changed_.wait_for(lock, std::chrono::seconds(60), ready),
                "in-process group: a rank never came");
  }

  int64_t world_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<at::Tensor> slots_, result_;
  int64_t arrived_ = 0, leaving_ = 0, round_ = 0;
};

class TableRank final : public Communicator {
 public:
  TableRank(std::shared_ptr<Table> table, int64_t rank) : table_(std::move(table)), rank_(rank) {}
  int64_t rank() const override { return rank_; }
  int64_t world() const override { return table_->world(); }
  void all_reduce_sum(at::Tensor& t) override {
    const std::vector<at::Tensor> all = table_->exchange(rank_, t.clone());
    at::Tensor sum = all[0].clone();
    for (size_t i = 1; i < all.size(); ++i) sum.add_(all[i]);  // one order on every rank
    t.copy_(sum);
  }
  at::Tensor all_gather_last(const at::Tensor& local) override {
    return at::cat(table_->exchange(rank_, local.clone()), -1);
  }
  void barrier() override { table_->exchange(rank_, at::Tensor()); }
  void broadcast_bytes(std::string& bytes) override {
    at::Tensor mine;
    if (rank_ == 0) {
      mine = at::empty({static_cast<int64_t>(bytes.size())}, at::kByte);
      std::memcpy(mine.data_ptr(), bytes.data(), bytes.size());
    }
    const at::Tensor first = table_->exchange(rank_, mine)[0];
    bytes.assign(static_cast<const char*>(first.data_ptr()), static_cast<size_t>(first.numel()));
  }
  void check_same(const char* what, int64_t value) override {
    const at::Tensor all = at::cat(table_->exchange(rank_, at::tensor({value}, at::kLong)));
    const int64_t lo = all.min().item<int64_t>(), hi = all.max().item<int64_t>();
    TORCH_CHECK(lo == hi, "ranks diverged on ", what, ": smallest ", lo, ", largest ", hi);
  }

 private:
  std::shared_ptr<Table> table_;
  int64_t rank_;
};

// Runs fn(rank, communicator) on `world` threads; each rank's error message
// ("" when it returned). Catch2 assertions stay on the calling thread.
std::vector<std::string> on_ranks(
    int64_t world, const std::function<void(int64_t, std::shared_ptr<Communicator>)>& fn) {
  const auto table = std::make_shared<Table>(world);
  std::vector<std::string> errors(static_cast<size_t>(world));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < world; ++r) {
    threads.emplace_back([&, r] {
      try {
        fn(r, std::make_shared<TableRank>(table, r));
      } catch (const c10::Error& e) {
        errors[static_cast<size_t>(r)] = e.what_without_backtrace();
      }
    });
  }
  for (std::thread& t : threads) t.join();
  return errors;
}

// Rank `rank`'s model: its slices of `full`, made contiguous.
LlamaModel rank_model(const ModelConfig& config, const Weights& full,
                      std::shared_ptr<Communicator> comm, bool vocab_parallel) {
  const TpPlan plan = plan_tensor_parallel(config, {comm->rank(), comm->world(), vocab_parallel});
  Weights mine = shard_weights(config, plan, full);
  for (auto& [name, t] : mine) t = t.contiguous();
  TpShard shard;
  shard.comm = std::move(comm);
  shard.vocab_parallel = vocab_parallel;
  shard.check_divergence = true;
  return LlamaModel(config, std::move(mine), shard);
}

}  // namespace

TEST_CASE("plan_tensor_parallel gives each rank its query heads, kv heads, columns and rows",
          "[tensor_parallel]") {
  const ModelConfig config = named_config("tiny");  // 4 heads, 2 kv heads, 128 columns and rows
  for (int64_t rank = 0; rank < 2; ++rank) {
    const TpPlan plan = plan_tensor_parallel(config, {rank, 2, /*vocab_parallel=*/true});
    CHECK(plan.tp.rank == rank);
    CHECK(plan.q_first == 2 * rank);
    CHECK(plan.q_heads == 2);
    CHECK(plan.kv.first == rank);
    CHECK(plan.kv.count == 1);
    CHECK(plan.inter_first == 64 * rank);
    CHECK(plan.inter == 64);
    CHECK(plan.vocab_first == 64 * rank);
    CHECK(plan.vocab == 64);
  }
  // Four ranks: each kv head serves two ranks; a replicated head has every row.
  const TpPlan third = plan_tensor_parallel(config, {3, 4, false});
  CHECK(third.q_first == 3);
  CHECK(third.kv.first == 1);
  CHECK(third.kv.count == 1);
  CHECK(third.vocab_first == 0);
  CHECK(third.vocab == 128);
  require_error(
      [&] {
        plan_tensor_parallel(config, {0, 3, false});
      },
      {"ModelConfig.num_attention_heads", "world size 3", "got 4"});
  ModelConfig odd_vocab = config;
  odd_vocab.vocab_size = 127;
  CHECK_NOTHROW(plan_tensor_parallel(odd_vocab, {0, 2, false}));
  require_error(
      [&] {
        plan_tensor_parallel(odd_vocab, {0, 2, true});
      },
      {"ModelConfig.vocab_size", "got 127"});
}

TEST_CASE("shard_slices names the split parameters and shard_weights cuts them as views",
          "[tensor_parallel]") {
  const ModelConfig config = named_config("tiny-qwen2");  // q/k/v biases
  const Weights full = random_weights(config, 3, at::kFloat, at::kCPU);
  CHECK(shard_slices(config, plan_tensor_parallel(config, {0, 1, false})).empty());

  const TpPlan plan = plan_tensor_parallel(config, {1, 2, true});
  const std::map<std::string, Slice> slices = shard_slices(config, plan);
  const auto slice_of = [&](int64_t layer, LayerParam p) {
    return slices.at(parameter_name(layer, p));
  };
  const auto same = [](const Slice& s, int64_t dim, int64_t start, int64_t length) {
    return s.dim == dim && s.start == start && s.length == length;
  };
  CHECK(same(slice_of(0, LayerParam::kQProj), 0, 32, 32));  // heads 2..3 of 16 dims
  CHECK(same(slice_of(0, LayerParam::kQBias), 0, 32, 32));
  CHECK(same(slice_of(3, LayerParam::kKProj), 0, 16, 16));   // kv head 1
  CHECK(same(slice_of(3, LayerParam::kOProj), 1, 32, 32));   // its inputs
  CHECK(same(slice_of(1, LayerParam::kUpProj), 0, 64, 64));  // columns 64..127
  CHECK(same(slice_of(1, LayerParam::kDownProj), 1, 64, 64));
  CHECK(same(slices.at(kLmHead), 0, 64, 64));
  CHECK(slices.count(kEmbedTokens) == 0);
  CHECK(slices.count(parameter_name(0, LayerParam::kInputNorm)) == 0);

  const Weights mine = shard_weights(config, plan, full);
  CHECK(mine.size() == full.size());
  for (const auto& [name, t] : mine) {
    INFO(name);
    const auto it = slices.find(name);
    const at::Tensor want =
        it == slices.end()
            ? full.at(name)
            : full.at(name).narrow(it->second.dim, it->second.start, it->second.length);
    CHECK(at::equal(t, want));
    CHECK(t.data_ptr() == want.data_ptr());  // a view: nothing copied
  }
  Weights incomplete = full;
  incomplete.erase(parameter_name(2, LayerParam::kVProj));
  require_error([&] { shard_weights(config, plan, incomplete); },
                {"weights: expected parameter model.layers.2.self_attn.v_proj.weight"});
}

TEST_CASE("expected_parameters of a plan is every parameter at the rank's slice shape",
          "[tensor_parallel]") {
  for (bool vocab_parallel : {false, true}) {
    const ModelConfig config = named_config("tiny");
    const TpPlan plan = plan_tensor_parallel(config, {0, 2, vocab_parallel});
    const Weights mine =
        shard_weights(config, plan, random_weights(config, 3, at::kFloat, at::kCPU));
    const auto expected = expected_parameters(config, plan);
    const auto whole = expected_parameters(config);
    REQUIRE(expected.size() == whole.size());
    for (size_t i = 0; i < expected.size(); ++i) {
      INFO(expected[i].first);
      CHECK(expected[i].first == whole[i].first);
      CHECK(mine.at(expected[i].first).sizes() == at::IntArrayRef(expected[i].second));
    }
  }
}

TEST_CASE("two ranks on their slices give the single process's logits, either LM head",
          "[tensor_parallel]") {
  for (const char* name : {"tiny", "tiny-qwen2"}) {
    const ModelConfig config = named_config(name);
    const Weights full = random_weights(config, 9, at::kFloat, at::kCPU);
    const at::Tensor ids = positions(2, {5, 9, 14, 2, 11, 4, 90, 13});
    const at::Tensor pos = positions(2, {0, 1, 2, 3, 0, 1, 2, 3});
    const LlamaModel alone(config, full);
    DynamicCache backend(config);
    const at::Tensor want = alone.forward(ids, pos, backend);
    for (bool vocab_parallel : {false, true}) {
      INFO(name << ", vocab_parallel " << vocab_parallel);
      std::vector<at::Tensor> got(2);
      std::vector<int64_t> kv_heads(2);
      const auto errors = on_ranks(2, [&](int64_t r, std::shared_ptr<Communicator> comm) {
        const LlamaModel model = rank_model(config, full, std::move(comm), vocab_parallel);
        kv_heads[static_cast<size_t>(r)] = model.cache_config(2, 8).num_kv_heads;
        model.check_same_step(ids, -1, Logits::kAll);
        DynamicCache mine(config);
        got[static_cast<size_t>(r)] = model.forward(ids, pos, mine);
      });
      CHECK(errors == std::vector<std::string>{"", ""});
      for (size_t r = 0; r < 2; ++r) {
        REQUIRE(got[r].defined());
        INFO("rank " << r << " max diff " << max_diff(got[r], want));
        CHECK(close(got[r], want, 1e-5));
        CHECK(kv_heads[r] == 1);
      }
    }
  }
}

TEST_CASE("ranks fed different passes are refused by the step check on every rank",
          "[tensor_parallel]") {
  const ModelConfig config = named_config("tiny");
  const Weights full = random_weights(config, 9, at::kFloat, at::kCPU);
  const auto errors = on_ranks(2, [&](int64_t r, std::shared_ptr<Communicator> comm) {
    const LlamaModel model = rank_model(config, full, std::move(comm), false);
    model.check_same_step(positions(1, {5, 9, 14}), 3, Logits::kLast);  // alike
    model.check_same_step(positions(1, {5, 9, r}), 3, Logits::kLast);   // one token apart
  });
  for (const std::string& e : errors) {
    INFO(e);
    CHECK(e.find("ranks diverged on a pass's host inputs") != std::string::npos);
  }
}
