// Speculative decoding (docs/speculative.md): prompt-lookup drafts, the
// acceptance rule as a function of given p and q (its output distribution is
// the target's: a chi-square test), and Generator with speculation, whose
// greedy tokens equal plain greedy decoding for static and hybrid caches,
// ragged batches, stop tokens, both drafting modes and bucketed or eager
// steps; a draft model is checked against its target by name.

#include "support.hpp"
#include "support/generation.hpp"
#include "support/model.hpp"

#include <statickv/engine/generator.hpp>
#include <statickv/engine/speculative.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/sampling/head.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <random>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

LlamaModel make_model(const std::string& shape, uint64_t seed = 3) {
  return random_model(shape, seed);
}

constexpr int64_t kVocab = 8;
constexpr int64_t kDraws = 20000;
// chi2.ppf(1 - 1e-3, df=7): a statistic below it has p > 1e-3.
constexpr double kCritical = 24.322;

/// Pearson's statistic of `counts` against probabilities `p` [kVocab].
double chi_square(const std::vector<int64_t>& counts, const at::Tensor& p) {
  int64_t n = 0;
  for (const int64_t c : counts) n += c;
  double stat = 0;
  for (int64_t x = 0; x < kVocab; ++x) {
    const double expected = static_cast<double>(n) * p[x].item<double>();
    stat += (static_cast<double>(counts[x]) - expected) * (counts[x] - expected) / expected;
  }
  return stat;
}

/// A fixed distribution over kVocab ids from a seed (every id > 0).
at::Tensor distribution(uint64_t seed, int64_t rows) {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  const at::Tensor w = at::rand({rows, kVocab}, g, at::kDouble).add(0.05);
  return w.div(w.sum(-1, true));
}

/// Draws the k drafts of one step from q (undefined q: the fixed `point`
/// drafts) and counts, at every position j, the token emitted there.
std::vector<std::vector<int64_t>> emitted_counts(const at::Tensor& p, const at::Tensor& q,
                                                 const std::vector<int64_t>& point, uint64_t seed) {
  const int64_t k = p.size(0) - 1;
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(seed);
  std::mt19937_64 draft_rng(seed);  // the drafter's own randomness
  std::vector<std::discrete_distribution<int64_t>> draft_dist;
  for (int64_t i = 0; q.defined() && i < k; ++i) {
    const at::Tensor row = q[i].contiguous();
    draft_dist.emplace_back(row.data_ptr<double>(), row.data_ptr<double>() + kVocab);
  }
  std::vector<std::vector<int64_t>> counts(k + 1, std::vector<int64_t>(kVocab, 0));
  for (int64_t n = 0; n < kDraws; ++n) {
    std::vector<int64_t> drafts = point;
    if (q.defined()) drafts = std::vector<int64_t>(static_cast<size_t>(k));
    for (size_t i = 0; i < draft_dist.size(); ++i) drafts[i] = draft_dist[i](draft_rng);
    const Verdict v = verify_sampled(drafts, p, q, g);
    REQUIRE(v.tokens.size() == static_cast<size_t>(v.accepted + 1));
    for (size_t j = 0; j < v.tokens.size(); ++j) ++counts[j][v.tokens[j]];
  }
  return counts;
}

/// Every position's counts pass the chi-square test against p at that
/// position (positions reached fewer than 200 times are skipped).
void require_target_distribution(const std::vector<std::vector<int64_t>>& counts,
                                 const at::Tensor& p) {
  for (size_t j = 0; j < counts.size(); ++j) {
    int64_t n = 0;
    for (const int64_t c : counts[j]) n += c;
    if (n < 200) continue;
    const double stat = chi_square(counts[j], p[static_cast<int64_t>(j)]);
    INFO("position " << j << ": " << n << " draws, chi-square " << stat);
    CHECK(stat < kCritical);
  }
}

/// Counts what an acceptance rule emits at each position, over kDraws
/// steps: counts(p, q, drafts, seed) (emitted_counts, head_counts).
using Counts = std::vector<std::vector<int64_t>> (*)(const at::Tensor&, const at::Tensor&,
                                                     const std::vector<int64_t>&, uint64_t);

