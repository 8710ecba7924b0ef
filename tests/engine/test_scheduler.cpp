// The continuous-batching Scheduler (reference/engine/src/serving, docs/serving.md):
// whatever the arrival pattern, a completed request's tokens are what
// generating its prompt alone with Generator gives; rejected requests
// change nothing; live rows stay a prefix of the cache, rows past it stay
// fresh, buffer addresses never change, and after warm-up no step needs a
// runner key outside the warm-up set; steps are timed and keyed as the
// Scheduler reports.

#include "support/generation.hpp"
#include "support/model.hpp"

#include <statickv/engine/scheduler.hpp>
#include <statickv/engine/trace.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/op_counter.hpp>

#include <ATen/Parallel.h>
#include <c10/core/InferenceMode.h>

#include <chrono>
#include <map>
#include <random>
#include <set>
#include <tuple>

using namespace statickv;
using namespace statickv::reference;
using statickv::test::addresses;
using statickv::test::random_model;
using statickv::test::Snapshot;

namespace {

constexpr int64_t kMaxLen = 64;
constexpr int64_t kEos = 7;  // the test model's eos id

LlamaModel tiny_model(const std::string& shape, uint64_t seed = 3) {
  return random_model(shape, seed, at::kFloat, kEos);
}

/// Seeded temperature / top-k / top-p sampling settings.
Sampling sampling(double temperature, int64_t top_k, uint64_t seed, double top_p = 1.0) {
  Sampling s;
  s.temperature = temperature;
  s.top_k = top_k;
  s.seed = seed;
  s.top_p = top_p;
  return s;
}

/// Top-1 minus top-2 logit of a [vocab] row: how far a greedy pick is from
/// flipping.
double margin(const at::Tensor& logits) {
  const at::Tensor top = std::get<0>(logits.topk(2));
  return (top[0] - top[1]).item<double>();
}

/// What generating one request alone gives: Generator on a one-row session,
/// with the request's sampling; a request's own stop list is applied to a
/// run that ignores eos (greedy and seeded runs are prefix-consistent).
struct Reference {
  std::vector<int64_t> tokens;
  at::Tensor logits;  // [tokens, vocab]
  bool stopped = false;
};

/// One-row Generator sessions, one per distinct set of options (a session
/// resets its row at every call, so each call is a prompt generated alone).
class Alone {
 public:
  Alone(const LlamaModel& model, CacheKind cache) : model_(model), cache_(cache) {}

  Reference generate(const Request& r) {
    GenerateOptions options;
    options.cache = cache_;
    options.max_new_tokens = kMaxLen - 1;
    options.temperature = r.sampling.temperature;
    options.top_k = r.sampling.top_k;
    options.top_p = r.sampling.top_p;
    options.seed = r.sampling.seed;
    options.record_logits = true;
    options.stop_at_eos = !r.stop.has_value();
    const auto key = std::make_tuple(options.stop_at_eos, options.temperature, options.top_k,
                                     options.top_p, options.seed);
    auto it = sessions_.find(key);
    if (it == sessions_.end()) {
      it = sessions_
               .emplace(key, std::make_unique<Generator>(model_, options, /*max_batch=*/1, kMaxLen))
               .first;
    }
    const GenerateResult out = it->second->generate({r.prompt}, r.max_new_tokens);
    Reference ref{out.tokens[0], out.logits[0], false};
    const std::vector<int64_t> stop = r.stop.value_or(model_.config().eos_token_ids);
    for (size_t i = 0; i < ref.tokens.size(); ++i) {
      if (std::find(stop.begin(), stop.end(), ref.tokens[i]) == stop.end()) continue;
      ref.tokens.resize(i + 1);
      ref.stopped = true;
    }
    return ref;
  }

 private:
  const LlamaModel& model_;
  CacheKind cache_;
  std::map<std::tuple<bool, double, int64_t, double, uint64_t>, std::unique_ptr<Generator>>
      sessions_;
};

/// A bad request and the field its error must name.
struct Bad {
  Request request;
  std::string field;
};

Bad bad_request(int kind, const std::string& id, const std::string& live_id) {
  Bad b{Request{}, ""};
  b.request.id = id;
  b.request.prompt = {1, 2, 3};
  b.request.max_new_tokens = 4;
  switch (kind % 9) {
    case 0:
      b.request.prompt.clear(), b.field = "prompt: expected at least one token";
      break;
    case 1:
      b.request.prompt[1] = 128, b.field = "prompt[1]: expected a token id in [0, vocab_size=128)";
      break;
    case 2:
      b.request.max_new_tokens = kMaxLen - 2,
      b.field = "max_new_tokens: expected prompt length + max_new_tokens <= max_len=64";
      break;
    case 3:
      b.request.max_new_tokens = -1, b.field = "max_new_tokens: expected >= 1";
      break;
    case 4:
      b.request.sampling.temperature = -0.5, b.field = "temperature: expected a finite number >= 0";
      break;
    case 5:
      b.request.sampling.top_k = 5, b.field = "top_k: expected 0 without sampling";
      break;
    case 7:
      b.request.sampling.top_p = 0.9, b.field = "top_p: expected 1 without sampling";
      break;
    case 6:
      b.request.stop = std::vector<int64_t>{3, -2}, b.field = "stop[1]: expected a token id";
      break;
    default:
      b.request.id = live_id, b.field = "id: expected an id not already waiting or running";
      break;
  }
  return b;
}

/// One trace run: requests arrive at Poisson times counted in engine steps.
struct TraceRun {
  std::vector<Request> accepted;                         // in submission order
  std::map<std::string, int64_t> cancel_at;              // id -> step
  std::map<std::string, Completion> completions;         // by id
  std::map<std::string, std::vector<int64_t>> streamed;  // on_token, by id
  int64_t rejected = 0;

