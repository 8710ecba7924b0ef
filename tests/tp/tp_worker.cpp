// The tensor-parallel test worker (tests/tp/test_tp.cpp drives it): greedy
// decoding of three ragged prompts of a checkpoint, on one process (--tp 1)
// or as one rank of --tp N (spawning the N ranks itself, as statickv-demo
// --tp does, or joining a launcher's group from RANK, WORLD_SIZE, ...).
// Rank 0 writes ids_<i> and logits_<i> of every prompt to --out.
//
// --fail-rank R --fail-at K: rank R raises (or with --die, exits at once
// without unwinding) at its K-th all-reduce, in the middle of a step.
// --diverge-rank R: rank R decodes a longer last prompt than the others.

#include <statickv/engine/generator.hpp>
#include <statickv/flags/flags.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/tp/transport.hpp>

#include <cstdlib>
#include <memory>
#include <string>
#include <vector>

namespace sr = statickv::reference;

namespace {

struct Options {
  std::string checkpoint, out;
  int64_t tp = 1, fail_rank = -1, fail_at = 0, max_new_tokens = 8, diverge_rank = -1;
  bool vocab_parallel = false, die = false, offload = false;
};

// A Communicator that fails on purpose: the failure test's way of making a
// rank raise or die mid-step.
class FailingCommunicator final : public sr::Communicator {
 public:
  FailingCommunicator(std::shared_ptr<sr::Communicator> inner, int64_t fail_at, bool die)
      : inner_(std::move(inner)), fail_at_(fail_at), die_(die) {}
  int64_t rank() const override { return inner_->rank(); }
  int64_t world() const override { return inner_->world(); }
  void all_reduce_sum(at::Tensor& t) override {
    if (++reduces_ == fail_at_) {
      if (die_) std::_Exit(7);
      TORCH_CHECK(false, "injected failure on rank ", rank(), " at all-reduce ", reduces_);
    }
    inner_->all_reduce_sum(t);
  }
  at::Tensor all_gather_last(const at::Tensor& local) override {
    return inner_->all_gather_last(local);
  }
  void barrier() override { inner_->barrier(); }
  void broadcast_bytes(std::string& bytes) override { inner_->broadcast_bytes(bytes); }
  void check_same(const char* what, int64_t value) override { inner_->check_same(what, value); }

 private:
  std::shared_ptr<sr::Communicator> inner_;
  int64_t fail_at_, reduces_ = 0;
  bool die_;
};

Options parse(int argc, char** argv) {
  Options o;
  statickv::flags::Flags flags("statickv_tp_worker", "greedy decoding, tensor-parallel");
  flags.add("--checkpoint", &o.checkpoint, "a Hugging Face checkpoint directory");
  flags.add("--out", &o.out, "safetensors file rank 0 writes");
  flags.add("--tp", &o.tp, "ranks to spawn when no launcher environment is set", 1, 64);
  flags.add("--max-new-tokens", &o.max_new_tokens, "tokens per prompt", 1, 1000);
  flags.add("--fail-rank", &o.fail_rank, "rank that fails on purpose (-1: none)", -1, 63);
  flags.add("--fail-at", &o.fail_at, "the all-reduce it fails at", 0, 1000000);
  flags.add_switch("--die", &o.die, "fail by exiting at once instead of raising");
  flags.add("--diverge-rank", &o.diverge_rank,
            "rank whose last prompt is longer (breaks the rank contract; -1: none)", -1, 63);
  flags.add_switch("--vocab-parallel", &o.vocab_parallel, "vocabulary-parallel LM head");
  flags.add_switch("--offload", &o.offload, "each rank's cache in host memory (host_offload)");
  flags.parse(argc, argv);
  return o;
}

void run(const Options& o, const std::optional<sr::Rendezvous>& where) {
  statickv::flags::set_threads(1);
  sr::TpShard shard;
  sr::LoadOptions load;
  if (where) {
    shard.comm = sr::connect(*where, at::kCPU);
    if (where->rank == o.fail_rank) {
      shard.comm = std::make_shared<FailingCommunicator>(shard.comm, o.fail_at, o.die);
    }
    load.tp = {where->rank, where->world, o.vocab_parallel};
  }
  shard.vocab_parallel = o.vocab_parallel;
  shard.check_divergence = true;
  sr::Checkpoint ckpt = sr::load_checkpoint(o.checkpoint, at::kFloat, at::kCPU, load);
  const sr::LlamaModel model(ckpt.config, std::move(ckpt.weights), shard);
  // Three ragged prompts, the same on every rank (a fixed seed).
  at::manual_seed(1234);
  std::vector<std::vector<int64_t>> prompts;
  for (int64_t len : {7, 3, 11}) {
    const at::Tensor ids = at::randint(ckpt.config.vocab_size, {len}, at::kLong);
    prompts.emplace_back(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + len);
  }
  // Past the next prompt-length bucket (16), so the first pass's shape differs.
  if (where && where->rank == o.diverge_rank) prompts[2].resize(17, 1);
  sr::GenerateOptions options;
  options.max_new_tokens = o.max_new_tokens;
  options.stop_at_eos = false;
  options.record_logits = true;
  options.host_offload = o.offload;
  const sr::GenerateResult result = sr::generate(model, prompts, options);
  if (where && where->rank != 0) return;
  sr::Weights out;
  for (size_t i = 0; i < prompts.size(); ++i) {
    out["ids_" + std::to_string(i)] = at::tensor(result.tokens[i], at::kLong);
    out["logits_" + std::to_string(i)] = result.logits[i];
  }
  sr::write_safetensors(o.out, out);
}

}  // namespace

int main(int argc, char** argv) {
  try {
    const Options o = parse(argc, argv);
    const std::optional<sr::Rendezvous> where = sr::rendezvous_from_env();
    if (!where && o.tp > 1)
      return sr::spawn_ranks(o.tp, std::vector<std::string>(argv, argv + argc));
    run(o, where);
    return 0;
  } catch (...) {
    return statickv::flags::fail("statickv_tp_worker");
  }
}
