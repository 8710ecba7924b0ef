// Engine (engine.hpp), what Generator and the Scheduler stand on: the cache
// kinds by name, the one packer of step inputs (StepPacker), the one
// runner-or-eager dispatch (run_pass), what an Engine builds from its
// options and refuses by name, its passes (run, run_and_pick,
// run_and_verify, run_draft) and its runners' warm-up. The head inside the
// runners' steps is test_sampling.cpp's; serving through an Engine is
// test_scheduler.cpp's.

#include "support.hpp"
#include "support/model.hpp"

#include <statickv/engine/engine.hpp>
#include <statickv/engine/speculative.hpp>
#include <statickv/model/checkpoint.hpp>

#include <c10/core/InferenceMode.h>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

LlamaModel engine_model(const std::string& shape = "tiny", uint64_t seed = 3) {
  return random_model(shape, seed);
}

/// Two rows of a static cache of 64 positions, prompt chunks of 4.
EngineOptions two_rows() {
  EngineOptions o;
  o.cache = CacheKind::kStatic;
  o.max_batch = 2;
  o.max_len = 64;
  o.prefill_chunk = 4;
  return o;
}

/// Row 0 holds prompt {5, 9, 14}, row 1 prompt {11, 4}: a prefill step [2, 3].
StepInputs two_prompts() {
  StepPacker pack(2, 3);
  pack.put_run(0, {5, 9, 14}, 0, 3);
  pack.put_run(1, {11, 4}, 0, 2);
  return pack.take();
}

std::vector<int64_t> argmax_ids(const at::Tensor& logits) {
  const at::Tensor ids = logits.argmax(-1).cpu().contiguous();
  return std::vector<int64_t>(ids.data_ptr<int64_t>(), ids.data_ptr<int64_t>() + ids.numel());
}

}  // namespace

TEST_CASE("cache kinds parse from their names and print as them, and a bad name is refused",
          "[engine]") {
  for (CacheKind kind : {CacheKind::kStatic, CacheKind::kHybrid, CacheKind::kDynamic}) {
    CHECK(parse_cache_kind(to_string(kind)) == kind);
  }
  CHECK(std::string(to_string(CacheKind::kHybrid)) == "hybrid");
  require_error([] { parse_cache_kind("paged"); }, {"cache", "static, hybrid or dynamic", "paged"});
}

TEST_CASE("a packed step is padding where nothing was put, and the packer is empty after take",
          "[engine]") {
  StepPacker pack(2, 4);
  CHECK(pack.rows() == 2);
  CHECK(pack.cols() == 4);
  pack.put(0, 0, 21, 6);
  pack.put_run(1, {3, 1, 4, 1, 5}, 2, 3);  // seq[2..5) at positions 2, 3, 4
  const StepInputs in = pack.take();
  CHECK(at::equal(in.ids, positions(2, {21, 0, 0, 0, 4, 1, 5, 0})));
  CHECK(at::equal(in.positions, positions(2, {6, -1, -1, -1, 2, 3, 4, -1})));
  CHECK(in.ids.device().is_cpu());
  CHECK(in.attend == 7);  // one past the highest position fed
  CHECK(in.real == 4);
  CHECK_FALSE(in.takes.defined());
  CHECK_FALSE(in.draft_q.defined());
  CHECK(pack.rows() == 0);
  CHECK(pack.cols() == 0);
  const StepInputs empty = StepPacker(1, 2).take();
  CHECK(empty.attend == 1);  // at least 1
  CHECK(empty.real == 0);
  CHECK(at::equal(empty.positions, positions(1, {-1, -1})));
}