  /// Records `r` as accepted, streams its tokens into `streamed`, submits it.
  void submit(Scheduler& engine, Request r) {
    accepted.push_back(r);
    r.on_token = [this](const std::string& id, int64_t token) { streamed[id].push_back(token); };
    engine.submit(std::move(r));
  }
};

std::vector<Request> trace_requests(uint64_t seed) {
  TraceOptions t;
  t.requests = 220;
  t.rate = 0.9;  // per step: the batch fills, drains and refills
  t.min_prompt = 1;
  t.max_prompt = 24;
  t.min_new_tokens = 1;
  t.max_new_tokens = 16;
  t.vocab_size = 128;
  t.seed = seed;
  std::mt19937_64 rng(seed + 1);
  std::vector<Request> out;
  for (const TraceRequest& tr : make_trace(t)) {
    Request r;
    r.id = std::to_string(out.size());
    r.prompt = tr.prompt;
    r.max_new_tokens = tr.max_new_tokens;
    const uint64_t roll = rng() % 20;
    if (roll < 2) r.stop = std::vector<int64_t>{static_cast<int64_t>(rng() % 128), 5, 9};
    if (roll == 2) r.stop = std::vector<int64_t>{};  // no stop token, not even eos
    if (roll == 3) r.sampling = sampling(0.8, 20, rng());
    if (roll == 4) r.sampling = sampling(1.2, 0, rng(), 0.7);  // nucleus sampling
    r.arrival = ServeClock::time_point(ServeClock::duration(static_cast<int64_t>(tr.arrival)));
    out.push_back(std::move(r));
  }
  return out;
}

/// Submits the trace by arrival step (a bad request after every 9th, a
/// cancellation for every 11th), steps until idle, and checks after every
/// step that the live rows are a prefix, rows past it are fresh and the
/// cache kept its addresses.
void run_trace(Scheduler& engine, std::vector<Request> requests, TraceRun& run) {
  const std::vector<const void*> before = addresses(engine.cache());
  size_t next = 0;
  std::mt19937_64 rng(11);
  for (int64_t step = 0; next < requests.size() || !engine.idle(); ++step) {
    while (next < requests.size() && requests[next].arrival->time_since_epoch().count() <= step) {
      Request r = std::move(requests[next++]);
      r.arrival.reset();
      if (next % 11 == 0) run.cancel_at[r.id] = step + static_cast<int64_t>(rng() % 12);
      run.submit(engine, std::move(r));
      if (next % 9 != 0) continue;
      Bad bad = bad_request(static_cast<int>(next / 9), "bad" + std::to_string(next),
                            run.accepted.back().id);
      const Snapshot cached(engine.cache());
      const int64_t waiting = engine.waiting();
      // The refusal names its field as data too ("prompt[1]: ..." -> "prompt").
      test::require_field_error([&] { engine.submit(bad.request); },
                                bad.field.substr(0, bad.field.find_first_of("[:")), {bad.field});
      CHECK(cached.same_as(engine.cache()));
      CHECK(engine.waiting() == waiting);
      ++run.rejected;
    }
    for (const auto& [id, at] : run.cancel_at) {
      if (at == step) engine.cancel(id);
    }
    engine.step();
    for (Completion& c : engine.take_finished()) run.completions[c.id] = std::move(c);
    const int64_t live = engine.live_rows();
    REQUIRE(live <= engine.options().max_batch);
    const at::Tensor past =
        engine.cache().seq_lengths().narrow(0, live, engine.options().max_batch - live);
    REQUIRE(past.eq(0).all().item<bool>());
  }
  CHECK(addresses(engine.cache()) == before);
}

}  // namespace

