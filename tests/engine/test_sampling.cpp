// The sampling head inside the decode loops (docs/sampling.md): one host
// copy per Scheduler step, log-probabilities and prompt log-probabilities
// through a Scheduler, speculation's refusals of what only the head does,
// verification inside the verification step, and picks inside the
// runners' steps equal to picks after them; the settings a request may
// ask for (check_sampling) and a draft model's distributions as
// verification takes them (draft_distributions). The head alone is
// tests/sampling/test_head.cpp.

#include "support/generation.hpp"
#include "support/model.hpp"
#include "support/sampling.hpp"

#include <statickv/engine/engine.hpp>
#include <statickv/engine/generator.hpp>
#include <statickv/engine/scheduler.hpp>
#include <statickv/model/checkpoint.hpp>

#include <c10/core/InferenceMode.h>

#include <functional>
#include <limits>
#include <map>
#include <set>

using namespace statickv;
using namespace statickv::reference;
using statickv::test::random_model;
using statickv::test::require_error;
using statickv::test::static_rows;
using statickv::test::submit_counted_batch;

namespace {

LlamaModel tiny(uint64_t seed = 3) { return random_model("tiny", seed); }

}  // namespace

TEST_CASE("a Scheduler step copies to the host once, greedy or sampled, at batch 1 and 16",
          "[sampling][serving]") {
  const LlamaModel model = tiny();
  for (const int64_t batch : {1, 16}) {
    for (const bool sampled : {false, true}) {
      INFO("batch " << batch << (sampled ? ", sampled" : ", greedy"));
      SchedulerOptions o = static_rows(batch);
      o.prefix_cache_bytes = 0;
      Scheduler engine(model, o);
      submit_counted_batch(engine, batch, sampled);
      engine.step();  // every prompt in one mixed step
      OpCounter counter;
      engine.step();  // decode
      CHECK(counter.syncs() == 0);
      for (const auto& [name, n] : counter.counts().copies) UNSCOPED_INFO(name << " x" << n);
      CHECK(counter.host_copies() == 1);
    }
  }
}

TEST_CASE("a Scheduler returns log-probabilities and prompt log-probabilities",
          "[sampling][serving]") {
  const LlamaModel model = tiny();
  SchedulerOptions o = static_rows(2);
  o.prefill_chunk = 4;  // the prompt spans three chunks
  Scheduler engine(model, o);
  Request r;
  r.id = "scored";
  r.prompt = {5, 9, 2, 11, 3, 8, 1, 4, 6, 10};
  r.max_new_tokens = 3;
  r.sampling.logprobs = 3;
  r.prompt_logprobs = 2;
  engine.submit(r);
  engine.run_until_idle();
  const std::vector<Completion> done = engine.take_finished();
  REQUIRE(done.size() == 1);
  const Completion& c = done[0];
  REQUIRE(c.logprobs.size() == c.tokens.size());
  REQUIRE(c.prompt_logprobs.size() == r.prompt.size() - 1);
  // The reference: the model's forward over prompt and generated tokens.
  std::vector<int64_t> all = r.prompt;
  all.insert(all.end(), c.tokens.begin(), c.tokens.end());
  const auto n = static_cast<int64_t>(all.size());
  DynamicCache cache(model.config(), AttentionKernel::kSdpa);
  c10::InferenceMode inference;
  const at::Tensor logits =
      model.forward(at::tensor(all).view({1, n}), at::arange(n, at::kLong).view({1, n}), cache)[0]
          .log_softmax(-1);
  for (int64_t t = 1; t < n; ++t) {
    const bool in_prompt = t < static_cast<int64_t>(r.prompt.size());
    const TokenLogprob& p = in_prompt ? c.prompt_logprobs[static_cast<size_t>(t - 1)]
                                      : c.logprobs[static_cast<size_t>(t) - r.prompt.size()];
    INFO("position " << t);
    CHECK(p.token == all[static_cast<size_t>(t)]);
    CHECK(p.logprob ==
          Approx(logits[t - 1][all[static_cast<size_t>(t)]].item<float>()).margin(1e-4));
    CHECK(p.top.size() == (in_prompt ? 2u : 3u));
    CHECK(p.top[0].first == logits[t - 1].argmax().item<int64_t>());
  }
}