/// The rule's emitted tokens are distributed as the target's p at every
/// position, for k = 3 drafts from another q, point-mass drafts, and q = p.
void require_rule_keeps_target(Counts counts) {
  const int64_t k = 3;
  const at::Tensor p = distribution(11, k + 1);
  SECTION("drafts sampled from a different draft distribution q") {
    require_target_distribution(counts(p, distribution(12, k), std::vector<int64_t>(k), 1), p);
  }
  SECTION("prompt-lookup drafts: a point mass at fixed ids") {
    require_target_distribution(counts(p, at::Tensor(), {2, 5, 5}, 2), p);
  }
  SECTION("q equal to p: every draft accepted, the bonus token drawn from p_k") {
    const std::vector<std::vector<int64_t>> emitted =
        counts(p, p.narrow(0, 0, k), std::vector<int64_t>(k), 3);
    int64_t bonus = 0;
    for (const int64_t c : emitted[k]) bonus += c;
    CHECK(bonus > kDraws * 99 / 100);
    require_target_distribution(emitted, p);
  }
}

}  // namespace

TEST_CASE("prompt lookup drafts what followed the latest earlier match of the longest n-gram",
          "[speculative][lookup]") {
  // The 3-gram (1 2 3) occurs at 0 and 5: the latest earlier one (5) wins.
  const std::vector<int64_t> ids = {1, 2, 3, 4, 9, 1, 2, 3, 5, 6, 1, 2, 3};
  CHECK(prompt_lookup_draft(ids, 2) == std::vector<int64_t>{5, 6});
  CHECK(prompt_lookup_draft(ids, 8) == std::vector<int64_t>{5, 6, 1, 2, 3});
  // No 3- or 2-gram recurs, the 1-gram (4) does.
  CHECK(prompt_lookup_draft({4, 7, 8, 5, 4}, 3) == std::vector<int64_t>{7, 8, 5});
  CHECK(prompt_lookup_draft({1, 2, 3}, 4).empty());
  CHECK(prompt_lookup_draft({1, 2, 1}, 0).empty());
  CHECK(prompt_lookup_draft({}, 4).empty());
  // max_ngram 1 matches the last token only: its latest earlier occurrence.
  CHECK(prompt_lookup_draft({7, 1, 7, 2, 7}, 2, 1) == std::vector<int64_t>{2, 7});
}

TEST_CASE("greedy verification keeps the drafts the target agrees with, then the target's token",
          "[speculative][verify]") {
  Verdict v = verify_greedy({4, 5, 6}, {4, 5, 9, 1});
  CHECK(v.accepted == 2);
  CHECK(v.tokens == std::vector<int64_t>{4, 5, 9});
  v = verify_greedy({4, 5, 6}, {4, 5, 6, 1});  // all accepted: the bonus token follows
  CHECK(v.accepted == 3);
  CHECK(v.tokens == std::vector<int64_t>{4, 5, 6, 1});
  v = verify_greedy({}, {3});
  CHECK(v.tokens == std::vector<int64_t>{3});
  require_error([] { verify_greedy({1, 2}, {1, 2}); }, {"target_ids", "expected 3"});
}

TEST_CASE("the acceptance rule emits tokens distributed as the target's (chi-square, vocab 8)",
          "[speculative][verify][statistics]") {
  require_rule_keeps_target(emitted_counts);
  SECTION("the test can fail: the drafts themselves are not distributed as p") {
    const at::Tensor p = distribution(11, 1), q = distribution(12, 1)[0].contiguous();
    std::mt19937_64 rng(4);
    std::discrete_distribution<int64_t> draft(q.data_ptr<double>(), q.data_ptr<double>() + kVocab);
    std::vector<int64_t> counts(kVocab, 0);
    for (int64_t n = 0; n < kDraws; ++n) ++counts[draft(rng)];
    CHECK(chi_square(counts, p[0]) > kCritical);
  }
}

TEST_CASE("the acceptance rule rejects malformed distributions by name", "[speculative][errors]") {
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(0);
  const at::Tensor p = distribution(1, 3);
  require_error([&] { verify_sampled({1}, p, at::Tensor(), g); }, {"p: expected [2, vocab]"});
  require_error([&] { verify_sampled({1, 2}, p, distribution(2, 1), g); }, {"q: expected"});
  require_error([&] { verify_sampled({1, 9}, p, at::Tensor(), g); }, {"drafts", "[0, 8)"});
}