namespace {

/// The first index where two token lists differ (the shorter's size if one
/// is a prefix of the other).
size_t first_difference(const std::vector<int64_t>& a, const std::vector<int64_t>& b) {
  size_t i = 0;
  while (i < a.size() && i < b.size() && a[i] == b[i]) ++i;
  return i;
}

/// Each accepted request's completion against generating it alone; returns
/// the smallest top-2 margin alone had at a greedy token it compared.
/// Under speculation (`exact_sampling` false) a sampled request keeps the
/// distribution, not the draws: only its limits and stream are compared.
double require_each_equals_alone(const LlamaModel& model, CacheKind cache, const TraceRun& run,
                                 bool exact_sampling = true) {
  double smallest = std::numeric_limits<double>::infinity();
  Alone alone_session(model, cache);
  for (const Request& r : run.accepted) {
    INFO("request " << r.id << ": prompt of " << r.prompt.size() << " tokens, max_new_tokens "
                    << r.max_new_tokens);
    REQUIRE(run.completions.count(r.id) == 1);
    const Completion& c = run.completions.at(r.id);
    if (!exact_sampling && r.sampling.temperature > 0) {
      CHECK(c.tokens.size() <= static_cast<size_t>(r.max_new_tokens));
      if (!c.tokens.empty()) CHECK(run.streamed.at(r.id) == c.tokens);
      continue;
    }
    const Reference alone = alone_session.generate(r);
    const size_t diff = first_difference(c.tokens, alone.tokens);
    const bool cancelled = c.finish == Finish::kCancelled;
    if (diff < c.tokens.size() && diff < alone.tokens.size()) {
      // Mixed steps change GEMM shapes: fp32 may differ in the last bits.
      // Say how close alone's pick was where the two part.
      INFO("first difference at token " << diff << ": served " << c.tokens[diff] << ", alone "
                                        << alone.tokens[diff]
                                        << "; alone's top-2 logit margin there "
                                        << margin(alone.logits[static_cast<int64_t>(diff)]));
      CHECK(c.tokens == alone.tokens);
    } else if (cancelled) {
      CHECK(c.tokens.size() <= alone.tokens.size());  // a prefix of alone's tokens
    } else {
      CHECK(c.tokens == alone.tokens);
      CHECK(c.finish == (alone.stopped ? Finish::kStop : Finish::kLength));
    }
    CHECK(run.streamed.count(r.id) == (c.tokens.empty() ? 0u : 1u));
    if (!c.tokens.empty()) CHECK(run.streamed.at(r.id) == c.tokens);
    if (r.sampling.temperature > 0) continue;
    for (size_t i = 0; i < std::min(c.tokens.size(), alone.tokens.size()); ++i) {
      smallest = std::min(smallest, margin(alone.logits[static_cast<int64_t>(i)]));
    }
  }
  return smallest;
}

/// Who drafts under speculation: prompt lookup, the target itself (every
/// draft it agrees with), or an unrelated model (a sliding-window one with
/// other weights: most drafts rejected).
enum class Drafter { kLookup, kTarget, kUnrelated };

void require_trace_equals_alone(const std::string& shape, CacheKind cache, uint64_t seed,
                                bool bucketed = true, int64_t speculate = 0,
                                Drafter drafter = Drafter::kLookup, bool host_offload = false) {
  // One intra-op thread: a model this small gains nothing from two, and
  // LibTorch's spinning workers slow a shared 2-core machine 10x or more.
  at::set_num_threads(1);
  const LlamaModel model = tiny_model(shape);
  const LlamaModel unrelated = tiny_model("tiny-mistral", 9);
  SchedulerOptions options;
  options.cache = cache;
  options.max_batch = 6;  // batch buckets 1, 2, 4, 6
  options.max_len = kMaxLen;
  options.prefill_chunk = 8;
  options.token_budget = 12;
  options.bucketed = bucketed;
  options.speculate = speculate;
  options.host_offload = host_offload;
  if (drafter != Drafter::kLookup) {
    options.draft_model = drafter == Drafter::kTarget ? &model : &unrelated;
  }
  Scheduler engine(model, options);
  engine.warm_up();
  const RunnerStats warm = engine.stats().runner;
  std::set<GraphKey> warm_keys;
  for (const KeyStats& k : warm.keys) warm_keys.insert(k.key);
  const size_t warm_verify_keys = engine.stats().verify_runner.keys.size();

  TraceRun run;
  run_trace(engine, trace_requests(seed), run);

  const SchedulerStats stats = engine.stats();
  bool full_decode = false, small_decode = false;
  for (const KeyStats& k : stats.runner.keys) {
    INFO("runner key [" << k.key.batch << ", " << k.key.query_len << ", " << k.key.attend_len
                        << "], " << k.runs << " runs");
    CHECK(warm_keys.count(k.key) == 1);
  }
  // Decode calls: q = 1, or the verification runner's q = speculate + 1.
  for (const KeyStats& k : (speculate > 0 ? stats.verify_runner : stats.runner).keys) {
    full_decode = full_decode || (k.key.query_len == speculate + 1 && k.key.batch == 6 && k.runs);
    small_decode = small_decode || (k.key.query_len == speculate + 1 && k.key.batch <= 2 && k.runs);
  }
  CHECK(stats.verify_runner.keys.size() == warm_verify_keys);
  CHECK(stats.runner.keys.size() == warm_keys.size());
  CHECK(stats.runner.captures == warm.captures);
  if (bucketed) {
    CHECK(full_decode);   // under load every row decodes
    CHECK(small_decode);  // and the decode bucket shrinks when load drops
  }
  CHECK(stats.rejected == run.rejected);
  CHECK(stats.submitted == static_cast<int64_t>(run.accepted.size()));
  CHECK(stats.completed + stats.cancelled == stats.submitted);
  CHECK(stats.cancelled >= 1);
  CHECK(stats.row_copies >= 1);
  CHECK(stats.mixed_steps >= 1);
  CHECK(stats.mixed_steps < stats.steps);
  CHECK(stats.occupancy() > 0.0);
  CHECK(stats.occupancy() <= 1.0);
  CHECK(stats.padded_fraction() < 1.0);

  if (speculate > 0) {
    const SpeculationStats& spec = stats.speculation;
    INFO("acceptance rate " << spec.acceptance_rate() << " (" << spec.accepted << " of "
                            << spec.drafted << " drafts)");
    CHECK(spec.verify_steps > 0);
    CHECK(spec.drafted > 0);
    CHECK(spec.accepted <= spec.drafted);
    if (drafter == Drafter::kLookup) CHECK(spec.accepted > 0);  // prompt lookup kept some drafts
    if (drafter == Drafter::kUnrelated) CHECK(spec.acceptance_rate() < 0.5);
    // The target drafting for itself: its draft cache mirrored every row
    // move, or its drafts would be wrong. Sampled drafts compare p with q
    // from calls of other shapes (last-bit differences): nearly all kept.
    if (drafter == Drafter::kTarget) CHECK(spec.acceptance_rate() > 0.95);
  }
  const double smallest = require_each_equals_alone(model, cache, run, speculate == 0);
  // The seeds are chosen so that no greedy pick alone is a near tie: a
  // difference in the last bits of fp32 cannot flip one.
  INFO("smallest top-2 margin of a greedy token generated alone: " << smallest);
  CHECK(smallest > 1e-4);
}

}  // namespace