TEST_CASE("what only the head does is refused under speculation, naming both",
          "[sampling][serving]") {
  const LlamaModel model = tiny();
  SchedulerOptions o = static_rows(2);
  o.speculate = 2;
  Scheduler engine(model, o);
  Request r;
  r.id = "a";
  r.prompt = {1, 2};
  r.sampling.presence_penalty = 0.5;
  require_error([&] { engine.submit(r); }, {"presence_penalty", "speculate=2"});
  r.sampling = Sampling{};
  r.prompt_logprobs = 1;
  require_error([&] { engine.submit(r); }, {"prompt_logprobs", "speculate=2"});
  r.prompt_logprobs = -1;
  engine.submit(r);  // greedy speculation is served
  r.id = "b";
  r.sampling.temperature = 0.8;
  r.sampling.min_p = 0.1;  // the head's distribution filters before the acceptance rule
  engine.submit(r);
  engine.run_until_idle();
  CHECK(engine.take_finished().size() == 2);
}

namespace {

std::map<std::string, std::vector<int64_t>> serve_all(const LlamaModel& model,
                                                      const SchedulerOptions& o,
                                                      const std::vector<Request>& requests) {
  Scheduler engine(model, o);
  for (const Request& r : requests) engine.submit(r);
  engine.run_until_idle();
  std::map<std::string, std::vector<int64_t>> out;
  for (const Completion& c : engine.take_finished()) out[c.id] = c.tokens;
  return out;
}

}  // namespace

TEST_CASE("sampled speculation draws on the device: a request served in a batch draws as alone",
          "[sampling][serving][speculative]") {
  const LlamaModel model = tiny();
  const LlamaModel draft = tiny(9);
  for (const bool with_draft : {false, true}) {
    INFO((with_draft ? "a draft model" : "prompt lookup"));
    SchedulerOptions o = static_rows(4);
    o.speculate = 3;
    o.prefix_cache_bytes = 0;
    if (with_draft) o.draft_model = &draft;
    const std::vector<Request> requests = test::sampled_speculation_requests();
    const auto together = serve_all(model, o, requests);
    std::set<std::vector<int64_t>> distinct;
    for (const Request& r : requests) {
      const auto alone = serve_all(model, o, {r});
      CHECK(together.at(r.id) == alone.at(r.id));
      CHECK(together.at(r.id).size() == 12u);
      distinct.insert(together.at(r.id));
    }
    CHECK(distinct.size() == requests.size());
    // Another seed draws other tokens.
    std::vector<Request> reseeded = requests;
    reseeded[0].sampling.seed = 7;
    CHECK(serve_all(model, o, {reseeded[0]}).at("s0") != together.at("s0"));
  }
}

TEST_CASE("verification inside the verification step accepts and draws what it does after it",
          "[sampling][serving][speculative]") {
  const LlamaModel model = tiny();
  const LlamaModel draft = tiny(9);
  for (const LlamaModel* drafting : {static_cast<const LlamaModel*>(nullptr), &draft}) {
    INFO((drafting ? "a draft model" : "prompt lookup"));
    SchedulerStats stats[2];
    const auto after = test::serve_speculation(model, drafting, false, &stats[0]);
    const auto inside = test::serve_speculation(model, drafting, true, &stats[1]);
    for (const SchedulerStats& st : stats) {
      CHECK(st.speculation.verify_steps > 0);
      CHECK(st.speculation.accepted > 0);
    }
    REQUIRE(after.size() == 4u);
    CHECK(inside == after);
  }
}

TEST_CASE("verification refuses bad drafts by name before the pass runs, inside the step or after",
          "[sampling][speculative][errors]") {
  const LlamaModel model = tiny();
  for (const bool inside : {true, false}) {
    INFO("head_in_step " << inside);
    SamplingHead head({2, model.config().vocab_size, at::kCPU});
    EngineOptions e;
    e.cache = CacheKind::kStatic;
    e.max_batch = 2;
    e.max_len = 64;
    e.speculate = 2;
    e.head_in_step = inside;
    Engine engine(model, e, &head);
    StepPacker pack(2, 3);
    pack.put(0, 0, 5, 0);
    pack.put(0, 1, 6, 1);
    const StepInputs in = pack.take();
    const int64_t vocab = model.config().vocab_size;
    const DraftSet bad{{{vocab}, {}}, at::Tensor()};
    require_error(
        [&] {
          engine.run_and_verify(in, bad, {true, false});
        },
        {"drafts[0]", std::to_string(vocab)});
    const DraftSet long_row{{{1, 2, 3}, {}}, at::Tensor()};
    require_error(
        [&] {
          engine.run_and_verify(in, long_row, {true, false});
        },
        {"drafts[0]", "k=2"});
    // Nothing ran: the verification runner served no call, the cache holds nothing.
    CHECK(engine.runner(Pass::kVerify)->stats().eager_runs == 0);
    CHECK(engine.runner(Pass::kVerify)->stats().replays == 0);
    CHECK(engine.cache().seq_lengths().sum().item<int64_t>() == 0);
  }
}