TEST_CASE("the packer refuses a cell outside its grid or a padding position, writing nothing",
          "[engine][errors]") {
  StepPacker pack(2, 3);
  pack.put(1, 2, 8, 5);
  require_error([&] { pack.put(2, 0, 1, 0); }, {"r:", "[0, 2)", "got 2"});
  require_error([&] { pack.put(0, 3, 1, 0); }, {"t:", "[0, 3)", "got 3"});
  require_error([&] { pack.put(0, 0, 1, -1); }, {"position:", ">= 0", "got -1"});
  require_error([&] { pack.put_run(0, {1, 2, 3, 4}, 0, 4); }, {"n:", "3", "got 4"});
  require_error([&] { pack.put_run(0, {1, 2}, 1, 2); }, {"from:", "2 tokens", "from=1 n=2"});
  pack.put_run(0, {1, 2}, 5, 0);  // nothing to put: a row whose prompt is done
  const StepInputs in = pack.take();
  CHECK(in.real == 1);
  CHECK(at::equal(in.positions, positions(2, {-1, -1, -1, -1, -1, 5})));
}

TEST_CASE("run_pass gives the eager forward's logits through a runner or without one", "[engine]") {
  c10::InferenceMode inference;
  const LlamaModel model = engine_model();
  Engine engine(model, two_rows());
  const StepInputs in = two_prompts();
  GraphRunner* runner = engine.runner(Pass::kPrefill);
  REQUIRE(runner != nullptr);
  const at::Tensor eager = run_pass(model, nullptr, engine.backend(), in, Logits::kLast);
  CHECK(runner->stats().eager_runs == 0);
  const at::Tensor padded = run_pass(model, runner, engine.backend(), in, Logits::kLast);
  CHECK(runner->stats().eager_runs == 1);  // the CPU runs the padded step eagerly
  REQUIRE(eager.sizes() == at::IntArrayRef({2, model.config().vocab_size}));
  CHECK(close(padded, eager, 1e-5));
  // The same pass through Engine::run, and through a second engine's eager forward.
  CHECK(close(engine.run(Pass::kPrefill, in, Logits::kLast), eager, 1e-5));
  EngineOptions plain = two_rows();
  plain.bucketed = false;
  Engine unbucketed(model, plain);
  CHECK(unbucketed.runner(Pass::kPrefill) == nullptr);
  CHECK(close(unbucketed.run(Pass::kPrefill, in, Logits::kLast), eager, 1e-5));
  CHECK(unbucketed.cache().seq_lengths()[0].item<int64_t>() == 3);
  CHECK(unbucketed.cache().seq_lengths()[1].item<int64_t>() == 2);
}

TEST_CASE("an Engine builds what its options name and resolves their defaults", "[engine]") {
  const LlamaModel model = engine_model();
  EngineOptions o = two_rows();
  o.path = DecodePath::kAuto;
  Engine engine(model, o);
  CHECK(&engine.model() == &model);
  CHECK(engine.options().path != DecodePath::kAuto);
  CHECK(engine.options().prompt_buckets->sizes() == std::vector<int64_t>{1, 2, 4});
  CHECK(engine.options().attend_buckets->max() == 64);
  CHECK(engine.prefill_chunk() == 4);
  CHECK(engine.cache().config().max_batch == 2);
  CHECK(engine.cache().config().max_len == 64);
  CHECK(engine.draft_cache() == nullptr);
  CHECK(engine.draft_backend() == nullptr);
  CHECK(engine.runner(Pass::kDecode) == engine.runner(Pass::kPrefill));
  CHECK(engine.runner(Pass::kVerify) == nullptr);  // speculate 0
  CHECK_FALSE(engine.head_in_step());              // no head
  CHECK(engine.runner_inputs(Pass::kPrefill) == RunnerInputs::kTokens);
  CHECK_FALSE(engine.uses_graphs());  // the CPU runs its buckets eagerly
  o.prefill_chunk = 1000;             // within the cache's max_chunk
  CHECK(Engine(model, o).prefill_chunk() == 64);

  const LlamaModel draft = engine_model("tiny", 9);
  SamplingHead head({2, model.config().vocab_size, at::kCPU});
  o = two_rows();
  o.decode_runner = true;
  o.speculate = 2;
  o.draft_model = &draft;
  o.head_in_step = true;
  Engine full(model, o, &head);
  CHECK(full.runner(Pass::kDecode) != nullptr);
  CHECK(full.runner(Pass::kDecode) != full.runner(Pass::kPrefill));
  CHECK(full.runner(Pass::kVerify) != nullptr);
  CHECK(full.draft_cache() != nullptr);
  CHECK(full.draft_backend() != nullptr);
  CHECK(full.head_in_step());
  CHECK(full.runner_inputs(Pass::kDecode) == RunnerInputs::kTakes);
  CHECK(full.runner_inputs(Pass::kVerify) == RunnerInputs::kTakesAndDrafts);
}