namespace {

constexpr int64_t kHeadRows = 250;  // rows per verify call: kDraws / 80

/// A head over kVocab ids whose kHeadRows rows sample at temperature 1,
/// each from its own seed.
SamplingHead sampling_rows(uint64_t seed) {
  SamplingHead head({kHeadRows, kVocab, at::kCPU});
  Sampling s;
  s.temperature = 1.0;
  for (int64_t r = 0; r < kHeadRows; ++r) {
    s.seed = seed * 100000 + static_cast<uint64_t>(r);
    head.set_row(r, s, {}, {});
  }
  return head;
}

/// emitted_counts through SamplingHead::verify: every row of every call
/// verifies drafts drawn from q (or the fixed `point` drafts) against the
/// target logits log(p).
std::vector<std::vector<int64_t>> head_counts(const at::Tensor& p, const at::Tensor& q,
                                              const std::vector<int64_t>& point, uint64_t seed) {
  const int64_t k = p.size(0) - 1;
  SamplingHead head = sampling_rows(seed);
  std::mt19937_64 draft_rng(seed);
  std::vector<std::discrete_distribution<int64_t>> draft_dist;
  for (int64_t i = 0; q.defined() && i < k; ++i) {
    const at::Tensor row = q[i].contiguous();
    draft_dist.emplace_back(row.data_ptr<double>(), row.data_ptr<double>() + kVocab);
  }
  const at::Tensor logits = p.log().to(at::kFloat).unsqueeze(0).expand({kHeadRows, k + 1, kVocab});
  DraftSet set{std::vector<std::vector<int64_t>>(kHeadRows, point), at::Tensor()};
  if (q.defined()) set.q = q.to(at::kFloat).unsqueeze(0).expand({kHeadRows, k, kVocab});
  std::vector<std::vector<int64_t>> counts(k + 1, std::vector<int64_t>(kVocab, 0));
  for (int64_t call = 0; call < kDraws / kHeadRows; ++call) {
    for (auto& drafts : set.ids) {
      for (size_t i = 0; i < draft_dist.size(); ++i) drafts[i] = draft_dist[i](draft_rng);
    }
    head.verify(logits.contiguous(), set, std::vector<bool>(kHeadRows, true));
    const std::vector<Picked> verdicts = head.fetch(kHeadRows);
    for (size_t r = 0; r < verdicts.size(); ++r) {
      const Picked& v = verdicts[r];
      REQUIRE((v.accepted >= 0 && v.accepted <= k));
      for (int64_t j = 0; j < v.accepted; ++j) ++counts[j][set.ids[r][static_cast<size_t>(j)]];
      ++counts[v.accepted][v.token];
    }
  }
  return counts;
}

}  // namespace

TEST_CASE("the head's acceptance rule on the device emits tokens distributed as the target's",
          "[speculative][verify][statistics][head]") {
  require_rule_keeps_target(head_counts);
  SECTION("fewer drafts than k: the token after them comes from p") {
    const at::Tensor p = distribution(11, 4);
    require_target_distribution(head_counts(p, at::Tensor(), {2}, 4), p);
  }
}

TEST_CASE("the head verifies a greedy row as verify_greedy does, and a row alone as in a batch",
          "[speculative][verify][head]") {
  const int64_t k = 4, vocab = 16, b = 6;
  SamplingHead head({b, vocab, at::kCPU});
  Sampling sampled;
  sampled.temperature = 0.9;
  sampled.top_k = 6;
  sampled.min_p = 0.05;
  for (int64_t r = 0; r < b; ++r) {
    sampled.seed = 70 + static_cast<uint64_t>(r);
    head.set_row(r, r % 2 == 0 ? Sampling{} : sampled, {}, {});  // even rows greedy
  }
  at::Generator g = at::make_generator<at::CPUGeneratorImpl>(5);
  const at::Tensor logits = at::randn({b, k + 1, vocab}, g).mul_(3.0);
  const at::Tensor argmax = logits.argmax(-1).contiguous();
  DraftSet set{std::vector<std::vector<int64_t>>(b), at::Tensor()};
  for (int64_t r = 0; r < b; ++r) {
    const int64_t* ids = argmax.data_ptr<int64_t>() + r * (k + 1);
    // Row r's drafts agree with the target's argmax on their first r % 4 ids.
    for (int64_t t = 0; t < k; ++t) set.ids[r].push_back(t < r % 4 ? ids[t] : (ids[t] + 1) % vocab);
  }
  head.verify(logits, set, std::vector<bool>(b, true));
  const std::vector<Picked> batch = head.fetch(b);
  for (int64_t r = 0; r < b; r += 2) {
    const int64_t* ids = argmax.data_ptr<int64_t>() + r * (k + 1);
    const Verdict want = verify_greedy(set.ids[r], std::vector<int64_t>(ids, ids + k + 1));
    CHECK(batch[r].accepted == want.accepted);
    CHECK(batch[r].token == want.tokens.back());
  }
  for (int64_t r = 1; r < b; r += 2) {
    SamplingHead alone({1, vocab, at::kCPU});
    sampled.seed = 70 + static_cast<uint64_t>(r);
    alone.set_row(0, sampled, {}, {});
    alone.verify(logits.narrow(0, r, 1), DraftSet{{set.ids[r]}, at::Tensor()}, {true});
    const Picked one = alone.fetch(1)[0];
    CHECK(one.accepted == batch[r].accepted);
    CHECK(one.token == batch[r].token);
  }
}