TEST_CASE("serving a random arrival trace gives each request what generating it alone gives",
          "[serving]") {
  SECTION("static cache") { require_trace_equals_alone("tiny", CacheKind::kStatic, 5); }
  SECTION("hybrid cache, sliding window shorter than the prompts") {
    require_trace_equals_alone("tiny-qwen2", CacheKind::kHybrid, 7);
  }
  SECTION("Gemma 3's five sliding layers to a full one, prompts past the window") {
    require_trace_equals_alone("tiny-gemma3", CacheKind::kHybrid, 5);
  }
  SECTION("static cache, eager steps at exact shapes (no GraphRunner)") {
    require_trace_equals_alone("tiny", CacheKind::kStatic, 5, /*bucketed=*/false);
  }
  SECTION("hybrid cache with host offload (Note [host offload])") {
    require_trace_equals_alone("tiny-qwen2", CacheKind::kHybrid, 7, /*bucketed=*/true, 0,
                               Drafter::kLookup, /*host_offload=*/true);
  }
}

// ---------------------------------------------------------------------------
// The token budget bounds what decoding rows wait for; a step in which more
// rows prefill than decode keeps to the burst budget (docs/serving.md).

namespace {

Request budget_request(const std::string& id, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Request r;
  r.id = id;
  for (int i = 0; i < 12; ++i) r.prompt.push_back(8 + static_cast<int64_t>(rng() % 120));
  r.max_new_tokens = 10;
  r.stop = std::vector<int64_t>{};
  return r;
}

/// Chunks of 8, a token budget of 8, 12-token prompts arriving as
/// `arrivals` says (step -> how many). Returns the real tokens each step fed
/// and checks every request against generating it alone.
std::vector<int64_t> tokens_per_step(int64_t burst_budget, std::map<int64_t, int> arrivals) {
  at::set_num_threads(1);
  const LlamaModel model = tiny_model("tiny");
  SchedulerOptions options;
  options.max_batch = 6;
  options.max_len = kMaxLen;
  options.prefill_chunk = 8;
  options.token_budget = 8;
  options.burst_budget = burst_budget;
  options.bucketed = false;
  Scheduler engine(model, options);
  std::vector<Request> sent;
  std::vector<int64_t> fed;
  std::map<std::string, std::vector<int64_t>> got;
  for (int64_t step = 0; step <= arrivals.rbegin()->first || !engine.idle(); ++step) {
    for (int i = 0; i < (arrivals.count(step) ? arrivals.at(step) : 0); ++i) {
      sent.push_back(budget_request("r" + std::to_string(sent.size()), 11 + sent.size()));
      engine.submit(sent.back());
    }
    const int64_t before = engine.stats().real_tokens;
    engine.step();
    fed.push_back(engine.stats().real_tokens - before);
    for (Completion& c : engine.take_finished()) got[c.id] = c.tokens;
  }
  Alone alone(model, CacheKind::kStatic);
  for (const Request& r : sent) CHECK(got.at(r.id) == alone.generate(r).tokens);
  return fed;
}

}  // namespace

TEST_CASE(
    "a burst of prompts is fed whole while fewer rows decode, otherwise the token budget "
    "bounds the step",
    "[serving]") {
  // One prompt at step 0, a burst of four at step 1, a late one at step 5.
  const std::map<int64_t, int> burst = {{0, 1}, {1, 4}, {5, 1}};
  SECTION("default burst budget: max_batch x prefill_chunk") {
    const std::vector<int64_t> fed = tokens_per_step(0, burst);
    REQUIRE(fed.size() > 9);
    CHECK(fed[0] == 8);   // the first prompt's first chunk, no one decoding
    CHECK(fed[1] == 36);  // its last 4 tokens and the burst's first chunks
    CHECK(fed[2] == 17);  // one row decodes, four prefill: the burst's last 4 each
    CHECK(fed[3] == 5);   // five rows decode
    CHECK(fed[4] == 5);
    // The late prompt arrives beside five decoding rows: 8 - 5 = 3 prompt
    // tokens a step, four steps of 8.
    for (size_t s = 5; s < 9; ++s) CHECK(fed[s] == 8);
  }
  SECTION("burst_budget = token_budget: one budget in every step") {
    const std::vector<int64_t> fed = tokens_per_step(8, burst);
    REQUIRE(fed.size() > 2);
    CHECK(fed[0] == 8);  // the first prompt's first chunk only
    CHECK(fed[1] == 8);  // its last 4 tokens, then 4 of the second prompt
    for (const int64_t n : fed) CHECK(n <= 8);
  }
  SECTION("as many rows decoding as prefilling is not a burst") {
    const std::vector<int64_t> fed = tokens_per_step(0, {{0, 1}, {2, 1}});
    REQUIRE(fed.size() > 3);
    CHECK(fed[0] == 8);
    CHECK(fed[1] == 4);  // no row decodes: the first prompt's last 4 tokens
    CHECK(fed[2] == 8);  // one decodes, one prefills: 1 + 7 under the token budget
    CHECK(fed[3] == 6);  // 1 + the second prompt's last 5
  }
  SECTION("a burst budget below the token budget is refused by name") {
    SchedulerOptions options;
    options.max_len = kMaxLen;
    options.max_batch = 4;
    options.token_budget = 20;
    options.burst_budget = 10;
    const LlamaModel model = tiny_model("tiny");
    statickv::test::require_error([&] { Scheduler engine(model, options); },
                                  {"burst_budget", ">= token_budget=20", "got 10"});
  }
}

TEST_CASE("the step budgets' defaults follow the chunk, the batch and the token budget",
          "[serving]") {
  SchedulerOptions o;
  o.max_batch = 4;
  o.max_len = 100;
  resolve_step_budgets(o);
  CHECK(o.prefill_chunk == 64);
  CHECK(o.token_budget == 3 + 64);  // every decode row but one, and a chunk
  CHECK(o.burst_budget == 4 * 64);  // every row its chunk
  SchedulerOptions shorter;
  shorter.max_batch = 4;
  shorter.max_len = 40;
  shorter.token_budget = 300;
  resolve_step_budgets(shorter);
  CHECK(shorter.prefill_chunk == 40);  // at most max_len
  CHECK(shorter.token_budget == 300);
  CHECK(shorter.burst_budget == 300);  // never below the token budget
}