TEST_CASE("an Engine refuses, naming the option, what it cannot build", "[engine][errors]") {
  const LlamaModel model = engine_model();
  EngineOptions o = two_rows();
  o.cache = CacheKind::kDynamic;
  require_error([&] { Engine e(model, o); }, {"cache", "got dynamic"});
  const LlamaModel sliding = engine_model("tiny-mistral");
  o = two_rows();
  require_error([&] { Engine e(sliding, o); }, {"cache", "sliding-window", "got static"});
  o.cache = CacheKind::kHybrid;
  o.speculate = 8;  // window 8: max_chunk 8
  require_error([&] { Engine e(sliding, o); }, {"speculate", "speculate + 1 = 9", "max_chunk=8"});
  o = two_rows();
  o.attend_buckets = ShapeBuckets::of({32});
  require_error([&] { Engine e(model, o); }, {"attend_buckets", "64 (max_len)", "got 32"});
  o = two_rows();
  o.prompt_buckets = ShapeBuckets::of({1, 2});
  require_error([&] { Engine e(model, o); }, {"prompt_buckets", ">= 4", "got 2"});
  o = two_rows();
  o.head_in_step = true;
  o.bucketed = false;
  SamplingHead head({2, model.config().vocab_size, at::kCPU});
  require_error([&] { Engine e(model, o, &head); }, {"head_in_step", "bucketed=false"});
}

TEST_CASE("run_and_pick returns each row's newest logits and the head picks the rows it takes",
          "[engine][sampling]") {
  c10::InferenceMode inference;
  const LlamaModel model = engine_model();
  for (const bool inside : {false, true}) {
    INFO("head_in_step " << inside);
    SamplingHead head({2, model.config().vocab_size, at::kCPU});
    head.set_row(0, Sampling{}, {5, 9, 14}, {});
    head.set_row(1, Sampling{}, {11, 4}, {});
    EngineOptions o = two_rows();
    o.head_in_step = inside;
    Engine engine(model, o, &head);
    CHECK(engine.head_in_step() == inside);
    const StepInputs in = two_prompts();
    const at::Tensor logits = engine.run_and_pick(Pass::kPrefill, in, {true, true});
    REQUIRE(logits.sizes() == at::IntArrayRef({2, model.config().vocab_size}));
    const std::vector<int64_t> greedy = argmax_ids(logits);
    const std::vector<Picked> picked = head.fetch(2);
    CHECK(picked[0].token == greedy[0]);
    CHECK(picked[1].token == greedy[1]);
    require_error([&] { engine.run_and_pick(Pass::kDecode, in, {true}); },
                  {"takes", "expected 2", "got 1"});
    require_error(
        [&] {
          engine.run_and_pick(Pass::kVerify, in, {true, true});
        },
        {"pass", "kVerify"});
  }
  Engine headless(model, two_rows());
  require_error(
      [&] {
        headless.run_and_pick(Pass::kPrefill, two_prompts(), {true, true});
      },
      {"run_and_pick", "SamplingHead"});
}

namespace {

/// Prefills {5, 9, 14} into row 0 of `engine`, then verifies `drafts`
/// after its first token: returns every token's logits [1, 3, vocab] and
/// the head's verdict.
std::pair<at::Tensor, Picked> verify_after_prompt(Engine& engine, SamplingHead& head,
                                                  const std::vector<int64_t>& drafts) {
  StepPacker prompt(1, 3);
  prompt.put_run(0, {5, 9, 14}, 0, 3);
  engine.run_and_pick(Pass::kPrefill, prompt.take(), {true});
  const int64_t first = head.fetch(1)[0].token;
  StepPacker step(1, 3);
  step.put_run(0, {first, drafts[0], drafts[1]}, 0, 3);
  StepInputs in = step.take();
  in.positions.add_(3);
  in.attend += 3;
  const at::Tensor logits = engine.run_and_verify(in, DraftSet{{drafts}, at::Tensor()}, {true});
  return {logits, head.fetch(1)[0]};
}

}  // namespace