TEST_CASE("verify_all, every stage from the pass's own inputs, verifies what verify verifies",
          "[speculative][verify][head]") {
  // Rows greedy and sampled (top-k, top-p, min-p), some with fewer drafts
  // than k, one not taking; drafts as point masses and from a draft model.
  const int64_t k = 3, vocab = 16, b = 5;
  for (const bool with_q : {false, true}) {
    INFO((with_q ? "a draft model's q" : "point-mass drafts"));
    SamplingHead one({b, vocab, at::kCPU}), all({b, vocab, at::kCPU});
    std::vector<Sampling> rows(b);
    rows[1].temperature = 0.9, rows[1].top_k = 6;
    rows[2].temperature = 1.2, rows[2].top_p = 0.7;
    rows[3].temperature = 0.8, rows[3].min_p = 0.1;
    for (int64_t r = 0; r < b; ++r) {
      rows[static_cast<size_t>(r)].seed = 300 + static_cast<uint64_t>(r);
      one.set_row(r, rows[static_cast<size_t>(r)], {}, {});
      all.set_row(r, rows[static_cast<size_t>(r)], {}, {});
    }
    at::Generator g = at::make_generator<at::CPUGeneratorImpl>(11);
    const std::vector<bool> takes = {true, true, true, false, true};
    int64_t accepted = 0;
    for (int step = 0; step < 6; ++step) {
      const at::Tensor logits = at::randn({b, k + 1, vocab}, g).mul_(2.0);
      const at::Tensor argmax = logits.argmax(-1).contiguous();
      DraftSet set{std::vector<std::vector<int64_t>>(b), at::Tensor()};
      at::Tensor ids = at::zeros({b, k + 1}, at::kLong), positions = at::full({b, k + 1}, -1L);
      for (int64_t r = 0; r < b; ++r) {
        // Row r drafts (r + step) % (k + 1) ids, the target's argmax on most.
        const int64_t n = (r + step) % (k + 1);
        positions[r][0] = 10;
        for (int64_t t = 0; t < n; ++t) {
          const int64_t id = (t + r) % 3 == 0 ? (argmax[r][t].item<int64_t>() + 1) % vocab
                                              : argmax[r][t].item<int64_t>();
          set.ids[static_cast<size_t>(r)].push_back(id);
          ids[r][t + 1] = id, positions[r][t + 1] = 11 + t;
        }
      }
      if (with_q) set.q = at::softmax(at::randn({b, k, vocab}, g), -1);
      one.verify(logits, set, takes);
      all.verify_all(logits, ids, positions,
                     at::tensor(std::vector<int64_t>(takes.begin(), takes.end())), set.q);
      const std::vector<Picked> a = one.fetch(b), c = all.fetch(b);
      for (size_t r = 0; r < static_cast<size_t>(b); ++r) {
        INFO("step " << step << ", row " << r);
        CHECK(a[r].accepted == c[r].accepted);
        CHECK(a[r].token == c[r].token);
        accepted += a[r].accepted;
      }
    }
    CHECK(accepted > 0);
  }
}