TEST_CASE(
    "queue and first-token times are never negative: an arrival ahead of submit() is "
    "submit()'s",
    "[serving]") {
  at::set_num_threads(1);
  const LlamaModel model = tiny_model("tiny");
  SchedulerOptions options;
  options.max_batch = 2;
  options.max_len = kMaxLen;
  options.bucketed = false;
  Scheduler engine(model, options);
  Request ahead = budget_request("ahead", 3);
  ahead.arrival = ServeClock::now() + std::chrono::hours(1);  // another clock's time
  engine.submit(ahead);
  engine.submit(budget_request("plain", 4));
  std::vector<Completion> done;
  for (int step = 0; step < 100 && !engine.idle(); ++step) {
    engine.step();
    for (Completion& c : engine.take_finished()) done.push_back(std::move(c));
  }
  REQUIRE(done.size() == 2);
  for (const Completion& c : done) {
    INFO(c.id);
    CHECK(c.stats.queue_seconds >= 0);
    CHECK(c.stats.ttft_seconds > 0);
    CHECK(c.stats.ttft_seconds <= c.stats.total_seconds);
    CHECK(c.stats.total_seconds < 60);
  }
}

TEST_CASE(
    "under speculative decoding each greedy request still gets what generating it alone "
    "gives",
    "[serving][speculative]") {
  // Prompt lookup, 3 drafts per row: one verification call of 4 tokens per
  // row per step, rejected drafts rolled back (sampled requests: their limits).
  SECTION("static cache") {
    require_trace_equals_alone("tiny", CacheKind::kStatic, 5, /*bucketed=*/true, 3);
  }
  SECTION("hybrid cache, sliding window shorter than the prompts") {
    require_trace_equals_alone("tiny-qwen2", CacheKind::kHybrid, 7, /*bucketed=*/true, 3);
  }
  SECTION("static cache, eager steps") {
    require_trace_equals_alone("tiny", CacheKind::kStatic, 5, /*bucketed=*/false, 3);
  }
  SECTION("static cache with host offload: rollbacks reach the host copy") {
    require_trace_equals_alone("tiny", CacheKind::kStatic, 5, /*bucketed=*/true, 3,
                               Drafter::kLookup, /*host_offload=*/true);
  }
  SECTION("speculate + 1 must fit max_chunk") {
    SchedulerOptions options;
    options.max_len = kMaxLen;
    options.prefill_chunk = 4;
    options.speculate = 4;
    const LlamaModel model = tiny_model("tiny");
    statickv::test::require_error([&] { Scheduler engine(model, options); },
                                  {"speculate + 1 = 5", "max_chunk=4", "prefill_chunk=4"});
  }
}

TEST_CASE(
    "with a draft model whose cache rows mirror the target's, each greedy request still gets "
    "what generating it alone gives",
    "[serving][speculative][draft]") {
  // 3 draft-model steps per decoding row, one verification call of 4 tokens;
  // admissions, moves, resets and rollbacks apply to both caches.
  SECTION("static cache, the target as its own draft") {
    require_trace_equals_alone("tiny", CacheKind::kStatic, 5, true, 3, Drafter::kTarget);
  }
  SECTION("hybrid cache, the target as its own draft") {
    require_trace_equals_alone("tiny-qwen2", CacheKind::kHybrid, 7, true, 3, Drafter::kTarget);
  }
  SECTION("static cache, an unrelated draft model") {
    require_trace_equals_alone("tiny", CacheKind::kStatic, 5, true, 3, Drafter::kUnrelated);
  }
  SECTION("hybrid cache, an unrelated draft model") {
    require_trace_equals_alone("tiny-qwen2", CacheKind::kHybrid, 7, true, 3, Drafter::kUnrelated);
  }
  SECTION("static cache, eager steps, the target as its own draft") {
    require_trace_equals_alone("tiny", CacheKind::kStatic, 5, false, 3, Drafter::kTarget);
  }
  SECTION("a draft model needs speculate >= 1 and the target's vocabulary") {
    SchedulerOptions options;
    options.max_len = kMaxLen;
    const LlamaModel model = tiny_model("tiny");
    options.draft_model = &model;
    statickv::test::require_error([&] { Scheduler engine(model, options); },
                                  {"draft_model", "speculate >= 1", "speculate=0"});
    ModelConfig other = named_config("tiny");
    other.vocab_size += 1;
    const LlamaModel wider(other, random_weights(other, 4, at::kFloat, at::kCPU));
    options.speculate = 2;
    options.draft_model = &wider;
    statickv::test::require_error([&] { Scheduler engine(model, options); },
                                  {"draft_model", "vocab_size=", "(the target's)"});
  }
}

// ---------------------------------------------------------------------------
// Note [prefix cache]: requests that share prefixes start from saved rows.