TEST_CASE("Generator's speculation verifies inside the verification step as after it",
          "[sampling][speculative]") {
  const LlamaModel model = tiny();
  std::vector<std::vector<int64_t>> tokens[2];
  for (const bool inside : {false, true}) {
    GenerateOptions o;
    o.cache = CacheKind::kStatic;
    o.temperature = 0.8, o.top_k = 8, o.seed = 3;
    o.max_new_tokens = 12;
    o.speculate = 2;
    o.head_in_step = inside;
    Generator generator(model, o, 2, 64);
    tokens[inside] = generator.generate({{5, 6, 7, 5, 6, 7, 5}, {9, 9, 9, 9}}).tokens;
  }
  CHECK(tokens[0] == tokens[1]);
  CHECK(tokens[0][0].size() == 12u);
}

TEST_CASE("a speculative step copies to the host once: drafts verified on the device",
          "[sampling][serving][speculative]") {
  const LlamaModel model = tiny();
  for (const auto& [sampled, inside] : {std::pair{false, false}, std::pair{true, false},
                                        std::pair{false, true}, std::pair{true, true}}) {
    INFO((sampled ? "sampled" : "greedy") << (inside ? ", head inside the step" : ""));
    SchedulerOptions o = static_rows(4);
    o.speculate = 3;
    o.prefix_cache_bytes = 0;
    o.head_in_step = inside;
    Scheduler engine(model, o);
    for (Request r : test::sampled_speculation_requests()) {
      if (!sampled) r.sampling = Sampling{};
      engine.submit(r);
    }
    engine.step();  // every prompt in one step
    OpCounter counter;
    engine.step();  // drafts (prompt lookup, on the host), one verification call
    CHECK(counter.syncs() == 0);
    for (const auto& [name, n] : counter.counts().copies) UNSCOPED_INFO(name << " x" << n);
    CHECK(counter.host_copies() == 1);
    CHECK(engine.stats().speculation.verify_steps == 1);
  }
}

TEST_CASE("the head picks inside the runners' steps what it picks after the passes",
          "[sampling][serving]") {
  const LlamaModel model = tiny();
  const std::vector<Completion> inside = test::serve_mixed_sampling(model, true);
  REQUIRE(inside.size() == 5);
  test::require_same_completions(inside, test::serve_mixed_sampling(model, false));
}

TEST_CASE("a step whose head picks inside it still copies to the host once, never syncing",
          "[sampling][serving]") {
  const LlamaModel model = tiny();
  SchedulerOptions o = static_rows(4);
  o.head_in_step = true;
  Scheduler engine(model, o);
  submit_counted_batch(engine, 4, /*sampled=*/true);
  engine.step();
  OpCounter counter;
  engine.step();
  CHECK(counter.syncs() == 0);
  CHECK(counter.host_copies() == 1);
}

TEST_CASE("Generator's decode steps pick inside the runner as after it", "[sampling]") {
  const LlamaModel model = tiny();
  std::vector<std::vector<int64_t>> tokens;
  for (const bool inside : {false, true}) {
    GenerateOptions o;
    o.cache = CacheKind::kStatic;
    o.temperature = 0.8, o.top_p = 0.9, o.seed = 5;
    o.max_new_tokens = 10;
    o.head_in_step = inside;
    Generator generator(model, o, 3, 64);
    const GenerateResult out = generator.generate({{1, 2, 3}, {4, 5}, {6, 7, 8, 9}});
    for (const auto& row : out.tokens) tokens.push_back(row);
  }
  for (size_t r = 0; r < 3; ++r) CHECK(tokens[r] == tokens[r + 3]);
}

TEST_CASE("head_in_step needs bucketed runners and a head, naming both", "[sampling][serving]") {
  const LlamaModel model = tiny();
  SchedulerOptions o = static_rows(2);
  o.head_in_step = true;
  o.bucketed = false;
  require_error([&] { Scheduler engine(model, o); }, {"head_in_step", "bucketed=false"});
  EngineOptions e;
  e.cache = CacheKind::kStatic;
  e.max_batch = 2;
  e.max_len = 64;
  e.head_in_step = true;
  require_error([&] { Engine engine(model, e); }, {"head_in_step", "SamplingHead"});
}

namespace {

/// One setting check_sampling refuses, and the field it must name.
struct Refused {
  const char* field;
  std::function<void(Sampling&)> set;
  const char* says;
};

}  // namespace

TEST_CASE("check_sampling takes every stage's settings and their bounds", "[sampling]") {
  for (const Sampling& s : test::every_sampling_setting()) CHECK_NOTHROW(check_sampling(s, 256));
  Sampling edge;
  edge.temperature = 0.5;
  edge.top_p = 1.0, edge.min_p = 1.0, edge.repetition_penalty = 0.01;
  edge.logprobs = kMaxLogprobs;
  edge.logit_bias = {{0, -100.0}, {255, 100.0}};
  CHECK_NOTHROW(check_sampling(edge, 256, /*max_bias=*/2));
  edge.logprobs = 3;
  CHECK_NOTHROW(check_sampling(edge, 256, 2, /*max_logprobs=*/3));
}