TEST_CASE("the head refuses malformed verification inputs by name, before any state changes",
          "[speculative][verify][head][errors]") {
  SamplingHead head({2, 8, at::kCPU});
  const at::Tensor logits = at::zeros({2, 3, 8});
  const std::vector<bool> both(2, true);
  const std::vector<std::vector<int64_t>> ok{{1, 2}, {3}};
  require_error(
      [&] {
        head.verify(at::zeros({2, 8}), DraftSet{ok, {}}, both);
      },
      {"logits: expected float32 [b <= 2, k + 1 >= 2, 8]"});
  require_error(
      [&] {
        head.verify(logits, DraftSet{{{1, 2, 3}, {}}, {}}, both);
      },
      {"drafts[0]: expected at most k=2"});
  require_error(
      [&] {
        head.verify(logits, DraftSet{{{1, 9}, {}}, {}}, both);
      },
      {"drafts[0]: expected ids in [0, 8)", "9"});
  require_error(
      [&] {
        head.verify(logits, DraftSet{ok, at::zeros({2, 1, 8})}, both);
      },
      {"q: expected [2, 2, 8]"});
  require_error([&] { head.verify(logits, DraftSet{ok, {}}, {true}); }, {"verify: expected 2"});
  Sampling penalized;
  penalized.presence_penalty = 0.5;
  head.set_row(1, penalized, {}, {});
  require_error(
      [&] {
        head.verify(logits, DraftSet{ok, {}}, both);
      },
      {"verify: expected rows without penalties", "row 1 has presence_penalty=0.5"});
  // Nothing was written: row 0 still picks as a fresh greedy row.
  head.verify(logits, DraftSet{ok, {}}, {true, false});
  CHECK(head.fetch(1)[0].token == 0);
}

namespace {

/// Prompts whose continuations can copy spans: each repeats a phrase.
std::vector<std::vector<int64_t>> repeating_prompts() {
  std::vector<std::vector<int64_t>> prompts = ragged_prompts();
  prompts[0].insert(prompts[0].end(), {5, 9, 14, 2, 77});
  prompts[2].insert(prompts[2].end(), {90, 13, 27});
  return prompts;
}

/// Greedy speculative generation equals plain greedy generation, token for
/// token (ragged rows, the model's eos ids ending rows), and returns it.
GenerateResult require_speculation_equals_plain(const LlamaModel& model, GenerateOptions options,
                                                int64_t new_tokens) {
  options.max_new_tokens = new_tokens;
  if (options.speculate == 0) options.speculate = 4;
  const GenerateResult spec = generate(model, repeating_prompts(), options, 4);
  options.speculate = 0;
  options.draft_model = nullptr;
  const GenerateResult plain = generate(model, repeating_prompts(), options, 4);
  CHECK(spec.tokens == plain.tokens);
  CHECK(spec.speculation.verify_steps == spec.decode_steps);
  CHECK(spec.speculation.accepted <= spec.speculation.drafted);
  return spec;
}

}  // namespace

TEST_CASE("greedy speculative decoding equals plain greedy decoding", "[speculative][generate]") {
  for (const std::string shape : {"tiny", "tiny-mistral", "tiny-qwen2"}) {
    const LlamaModel model = make_model(shape);
    for (const CacheKind cache : {CacheKind::kStatic, CacheKind::kHybrid}) {
      if (cache == CacheKind::kStatic && model.config().has_sliding()) continue;
      for (const bool bucketed : {false, true}) {
        INFO(shape << " cache " << to_string(cache) << " bucketed " << bucketed);
        GenerateOptions options;
        options.cache = cache;
        options.bucketed = bucketed;
        const GenerateResult spec = require_speculation_equals_plain(model, options, 24);
        CHECK(spec.speculation.drafted > 0);
        // Fewer target passes than tokens after the first: drafts were kept.
        CHECK(spec.speculation.accepted > 0);
        CHECK(spec.decode_steps < 23);
      }
    }
  }
}

TEST_CASE("speculation stops rows at eos ids and token limits as plain decoding does",
          "[speculative][generate]") {
  ModelConfig config = named_config("tiny");
  const Weights weights = random_weights(config, 3, at::kFloat, at::kCPU);
  GenerateOptions options;
  options.max_new_tokens = 16;
  const GenerateResult free_run =
      generate(LlamaModel(config, weights), repeating_prompts(), options);
  // Row 0's fifth token becomes an eos id: it stops there, other rows go on.
  config.eos_token_ids = {free_run.tokens[0][4]};
  const LlamaModel model(config, weights);
  const std::vector<int64_t>& row0 = free_run.tokens[0];
  const auto stop = std::find(row0.begin(), row0.end(), row0[4]) - row0.begin() + 1;
  for (const int64_t k : {1, 2, 7}) {
    for (const int64_t limit : {1, 2, 5, 16}) {
      INFO("k " << k << " limit " << limit);
      options.speculate = k;
      const GenerateResult spec = require_speculation_equals_plain(model, options, limit);
      CHECK(spec.tokens[0].size() == static_cast<size_t>(std::min<int64_t>(limit, stop)));
    }
  }
}