namespace {

/// Requests built from a few shared heads (inside one 4-token block, across
/// blocks, longer than tiny-qwen2's window of 8) with their own tails, some
/// repeating a whole earlier prompt; arrivals spread over the steps.
std::vector<Request> shared_prefix_requests(uint64_t seed, int64_t count) {
  std::mt19937_64 rng(seed);
  auto ids = [&](int64_t n) {
    std::vector<int64_t> out;
    for (int64_t i = 0; i < n; ++i) out.push_back(8 + static_cast<int64_t>(rng() % 120));
    return out;
  };
  const std::vector<std::vector<int64_t>> heads = {ids(3), ids(9), ids(21), ids(30)};
  std::vector<Request> out;
  for (int64_t i = 0; i < count; ++i) {
    Request r;
    r.id = "p" + std::to_string(i);
    if (i > 0 && rng() % 6 == 0) {
      r.prompt = out[rng() % out.size()].prompt;  // the whole prompt again
    } else {
      r.prompt = heads[rng() % heads.size()];
      const std::vector<int64_t> tail = ids(1 + static_cast<int64_t>(rng() % 9));
      r.prompt.insert(r.prompt.end(), tail.begin(), tail.end());
    }
    r.max_new_tokens = 1 + static_cast<int64_t>(rng() % 12);
    r.stop = std::vector<int64_t>{};  // every request runs to its limit
    if (rng() % 5 == 0) r.sampling = sampling(0.8, 20, rng());
    r.arrival = ServeClock::time_point(ServeClock::duration(i / 2));
    out.push_back(std::move(r));
  }
  return out;
}

/// Serves `requests` by arrival step (every 7th cancelled a few steps after
/// it arrives), checking after every step that the pool holds no more than
/// its budget; returns the stats at the end.
SchedulerStats serve_prefixed(Scheduler& engine, std::vector<Request> requests, TraceRun& run) {
  size_t next = 0;
  for (int64_t step = 0; next < requests.size() || !engine.idle(); ++step) {
    for (const auto& [id, at] : run.cancel_at) {
      if (at == step) engine.cancel(id);
    }
    while (next < requests.size() && requests[next].arrival->time_since_epoch().count() <= step) {
      Request r = std::move(requests[next++]);
      r.arrival.reset();
      if (next % 7 == 0) run.cancel_at[r.id] = step + static_cast<int64_t>(next % 5);
      run.submit(engine, std::move(r));
    }
    engine.step();
    for (Completion& c : engine.take_finished()) run.completions[c.id] = std::move(c);
    const SchedulerStats stats = engine.stats();
    REQUIRE(stats.prefix_bytes <= stats.prefix_budget);
  }
  return engine.stats();
}

SchedulerOptions prefix_options(CacheKind cache, int64_t budget) {
  SchedulerOptions o;
  o.cache = cache;
  o.max_batch = 4;
  o.max_len = kMaxLen;
  o.prefill_chunk = 8;
  o.prefix_cache_bytes = budget;
  o.prefix_block = 4;
  return o;
}

void require_prefixed_equals_alone(const std::string& shape, CacheKind cache, int64_t budget,
                                   bool expect_evictions, uint64_t seed) {
  at::set_num_threads(1);
  const LlamaModel model = tiny_model(shape);
  Scheduler engine(model, prefix_options(cache, budget));
  engine.warm_up();
  const int64_t captures = engine.stats().runner.captures;
  TraceRun run;
  const SchedulerStats stats = serve_prefixed(engine, shared_prefix_requests(seed, 48), run);
  INFO(shape << ": " << stats.prefix_hits << " hits, " << stats.prefix_tokens_reused
             << " tokens reused, " << stats.prefix_entries << " entries, " << stats.prefix_evictions
             << " evictions, " << stats.prefix_bytes << " of " << stats.prefix_budget << " bytes");
  CHECK(stats.prefix_hits >= 10);
  CHECK(stats.prefix_tokens_reused >= 8 * stats.prefix_hits / 2);
  CHECK((stats.prefix_evictions > 0) == expect_evictions);
  CHECK(stats.runner.captures == captures);  // the copies run between steps
  CHECK(stats.cancelled >= 1);
  const double smallest = require_each_equals_alone(model, cache, run);
  INFO("smallest top-2 margin of a greedy token generated alone: " << smallest);
  CHECK(smallest > 1e-4);
}

}  // namespace

TEST_CASE("requests sharing prefixes start from saved rows and equal generating each alone",
          "[serving][prefix]") {
  SECTION("static cache, a budget that holds every prefix") {
    require_prefixed_equals_alone("tiny", CacheKind::kStatic, /*budget=*/64 << 20, false, 21);
  }
  SECTION("static cache, a small budget: entries evicted") {
    // A tiny row holds 2 layers x 2 x 2 kv heads x 16 x 4 bytes = 512 bytes
    // a token: a budget of three 40-token rows.
    require_prefixed_equals_alone("tiny", CacheKind::kStatic, 3 * 40 * 512, true, 21);
  }
  SECTION("hybrid cache: heads longer than the window, rings from snapshots") {
    require_prefixed_equals_alone("tiny-qwen2", CacheKind::kHybrid, 64 << 20, false, 23);
  }
  SECTION("hybrid cache, the default budget (the cache's own bytes)") {
    require_prefixed_equals_alone("tiny-qwen2", CacheKind::kHybrid, -1, true, 25);
  }
}

TEST_CASE("prefix hits and saves read nothing back: serving with the prefix cache never syncs",
          "[serving][prefix]") {
  // A row's length is known on the host (Active::cached): the restore rolls
  // back on the device and the save copies on the device, so the steps'
  // one host copy is the picks (Note [sampling head]) and nothing syncs.
  at::set_num_threads(1);
  const LlamaModel model = tiny_model("tiny-qwen2");
  Scheduler engine(model, prefix_options(CacheKind::kHybrid, 64 << 20));
  engine.warm_up();
  TraceRun run;
  statickv::OpCounter ops;
  const SchedulerStats stats = serve_prefixed(engine, shared_prefix_requests(23, 24), run);
  const statickv::OpCounts counts = ops.counts();
  CHECK(stats.prefix_hits >= 5);
  CHECK(stats.prefix_entries >= 3);
  std::string synced;
  for (const auto& [name, n] : counts.synced) synced += name + " x" + std::to_string(n) + " ";
  INFO("syncs: " << synced);
  CHECK(counts.syncs == 0);
  CHECK(require_each_equals_alone(model, CacheKind::kHybrid, run) > 1e-4);
}