TEST_CASE("run_and_verify returns every token's logits and the greedy rule's verdict",
          "[engine][sampling][speculative]") {
  c10::InferenceMode inference;
  const LlamaModel model = engine_model();
  for (const bool inside : {false, true}) {
    INFO("head_in_step " << inside);
    SamplingHead head({1, model.config().vocab_size, at::kCPU});
    head.set_row(0, Sampling{}, {5, 9, 14}, {});
    EngineOptions o = two_rows();
    o.max_batch = 1;
    o.speculate = 2;
    o.head_in_step = inside;
    Engine engine(model, o, &head);
    // First drafts arbitrary; then the target's own first choice as draft 1.
    const auto [logits, verdict] = verify_after_prompt(engine, head, {1, 2});
    REQUIRE(logits.sizes() == at::IntArrayRef({1, 3, model.config().vocab_size}));
    const std::vector<int64_t> target = argmax_ids(logits[0]);
    const Verdict expected = verify_greedy({1, 2}, target);
    CHECK(verdict.accepted == expected.accepted);
    CHECK(verdict.token == expected.tokens.back());
    const auto [again, agreed] = verify_after_prompt(engine, head, {target[0], 2});
    const Verdict rule = verify_greedy({target[0], 2}, argmax_ids(again[0]));
    CHECK(agreed.accepted >= 1);
    CHECK(agreed.accepted == rule.accepted);
    CHECK(agreed.token == rule.tokens.back());
  }
  EngineOptions o = two_rows();
  o.speculate = 2;
  Engine headless(model, o);
  require_error(
      [&] {
        headless.run_and_verify(two_prompts(), DraftSet{{{1, 2}, {}}, at::Tensor()}, {true, false});
      },
      {"run_and_verify", "SamplingHead"});
}

TEST_CASE("run_draft is one eager pass of the draft model on its own cache", "[engine]") {
  c10::InferenceMode inference;
  const LlamaModel model = engine_model();
  const LlamaModel draft = engine_model("tiny", 9);
  EngineOptions o = two_rows();
  o.speculate = 2;
  o.draft_model = &draft;
  Engine engine(model, o);
  const StepInputs in = two_prompts();
  const at::Tensor logits = engine.run_draft(in);
  // The draft model alone over a cache of its own gives the same logits.
  HybridCache own(draft.cache_config(2, 64));
  CacheBackend backend(own);
  const at::Tensor expected =
      draft.forward(in.ids, in.positions, backend, in.attend, Logits::kLast);
  CHECK(close(logits, expected, 1e-5));
  CHECK(engine.draft_cache()->seq_lengths()[0].item<int64_t>() == 3);
  CHECK(engine.cache().seq_lengths()[0].item<int64_t>() == 0);  // the target's is untouched
  Engine target_only(model, two_rows());
  require_error([&] { target_only.run_draft(in); }, {"run_draft", "draft model"});
}

TEST_CASE("warm_up readies every key of every runner before a call needs one", "[engine]") {
  const LlamaModel model = engine_model();
  EngineOptions o = two_rows();
  o.decode_runner = true;
  Engine engine(model, o);
  CHECK(engine.runner(Pass::kPrefill)->stats().keys.empty());
  engine.warm_up();
  // Batch buckets {1, 2} x prompt buckets {1, 2, 4} x attend {64}; decode: q = 1 only.
  CHECK(engine.runner(Pass::kPrefill)->stats().keys.size() == 6);
  CHECK(engine.runner(Pass::kDecode)->stats().keys.size() == 2);
  CHECK(engine.runner(Pass::kPrefill)->stats().captures == 0);  // nothing to capture on the CPU
  for (const KeyStats& k : engine.runner(Pass::kPrefill)->stats().keys) CHECK(k.runs == 0);
}
