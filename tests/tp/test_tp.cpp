// Tensor parallelism end to end (docs/tensor_parallel.md): ranks in separate
// processes on loopback (Gloo through c10d, 20 s timeouts), one thread each,
// decoding the Hugging Face cross-check checkpoints (tests/reference/hf) with greedy
// ids equal to the single process's and logits within 1e-5; a rank that
// raises or dies mid-step brings every rank down with an error, never a hang.
//
// STATICKV_HF_DIR: the checkpoints (fixture hf_checkpoints);
// STATICKV_TP_WORKER: tests/tp/tp_worker.cpp's executable.

#include "support.hpp"
#include "support/process.hpp"

#include <statickv/model/checkpoint.hpp>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>

namespace sr = statickv::reference;
namespace fs = std::filesystem;
using statickv::test::CommandRun;
using statickv::test::run_command;

namespace {

std::string env(const char* name) {
  const char* value = std::getenv(name);
  if (value == nullptr) FAIL(name << " is not set (ctest sets it: tests/tp/CMakeLists.txt)");
  return value;
}

// The worker with `args`, its launcher spawning the ranks; no launcher
// environment of ours leaks into it.
CommandRun run_worker(const std::string& args) {
  return run_command(
      "env -u RANK -u WORLD_SIZE -u LOCAL_RANK -u MASTER_ADDR -u MASTER_PORT OMP_NUM_THREADS=1 " +
      env("STATICKV_TP_WORKER") + " " + args + " 2>&1");
}

std::string checkpoint(const std::string& name) {
  return (fs::path(env("STATICKV_HF_DIR")) / name).string();
}

std::string out_file(const std::string& tag) {
  return (fs::temp_directory_path() /
          ("statickv_tp_" + std::to_string(getpid()) + "_" + tag + ".safetensors"))
      .string();
}

sr::Weights decode(const std::string& model, int64_t world, bool vocab_parallel,
                   bool offload = false) {
  const std::string out = out_file(model + std::to_string(world));
  const CommandRun run = run_worker(
      "--checkpoint " + checkpoint(model) + " --out " + out + " --tp " + std::to_string(world) +
      (vocab_parallel ? " --vocab-parallel" : "") + (offload ? " --offload" : ""));
  INFO(run.output);
  REQUIRE(run.status == 0);
  sr::Weights result = sr::read_safetensors(out);
  for (auto& [name, tensor] : result) tensor = tensor.clone();  // before the file goes
  fs::remove(out);
  return result;
}

// The same greedy ids, and logits within 3e-5: the all-reduce's order, and
// on the CPU the single process's fused projections take the route its
// process measured fastest (Note [CPU projections]), which sums in another
// order than the ranks' GEMMs (1.2e-5 seen).
void require_same_decode(const sr::Weights& sharded, const sr::Weights& single) {
  REQUIRE(sharded.size() == single.size());
  for (const auto& [name, tensor] : single) {
    INFO(name);
    if (name.rfind("ids_", 0) == 0) {
      CHECK(at::equal(sharded.at(name), tensor));
    } else {
      CHECK(sharded.at(name).sub(tensor).abs().max().item<double>() <= 3e-5);
    }
  }
}

}  // namespace

TEST_CASE("tensor-parallel greedy decoding equals the single process", "[tp]") {
  // Qwen3's q/k norms and Gemma's extra norms are replicated on every rank;
  // Gemma 2's soft-caps are elementwise (attention per head, logits before the gather);
  // Phi-3's fused qkv_proj and gate_up_proj are split into the model's
  // projections at load, then sliced by heads and columns as any family's.
  for (const char* model : {"llama", "mistral", "qwen2", "qwen3", "gemma2", "gemma3", "phi3"}) {
    const sr::Weights single = decode(model, 1, false);
    // World 2 splits the 2 kv heads; world 4 replicates each on 2 ranks.
    for (auto [world, vocab_parallel] : {std::pair{2, false}, std::pair{4, true}}) {
      INFO(model << ", world " << world << (vocab_parallel ? ", vocab-parallel" : ""));
      const sr::Weights sharded = decode(model, world, vocab_parallel);
      require_same_decode(sharded, single);
    }
  }
}

TEST_CASE("tensor-parallel decoding with each rank's cache offloaded equals the single process",
          "[tp][offload]") {
  // Note [host offload] per rank: each rank offloads its own kv heads.
  const sr::Weights single = decode("qwen2", 1, false);
  const sr::Weights sharded = decode("qwen2", 2, false, /*offload=*/true);
  require_same_decode(sharded, single);
}

TEST_CASE("a rank that raises mid-step makes every rank exit non-zero with an error", "[tp]") {
  const CommandRun run = run_worker("--checkpoint " + checkpoint("llama") + " --out " +
                                    out_file("raise") + " --tp 2 --fail-rank 1 --fail-at 5");
  INFO(run.output);
  CHECK(run.status != 0);
  CHECK(run.output.find("injected failure on rank 1 at all-reduce 5") != std::string::npos);
  CHECK(run.output.find("all_reduce failed on rank 0 of 2") != std::string::npos);
  // Both ranks failed on their own: neither was killed by the launcher.
  CHECK(run.output.find("rank 0 exited with status 2") != std::string::npos);
  CHECK(run.output.find("rank 1 exited with status 2") != std::string::npos);
  CHECK(run.seconds < 30);
}

TEST_CASE("a rank that dies mid-step makes every rank exit non-zero with an error", "[tp]") {
  const CommandRun run = run_worker("--checkpoint " + checkpoint("qwen2") + " --out " +
                                    out_file("die") + " --tp 2 --fail-rank 0 --fail-at 9 --die");
  INFO(run.output);
  CHECK(run.status != 0);
  CHECK(run.output.find("rank 0 exited with status 7") != std::string::npos);
  CHECK(run.output.find("all_reduce failed on rank 1 of 2") != std::string::npos);
  CHECK(run.output.find("rank 1 exited with status 2") != std::string::npos);
  CHECK(run.seconds < 30);
}

TEST_CASE("ranks that diverge are caught by the step check before any all-reduce", "[tp]") {
  // Rank 1's last prompt is longer: its first pass has another query
  // length, which the per-pass fingerprint compares across ranks.
  const CommandRun run = run_worker("--checkpoint " + checkpoint("mistral") + " --out " +
                                    out_file("diverge") + " --tp 2 --diverge-rank 1");
  INFO(run.output);
  CHECK(run.status != 0);
  for (const char* rank : {"rank 0 of 2", "rank 1 of 2"}) {
    CHECK(run.output.find(std::string("ranks diverged at a pass's host inputs (pass number, "
                                      "batch, query length, attend_len, token checksum): ") +
                          rank) != std::string::npos);
  }
  CHECK(run.output.find("all_reduce failed") == std::string::npos);
  CHECK(run.seconds < 30);
}