namespace {

/// A hybrid row served alone under prompt lookup (3 drafts from one-token
/// matches in a 30-token prompt, so it drafts often and most drafts are
/// rejected), ending on a stop id, often the verdict's own token after
/// rejected drafts; its prompt and tokens.
std::vector<int64_t> serve_speculating(Scheduler& engine, uint64_t seed) {
  std::mt19937_64 rng(seed);
  Request r;
  r.id = "first";
  for (int i = 0; i < 30; ++i) r.prompt.push_back(8 + static_cast<int64_t>(rng() % 120));
  r.max_new_tokens = 12 + static_cast<int64_t>(rng() % 8);
  r.stop = std::vector<int64_t>{};  // a sixth of the vocabulary: most rows end on a stop id
  for (int i = 0; i < 20; ++i) r.stop->push_back(8 + static_cast<int64_t>(rng() % 120));
  engine.submit(r);
  engine.run_until_idle();
  std::vector<int64_t> all = r.prompt;
  for (const Completion& c : engine.take_finished())
    all.insert(all.end(), c.tokens.begin(), c.tokens.end());
  return all;
}

}  // namespace

TEST_CASE("a speculating hybrid row is saved only where its rings take back the pool's allowance",
          "[serving][prefix][speculative]") {
  // Drafts rejected in the step that ends a row on a stop id overwrote
  // ring slots past its length, so its snapshot could not be rolled back
  // max_chunk (8) exactly
  // (Note [ring rollback]); such a row is not saved. A probe sharing all
  // but max_chunk of each retired row is served, equal to generating it
  // alone, from whatever the pool may give.
  at::set_num_threads(1);
  const LlamaModel model = tiny_model("tiny-qwen2");
  SchedulerOptions o = prefix_options(CacheKind::kHybrid, 64 << 20);
  o.speculate = 3;
  o.lookup_ngram = 1;
  int64_t reused_rows = 0;
  for (uint64_t seed = 0; seed < 40; ++seed) {
    Scheduler engine(model, o);
    const std::vector<int64_t> all = serve_speculating(engine, seed);
    const auto cached = static_cast<int64_t>(all.size()) - 1;  // all but the newest token
    Request probe;
    probe.id = "probe";
    probe.prompt.assign(all.begin(), all.begin() + (cached - 8));
    probe.prompt.push_back(all[static_cast<size_t>(cached - 8)] == 9 ? 10 : 9);  // diverges here
    probe.prompt.push_back(11);
    probe.max_new_tokens = 3;
    probe.stop = std::vector<int64_t>{};
    INFO("seed " << seed << ", " << all.size() << " tokens");
    const int64_t reused = engine.stats().prefix_tokens_reused;
    engine.submit(probe);
    REQUIRE_NOTHROW(engine.run_until_idle());
    const std::vector<Completion> done = engine.take_finished();
    REQUIRE(done.size() == 1);
    Alone alone(model, CacheKind::kHybrid);
    CHECK(done[0].tokens == alone.generate(probe).tokens);
    reused_rows += engine.stats().prefix_tokens_reused - reused == cached - 8 ? 1 : 0;
  }
  CHECK(reused_rows >= 10);  // most retired rows are saved and serve the probe
}

TEST_CASE("a chat's next turn starts from the row its last turn left", "[serving][prefix]") {
  at::set_num_threads(1);
  const LlamaModel model = tiny_model("tiny-qwen2");
  Scheduler engine(model, prefix_options(CacheKind::kHybrid, -1));
  TraceRun run;
  std::vector<int64_t> conversation = {11, 12, 13, 14, 15, 16, 17, 18, 19, 20};
  for (int turn = 0; turn < 4; ++turn) {
    Request r;
    r.id = "turn" + std::to_string(turn);
    r.prompt = conversation;
    r.max_new_tokens = 5;
    r.stop = std::vector<int64_t>{};
    const int64_t reused_before = engine.stats().prefix_tokens_reused;
    run.submit(engine, std::move(r));
    engine.run_until_idle();
    for (Completion& c : engine.take_finished()) run.completions[c.id] = c;
    const Completion& done = run.completions.at("turn" + std::to_string(turn));
    // The next turn: this turn's prompt, its answer, and the user's words.
    const int64_t cached = static_cast<int64_t>(conversation.size() + done.tokens.size()) - 1;
    if (turn > 0) CHECK(engine.stats().prefix_tokens_reused - reused_before >= cached - 9);
    conversation.insert(conversation.end(), done.tokens.begin(), done.tokens.end());
    conversation.insert(conversation.end(), {21 + turn, 22 + turn});
  }
  CHECK(engine.stats().prefix_hits == 3);
  require_each_equals_alone(model, CacheKind::kHybrid, run);
}

namespace {

/// Four choices of one 21-token prompt (longer than a block, the window and
/// a prefill chunk), one greedy and three seeded, submitted together, as
/// statickv-serve submits `n`; served to the end. Returns the stats.
SchedulerStats serve_choices(const LlamaModel& model, CacheKind cache, int64_t budget,
                             TraceRun& run) {
  Scheduler engine(model, prefix_options(cache, budget));
  std::vector<int64_t> prompt;
  for (int64_t i = 0; i < 21; ++i) prompt.push_back(9 + (i * 37) % 110);
  for (int64_t i = 0; i < 4; ++i) {
    Request r;
    r.id = "choice" + std::to_string(i);
    r.prompt = prompt;
    r.max_new_tokens = 6;
    r.stop = std::vector<int64_t>{};
    if (i > 0) r.sampling = sampling(0.8, 20, 100 + static_cast<uint64_t>(i));
    run.submit(engine, std::move(r));
  }
  engine.run_until_idle();
  for (Completion& c : engine.take_finished()) run.completions[c.id] = std::move(c);
  return engine.stats();
}

}  // namespace