TEST_CASE("check_sampling refuses what the head cannot take, naming the field",
          "[sampling][errors]") {
  const double nan = std::numeric_limits<double>::quiet_NaN();
  const double inf = std::numeric_limits<double>::infinity();
  const std::vector<Refused> cases = {
      {"temperature", [](Sampling& s) { s.temperature = -0.5; }, ">= 0"},
      {"temperature", [=](Sampling& s) { s.temperature = nan; }, "finite"},
      {"top_k", [](Sampling& s) { s.temperature = 1, s.top_k = -1; }, ">= 0"},
      {"top_k", [](Sampling& s) { s.top_k = 5; }, "without sampling"},
      {"top_p", [](Sampling& s) { s.temperature = 1, s.top_p = 0.0; }, "(0, 1]"},
      {"top_p", [](Sampling& s) { s.temperature = 1, s.top_p = 1.5; }, "(0, 1]"},
      {"top_p", [](Sampling& s) { s.top_p = 0.9; }, "without sampling"},
      {"min_p", [](Sampling& s) { s.temperature = 1, s.min_p = -0.1; }, "[0, 1]"},
      {"min_p", [](Sampling& s) { s.min_p = 0.1; }, "without sampling"},
      {"repetition_penalty", [](Sampling& s) { s.repetition_penalty = 0.0; }, "> 0"},
      {"repetition_penalty", [=](Sampling& s) { s.repetition_penalty = inf; }, "finite"},
      {"presence_penalty", [=](Sampling& s) { s.presence_penalty = inf; }, "finite"},
      {"frequency_penalty", [=](Sampling& s) { s.frequency_penalty = nan; }, "finite"},
      {"logit_bias",
       [](Sampling& s) {
         s.logit_bias = {{1, 1.0}, {2, 1.0}, {3, 1.0}};
       },
       "at most 2"},
      {"logit_bias",
       [](Sampling& s) {
         s.logit_bias = {{64, 1.0}};
       },
       "vocab_size=64"},
      {"logit_bias",
       [](Sampling& s) {
         s.logit_bias = {{-1, 1.0}};
       },
       "[0, vocab_size=64)"},
      {"logit_bias",
       [](Sampling& s) {
         s.logit_bias = {{4, 1.0}, {4, 2.0}};
       },
       "twice"},
      {"logit_bias",
       [=](Sampling& s) {
         s.logit_bias = {{4, inf}};
       },
       "finite"},
      {"min_tokens", [](Sampling& s) { s.min_tokens = -1; }, ">= 0"},
      {"logprobs", [](Sampling& s) { s.logprobs = 4; }, "0..3"},
      {"logprobs", [](Sampling& s) { s.logprobs = -2; }, "-1 (none)"},
  };
  for (const Refused& c : cases) {
    Sampling s;
    c.set(s);
    INFO(c.field << ": " << c.says);
    test::require_field_error([&] { check_sampling(s, 64, /*max_bias=*/2, /*max_logprobs=*/3); },
                              c.field, {c.field, c.says});
  }
  Sampling wide;
  wide.logprobs = kMaxLogprobs + 1;  // the default bound is kMaxLogprobs
  test::require_field_error([&] { check_sampling(wide, 64); }, "logprobs", {"0..20"});
}

TEST_CASE("draft_distributions stacks each pass's q as draft t, zeros past the last pass",
          "[sampling][speculative]") {
  CHECK_FALSE(draft_distributions({}, 3).defined());  // no pass: every draft a point mass
  const at::Tensor q0 = at::softmax(at::randn({2, 5}), -1);
  const at::Tensor q1 = at::softmax(at::randn({2, 5}), -1);
  const at::Tensor q = draft_distributions({q0, q1}, 3);
  REQUIRE(q.sizes() == at::IntArrayRef({2, 3, 5}));
  CHECK(q.scalar_type() == q0.scalar_type());
  CHECK(at::equal(q.select(1, 0), q0));
  CHECK(at::equal(q.select(1, 1), q1));
  CHECK(at::equal(q.select(1, 2), at::zeros({2, 5})));
  CHECK(at::equal(draft_distributions({q0, q1}, 2), at::stack({q0, q1}, 1)));
  statickv::test::require_error(
      [&] {
        draft_distributions({q0, q1}, 1);
      },
      {"qs", "at most k=1", "got 2"});
}