TEST_CASE("draft-model speculation equals plain greedy decoding, with any draft model",
          "[speculative][generate][draft]") {
  const LlamaModel target = make_model("tiny-qwen2");
  GenerateOptions options;
  options.max_new_tokens = 20;
  SECTION("the target as its own draft: every draft is accepted") {
    options.draft_model = &target;
    const GenerateResult spec = require_speculation_equals_plain(target, options, 20);
    CHECK(spec.speculation.accepted == spec.speculation.drafted);
    CHECK(spec.speculation.acceptance_rate() == 1.0);
  }
  SECTION("an unrelated smaller model (a sliding-window one, other weights)") {
    const LlamaModel draft = make_model("tiny-mistral", 9);
    options.draft_model = &draft;
    for (const bool bucketed : {false, true}) {
      options.bucketed = bucketed;
      const GenerateResult spec = require_speculation_equals_plain(target, options, 20);
      CHECK(spec.speculation.drafted > 0);
      CHECK(spec.speculation.acceptance_rate() < 1.0);
    }
  }
}

TEST_CASE("sampled speculation is reproducible for a seed and keeps token limits",
          "[speculative][generate][sampling]") {
  const LlamaModel model = make_model("tiny");
  for (const bool draft : {false, true}) {
    GenerateOptions options;
    options.max_new_tokens = 12;
    options.temperature = 1.2;
    options.top_k = 20;
    options.seed = 42;
    options.speculate = 3;
    options.draft_model = draft ? &model : nullptr;
    const GenerateResult a = generate(model, repeating_prompts(), options);
    CHECK(generate(model, repeating_prompts(), options).tokens == a.tokens);
    for (const auto& row : a.tokens) CHECK(row.size() <= 12);
    // The target as its own draft under sampling: p == q, all accepted.
    if (draft) CHECK(a.speculation.accepted == a.speculation.drafted);
  }
}

TEST_CASE("speculation options are checked by name before anything runs", "[speculative][errors]") {
  const LlamaModel model = make_model("tiny-mistral");  // window 8: max_chunk 8
  GenerateOptions options;
  options.speculate = 8;
  require_error([&] { Generator(model, options, 2, 64); },
                {"speculate", "speculate + 1 = 9", "max_chunk=8"});
  options.speculate = 7;
  Generator fits(model, options, 2, 64);  // 8 query tokens fit
  options.cache = CacheKind::kDynamic;
  require_error([&] { Generator(model, options, 2, 64); }, {"speculate", "cache=dynamic"});
  options = GenerateOptions();
  options.draft_model = &model;
  require_error([&] { Generator(model, options, 2, 64); }, {"draft_model", "speculate=0"});
  options.speculate = -1;
  require_error([&] { Generator(model, options, 2, 64); }, {"speculate: expected >= 0"});
  ModelConfig other = named_config("tiny");
  other.vocab_size = 64;
  const LlamaModel small(other, random_weights(other, 1, at::kFloat, at::kCPU));
  options.speculate = 2;
  options.draft_model = &small;
  require_error([&] { Generator(model, options, 2, 64); }, {"draft_model", "vocab_size=128"});
}

TEST_CASE("check_draft_model passes no draft or a fitting one and refuses the rest naming it",
          "[speculative][errors]") {
  const LlamaModel target = make_model("tiny");
  const LlamaModel draft = make_model("tiny-qwen3", 9);  // another model, the same vocabulary
  CHECK_NOTHROW(check_draft_model(target, nullptr, 0));
  CHECK_NOTHROW(check_draft_model(target, nullptr, 3));
  CHECK_NOTHROW(check_draft_model(target, &draft, 1));
  require_error([&] { check_draft_model(target, &draft, 0); },
                {"draft_model", "speculate >= 1", "speculate=0"});
  require_error([&] { check_draft_model(target, &draft, -3); }, {"got speculate=-3"});
  ModelConfig other = named_config("tiny");
  other.vocab_size = 64;
  const LlamaModel small(other, random_weights(other, 1, at::kFloat, at::kCPU));
  require_error([&] { check_draft_model(target, &small, 2); },
                {"draft_model", "vocab_size=128", "got 64"});
  // A draft on another device (meta: no data) than the target's.
  const ModelConfig config = named_config("tiny");
  const LlamaModel elsewhere(config, random_weights(config, 1, at::kFloat, at::kMeta));
  require_error([&] { check_draft_model(target, &elsewhere, 2); },
                {"draft_model", "device cpu", "meta"});
}