TEST_CASE("choices of one prompt prefill it once and equal generating each alone",
          "[serving][prefix]") {
  at::set_num_threads(1);
  for (const auto& [shape, cache] : {std::pair<std::string, CacheKind>{"tiny", CacheKind::kStatic},
                                     {"tiny-qwen2", CacheKind::kHybrid}}) {
    INFO(shape);
    const LlamaModel model = tiny_model(shape);
    TraceRun shared, apart;
    const SchedulerStats on = serve_choices(model, cache, -1, shared);
    const SchedulerStats off = serve_choices(model, cache, 0, apart);
    // Three choices waited for the first one's prefill, then restored its
    // row and fed only the last prompt token themselves.
    CHECK(on.prefix_hits == 3);
    CHECK(on.prefix_tokens_reused == 3 * 20);
    CHECK(off.real_tokens - on.real_tokens == 3 * 20);
    CHECK(off.prefix_hits == 0);
    for (const TraceRun* run : {&shared, &apart}) {
      for (const auto& [id, c] : run->completions) {
        INFO(id);
        CHECK(c.tokens == apart.completions.at(id).tokens);
      }
      require_each_equals_alone(model, cache, *run);
    }
  }
}

TEST_CASE("prefix cache sizes and combinations it cannot serve are refused by name",
          "[serving][prefix][errors]") {
  const LlamaModel model = tiny_model("tiny");
  SchedulerOptions o = prefix_options(CacheKind::kStatic, -2);
  CHECK_THROWS_WITH(Scheduler(model, o), Catch::Contains("prefix_cache_bytes: expected >= 0"));
  o = prefix_options(CacheKind::kStatic, -1);
  o.prefix_block = 0;
  CHECK_THROWS_WITH(Scheduler(model, o), Catch::Contains("prefix_block: expected >= 1"));
  o = prefix_options(CacheKind::kStatic, 1 << 20);
  o.kv_storage = KvStorage::kInt8;
  CHECK_THROWS_WITH(Scheduler(model, o), Catch::Contains("prefix_cache_bytes: expected 0 with "
                                                         "kv_storage=int8"));
  o.prefix_cache_bytes = -1;  // the default turns itself off
  CHECK(Scheduler(model, o).options().prefix_cache_bytes == 0);
  const LlamaModel draft = tiny_model("tiny", 9);
  o = prefix_options(CacheKind::kStatic, 1 << 20);
  o.draft_model = &draft;
  o.speculate = 2;
  CHECK_THROWS_WITH(Scheduler(model, o), Catch::Contains("prefix_cache_bytes: expected 0 with a "
                                                         "draft_model"));
  o.prefix_cache_bytes = 0;
  CHECK_NOTHROW(Scheduler(model, o));
}

TEST_CASE("a step's wall time is its own, the stats sum and average it, and an idle step has none",
          "[serving]") {
  const LlamaModel model = tiny_model("tiny");
  Scheduler engine(model, test::static_rows(2));
  CHECK(engine.last_step_seconds() == 0.0);
  CHECK(engine.stats().mean_step_seconds() == 0.0);  // before the first step
  test::submit_counted_batch(engine, 2, /*sampled=*/false);
  double sum = 0.0;
  int64_t steps = 0;
  while (!engine.idle()) {
    engine.step();
    CHECK(engine.last_step_seconds() > 0.0);
    sum += engine.last_step_seconds();
    ++steps;
  }
  SchedulerStats stats = engine.stats();
  CHECK(stats.steps == steps);
  CHECK(stats.step_seconds == Approx(sum));
  CHECK(stats.mean_step_seconds() == Approx(sum / static_cast<double>(steps)));
  engine.step();  // no row to run: not a step
  CHECK(engine.last_step_seconds() == 0.0);
  stats = engine.stats();
  CHECK(stats.steps == steps);
  CHECK(stats.mean_step_seconds() == Approx(sum / static_cast<double>(steps)));
}

TEST_CASE("key_for is the runner key a step pads to, and needs a bucketed scheduler", "[serving]") {
  const LlamaModel model = tiny_model("tiny");
  SchedulerOptions o = test::static_rows(4);
  o.max_len = 128;
  o.prefill_chunk = 8;
  Scheduler engine(model, o);
  // Batch buckets 1, 2, 4; prompt buckets 1, 2, 4, 8; attend buckets 64, 128.
  CHECK(engine.key_for(3, 1, 10) == GraphKey{4, 1, 64});
  CHECK(engine.key_for(1, 5, 64) == GraphKey{1, 8, 64});
  CHECK(engine.key_for(2, 3, 65) == GraphKey{2, 4, 128});
  statickv::test::require_error([&] { engine.key_for(5, 1, 10); }, {"batch", "[1, 4]", "5"});
  // A served step ran at the key key_for names.
  Request r;
  r.id = "a";
  r.prompt = {1, 2, 3};
  r.max_new_tokens = 2;
  engine.submit(r);
  engine.step();  // the prompt: 1 row of 3 tokens attending 3
  const RunnerStats runner = engine.stats().runner;
  REQUIRE(runner.keys.size() == 1);
  CHECK(runner.keys[0].key == engine.key_for(1, 3, 3));
  o.bucketed = false;
  Scheduler eager(model, o);
  statickv::test::require_error([&] { eager.key_for(1, 1, 1); }, {"key_for", "bucketed"});
}
