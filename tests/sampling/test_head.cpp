// The sampling head alone (reference/sampling, docs/sampling.md): per-row
// settings in device tensors, transformers' filter order, penalties by
// their owners' rules, counter-based draws that do not depend on the
// batch, log-probabilities of the raw distribution, the fused pick against
// the composition, refusals by name, and the CUDA greedy grid's CPU twin.
// The comparison with transformers' own logits processors is the [hf] case
// in tests/reference/test_hf_crosscheck.cpp; the head inside Generator's and
// the Scheduler's steps is tests/engine/test_sampling.cpp.

#include "support.hpp"
#include "support/sampling.hpp"

#include "pick_grid.hpp"

#include <statickv/sampling/head.hpp>
#include <statickv/sampling/host_sampling.hpp>

#include <cmath>
#include <map>
#include <set>

using namespace statickv;
using namespace statickv::reference;
using statickv::test::require_error;

namespace {

constexpr int64_t kVocab = 64;

SamplingHead make_head(int64_t max_batch, int64_t vocab = kVocab) {
  SamplingHeadOptions o;
  o.max_batch = max_batch;
  o.vocab_size = vocab;
  return SamplingHead(o);
}

/// Logits [b, vocab] whose row r prefers token `top[r]` by `margin`.
at::Tensor preferring(const std::vector<int64_t>& top, float margin = 1.0f) {
  at::Tensor x = at::zeros({static_cast<int64_t>(top.size()), kVocab}, at::kFloat);
  for (size_t r = 0; r < top.size(); ++r) x[static_cast<int64_t>(r)][top[r]] = margin;
  return x;
}

int64_t pick_one(SamplingHead& head, const at::Tensor& logits) {
  head.pick(logits, std::vector<bool>(static_cast<size_t>(logits.size(0)), true));
  return head.fetch(logits.size(0))[0].token;
}

// The documented mixer (docs/sampling.md), spelled out on scalars.
uint32_t mix32(uint32_t x) {
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  x ^= x >> 16;
  x *= 0x45d9f3bU;
  return x ^ (x >> 16);
}

/// mix32's inverse: the key whose hash with token id 0 is h.
uint32_t unmix32(uint32_t h) {
  uint32_t inverse = 0x45d9f3bU;  // Newton's iteration for 0x45d9f3b^-1 mod 2^32
  for (int i = 0; i < 5; ++i) inverse *= 2U - 0x45d9f3bU * inverse;
  h ^= h >> 16;
  h *= inverse;
  h ^= h >> 16;
  h *= inverse;
  return h ^ (h >> 16);
}

}  // namespace

TEST_CASE("draws are integer functions of seed, draw index and token id", "[sampling]") {
  // The tensor ops give the bits of the scalar formula: the same on every device.
  const uint64_t seed = 0x123456789abcdefULL;
  const int64_t key = draw_key(seed, 5);
  const auto seed_key =
      mix32(static_cast<uint32_t>(seed) ^ mix32(static_cast<uint32_t>(seed >> 32)));
  CHECK(key == ((static_cast<int64_t>(seed_key) + 5 * 0x9e3779b1LL) & 0xffffffffLL));
  const at::Tensor ids = at::arange(1000, at::kLong).view({1, -1});
  const at::Tensor noise = sampling_noise(at::tensor({key}), ids);
  for (int64_t id : {0, 1, 17, 999}) {
    const uint32_t h = mix32(static_cast<uint32_t>((id * 0x9e3779b1LL) & 0xffffffffLL) ^
                             static_cast<uint32_t>(key));
    const float u = (static_cast<float>(h >> 9) + 0.5f) * (1.0f / 8388608.0f);
    // The integer draw is exact; log may round its last bit differently.
    CHECK(noise[0][id].item<float>() == Approx(-std::log(-std::log(u))).epsilon(1e-6));
  }
  // A row's noise does not depend on its neighbours or the ids' order.
  const at::Tensor keys = at::tensor({key, draw_key(7, 0)});
  const at::Tensor shuffled = at::randperm(1000, at::kLong).view({1, -1});
  const at::Tensor both = sampling_noise(keys, at::cat({ids, shuffled}));
  CHECK(both[0].equal(noise[0]));
  CHECK(both[1].equal(sampling_noise(keys.narrow(0, 1, 1), shuffled)[0]));
  // Gumbel(0, 1): mean Euler's constant, variance pi^2 / 6.
  const at::Tensor many =
      sampling_noise(at::tensor({key}), at::arange(200000, at::kLong).view({1, -1}));
  CHECK(many.mean().item<double>() == Approx(0.5772).margin(0.02));
  CHECK(many.var().item<double>() == Approx(M_PI * M_PI / 6).margin(0.05));
}

TEST_CASE("the noise is finite at both ends of the hash range", "[sampling]") {
  // u's 23 bits are exact in float: the largest hash's u is below 1, so no
  // token's noise is infinite (with 24 bits it rounded to 1: g = inf).
  for (const uint32_t h : {0xffffffffU, 0U}) {
    const uint32_t key = unmix32(h);
    REQUIRE(mix32(key) == h);
    const at::Tensor g =
        sampling_noise(at::tensor({static_cast<int64_t>(key)}), at::zeros({1, 1}, at::kLong));
    INFO("hash " << h << ": noise " << g.item<float>());
    CHECK(std::isfinite(g.item<float>()));
    CHECK(std::abs(g.item<float>()) < 17.0f);
  }
}

TEST_CASE("a request draws the same tokens alone or in any row of any batch", "[sampling]") {
  at::manual_seed(0);
  const at::Tensor logits = at::randn({4, kVocab}) * 2;
  Sampling s;
  s.temperature = 0.9, s.top_p = 0.95, s.seed = 42;
  SamplingHead alone = make_head(1);
  alone.set_row(0, s, {}, {});
  SamplingHead batch = make_head(4);
  Sampling greedy;
  for (int64_t r = 0; r < 4; ++r) batch.set_row(r, r == 2 ? s : greedy, {}, {});
  std::vector<int64_t> a, b;
  for (int t = 0; t < 20; ++t) {
    const at::Tensor row = logits[t % 4].unsqueeze(0);
    a.push_back(pick_one(alone, row));
    at::Tensor x = at::randn({4, kVocab});
    x[2] = row[0];
    batch.pick(x, {true, true, true, true});
    b.push_back(batch.fetch(4)[2].token);
  }
  CHECK(a == b);
  // Another seed draws differently; the same seed again draws the same.
  SamplingHead again = make_head(1);
  again.set_row(0, s, {}, {});
  Sampling other = s;
  other.seed = 43;
  SamplingHead third = make_head(1);
  third.set_row(0, other, {}, {});
  std::vector<int64_t> c, d;
  for (int t = 0; t < 20; ++t) {
    c.push_back(pick_one(again, logits[t % 4].unsqueeze(0)));
    d.push_back(pick_one(third, logits[t % 4].unsqueeze(0)));
  }
  CHECK(c == a);
  CHECK(d != a);
}

TEST_CASE("the head's filters are the host sampler's top-k then top-p", "[sampling]") {
  at::manual_seed(1);
  const at::Tensor logits = at::randn({3, kVocab}) * 3;
  SamplingHead head = make_head(3);
  const std::vector<std::tuple<double, int64_t, double>> settings = {
      {0.7, 0, 0.9}, {1.3, 8, 1.0}, {1.0, 12, 0.5}};
  for (int64_t r = 0; r < 3; ++r) {
    Sampling s;
    std::tie(s.temperature, s.top_k, s.top_p) = settings[static_cast<size_t>(r)];
    head.set_row(r, s, {}, {});
  }
  const at::Tensor probs = head.probabilities(logits);
  for (int64_t r = 0; r < 3; ++r) {
    const auto [t, k, p] = settings[static_cast<size_t>(r)];
    CHECK(at::allclose(probs[r], host_sampling_probs(logits[r], t, k, p), 1e-5, 1e-7));
  }
  // Draws follow the distribution: 4000 draws of row 2 (12 candidates, top_p 0.5).
  at::Tensor seen = at::zeros({kVocab});
  SamplingHead one = make_head(1);
  Sampling s;
  s.temperature = 1.0, s.top_k = 12, s.top_p = 0.5, s.seed = 9;
  one.set_row(0, s, {}, {});
  for (int i = 0; i < 4000; ++i) seen[pick_one(one, logits[2].unsqueeze(0))] += 1;
  CHECK((seen / 4000 - probs[2]).abs().max().item<double>() < 0.03);
  CHECK(seen.masked_select(probs[2].eq(0)).sum().item<double>() == 0);
}

TEST_CASE("the fused pick picks what the tensor composition picks, every setting per row",
          "[sampling]") {
  SamplingHeadOptions o;
  o.max_batch = 7;
  o.vocab_size = 1000;
  o.max_logprobs = 4;
  SamplingHead fused(o);
  o.fused = false;
  SamplingHead composed(o);
  const std::vector<Sampling> rows = test::every_sampling_setting();
  for (int64_t r = 0; r < 7; ++r) {
    fused.set_row(r, rows[static_cast<size_t>(r)], {1, 2, 3}, {7, 8});
    composed.set_row(r, rows[static_cast<size_t>(r)], {1, 2, 3}, {7, 8});
  }
  at::manual_seed(5);
  int64_t same = 0, total = 0;
  for (int step = 0; step < 150; ++step) {
    const at::Tensor logits = at::randn({7, 1000}) * (1 + step % 4);
    const std::vector<bool> takes = {true, step % 3 != 0, true, true, step % 2 == 0, true, true};
    fused.pick(logits, takes);
    composed.pick(logits, takes);
    const auto a = fused.fetch(7), b = composed.fetch(7);
    for (size_t r = 0; r < 7; ++r) {
      INFO("step " << step << ", row " << r);
      same += a[r].token == b[r].token, ++total;
      if (a[r].token != b[r].token) continue;
      CHECK(a[r].logprob.logprob == Approx(b[r].logprob.logprob).margin(1e-5));
      REQUIRE(a[r].logprob.top.size() == b[r].logprob.top.size());
      for (size_t i = 0; i < a[r].logprob.top.size(); ++i) {
        CHECK(a[r].logprob.top[i].first == b[r].logprob.top[i].first);
        CHECK(a[r].logprob.top[i].second == Approx(b[r].logprob.top[i].second).margin(1e-5));
      }
    }
  }
  // log() may round a last bit differently (vectorized or not): a near-tie
  // of two scores may part, and the penalties then follow each pick.
  CHECK(same >= total - 3);
}

TEST_CASE("pick_all, every stage for every row, picks what pick picks", "[sampling]") {
  for (const bool fused : {true, false}) {
    INFO((fused ? "fused CPU draw" : "the composition"));
    SamplingHeadOptions o;
    o.max_batch = 5;
    o.vocab_size = kVocab;
    o.max_logprobs = 4;
    o.fused = fused;
    SamplingHead selective(o), all(o);
    std::vector<Sampling> rows(5);
    rows[0].temperature = 0.9, rows[0].top_p = 0.8, rows[0].presence_penalty = 0.7;
    rows[1].repetition_penalty = 1.4, rows[1].logprobs = 4;  // greedy
    rows[2].temperature = 1.1, rows[2].top_k = 9, rows[2].min_p = 0.05,
    rows[2].logit_bias = {{5, 3.0}};
    rows[3].temperature = 0.7, rows[3].min_tokens = 3, rows[3].frequency_penalty = 0.4;
    rows[4].temperature = 1.0, rows[4].logprobs = 2;
    for (int64_t r = 0; r < 5; ++r) {
      rows[static_cast<size_t>(r)].seed = static_cast<uint64_t>(r) + 100;
      selective.set_row(r, rows[static_cast<size_t>(r)], {1, 2, 3}, {7, 8});
      all.set_row(r, rows[static_cast<size_t>(r)], {1, 2, 3}, {7, 8});
    }
    at::manual_seed(4);
    for (int step = 0; step < 30; ++step) {
      const at::Tensor logits = at::randn({5, kVocab}) * 2;
      const std::vector<bool> takes = {true, step % 3 != 0, true, true, step % 2 == 0};
      selective.pick(logits, takes);
      all.pick_all(logits, at::tensor(std::vector<int64_t>(takes.begin(), takes.end())));
      const auto a = selective.fetch(5), b = all.fetch(5);
      for (size_t r = 0; r < 5; ++r) {
        INFO("step " << step << ", row " << r);
        CHECK(a[r].token == b[r].token);
        CHECK(a[r].logprob.logprob == b[r].logprob.logprob);
        CHECK(a[r].logprob.top == b[r].logprob.top);
      }
    }
  }
}

TEST_CASE("min_p keeps tokens within a fraction of the most likely one", "[sampling]") {
  const at::Tensor logits = at::log(at::tensor({0.5f, 0.3f, 0.1f, 0.06f, 0.04f})).unsqueeze(0);
  SamplingHeadOptions o;
  o.vocab_size = 5;
  SamplingHead head(o);
  Sampling s;
  s.temperature = 1.0, s.min_p = 0.15;  // keeps p >= 0.075
  head.set_row(0, s, {}, {});
  const at::Tensor p = head.probabilities(logits)[0];
  CHECK(at::allclose(p, at::tensor({0.5f, 0.3f, 0.1f, 0.0f, 0.0f}) / 0.9f, 1e-5, 1e-6));
}

TEST_CASE("penalties follow transformers' and OpenAI's rules, greedy rows included", "[sampling]") {
  SamplingHead head = make_head(3);
  Sampling rep, presence, frequency;
  rep.repetition_penalty = 2.0;        // the prompt counts: token 3 is in it
  presence.presence_penalty = 1.5;     // generated tokens only
  frequency.frequency_penalty = 0.75;  // per occurrence
  head.set_row(0, rep, {3, 4}, {});
  head.set_row(1, presence, {5}, {});
  head.set_row(2, frequency, {}, {});
  at::Tensor x = at::zeros({3, kVocab});
  x[0][3] = 2.0, x[0][9] = 1.5;   // 2 / 2 = 1 < 1.5: the penalty flips the pick
  x[1][5] = 1.0, x[1][6] = 0.25;  // the prompt's 5 is not penalized by presence
  x[2][7] = 2.0, x[2][8] = 1.0;   // 7 wins until it was picked twice
  std::vector<std::vector<int64_t>> tokens(3);
  for (int t = 0; t < 3; ++t) {
    head.pick(x, {true, true, true});
    const auto picked = head.fetch(3);
    for (size_t r = 0; r < 3; ++r) tokens[r].push_back(picked[r].token);
  }
  CHECK(tokens[0] == std::vector<int64_t>{9, 3, 3});  // once generated, 9's 1.5 / 2 < 3's 1
  CHECK(tokens[1] == std::vector<int64_t>{5, 6, 0});  // 1 - 1.5 < 0.25; then 0.25 - 1.5 < 0
  CHECK(tokens[2] == std::vector<int64_t>{7, 7, 8});  // 2 - 2 * 0.75 = 0.5 < 1
  // A negative logit is multiplied by the repetition penalty.
  SamplingHead neg = make_head(1);
  neg.set_row(0, rep, {1}, {});
  at::Tensor y = at::full({1, kVocab}, -10.0f);
  y[0][1] = -1.0, y[0][2] = -1.5;
  CHECK(pick_one(neg, y) == 2);  // -1 * 2 = -2 < -1.5
}

TEST_CASE("logit bias and min_tokens mask before the pick", "[sampling]") {
  SamplingHead head = make_head(2);
  Sampling bias, min_tokens;
  bias.logit_bias = {{11, 5.0}, {12, -100.0}};
  min_tokens.min_tokens = 2;
  head.set_row(0, bias, {}, {});
  head.set_row(1, min_tokens, {}, {20, 21});  // stop ids 20 and 21
  at::Tensor x = preferring({12, 20}, 3.0f);
  x[1][21] = 2.5;
  std::vector<int64_t> row0, row1;
  for (int t = 0; t < 3; ++t) {
    head.pick(x, {true, true});
    const auto picked = head.fetch(2);
    row0.push_back(picked[0].token);
    row1.push_back(picked[1].token);
  }
  CHECK(row0 == std::vector<int64_t>{11, 11, 11});
  CHECK(row1[0] != 20);
  CHECK(row1[0] != 21);
  CHECK(row1[1] != 20);
  CHECK(row1[2] == 20);  // the third token may stop
}

TEST_CASE("log-probabilities come from the raw distribution, with the top alternatives",
          "[sampling]") {
  at::manual_seed(3);
  const at::Tensor logits = at::randn({2, kVocab});
  SamplingHead head = make_head(2);
  Sampling s;
  s.temperature = 0.5, s.top_k = 3, s.logprobs = 5, s.seed = 1;
  Sampling none;
  head.set_row(0, s, {}, {});
  head.set_row(1, none, {}, {});
  head.pick(logits, {true, true});
  const std::vector<Picked> picked = head.fetch(2);
  const at::Tensor lp = logits.log_softmax(-1);
  CHECK(picked[0].logprob.logprob == Approx(lp[0][picked[0].token].item<float>()).margin(1e-6));
  const auto [top, ids] = lp[0].topk(5);
  REQUIRE(picked[0].logprob.top.size() == 5);
  for (int64_t i = 0; i < 5; ++i) {
    CHECK(picked[0].logprob.top[static_cast<size_t>(i)].first == ids[i].item<int64_t>());
    CHECK(picked[0].logprob.top[static_cast<size_t>(i)].second ==
          Approx(top[i].item<float>()).margin(1e-6));
  }
  CHECK(picked[1].logprob.top.empty());
  // Prompt log-probabilities: each position's logits score the next token.
  const std::vector<TokenLogprob> prompt = SamplingHead::prompt_logprobs(logits, {4, 9}, 2);
  CHECK(prompt[1].token == 9);
  CHECK(prompt[1].logprob == Approx(lp[1][9].item<float>()).margin(1e-6));
  CHECK(prompt[1].top[0].first == lp[1].argmax().item<int64_t>());
}

TEST_CASE("bad sampling settings are refused by name before anything is written",
          "[sampling][errors]") {
  SamplingHead head = make_head(1);
  Sampling good;
  good.temperature = 0.5, good.seed = 3;
  head.set_row(0, good, {}, {});
  // Each refusal is a FieldError: the field in its text and as data.
  const auto refused = [&](Sampling s, const std::vector<std::string>& parts) {
    test::require_field_error([&] { head.set_row(0, s, {}, {}); }, parts.front(), parts);
  };
  Sampling s = good;
  s.temperature = std::nan("");
  refused(s, {"temperature", "finite", "nan"});
  s = good, s.top_p = 0.0;
  refused(s, {"top_p", "(0, 1]", "got 0"});
  s = good, s.min_p = 1.5;
  refused(s, {"min_p", "[0, 1]", "1.5"});
  s = good, s.presence_penalty = INFINITY;
  refused(s, {"presence_penalty", "finite", "inf"});
  s = good, s.repetition_penalty = 0.0;
  refused(s, {"repetition_penalty", "> 0", "got 0"});
  s = good, s.logprobs = 21;
  refused(s, {"logprobs", "0..20", "21"});
  s = good;
  for (int64_t id = 0; id < 301; ++id) s.logit_bias.emplace_back(id % kVocab, 1.0);
  refused(s, {"logit_bias", "at most 300", "301"});
  s = good, s.logit_bias = {{3, 1.0}, {3, 2.0}};
  refused(s, {"logit_bias", "distinct", "3 twice"});
  s = good, s.logit_bias = {{kVocab, 1.0}};
  refused(s, {"logit_bias", "vocab_size=64", "got 64"});
  // A pick's own arguments: logits of another shape, dtype or device, and
  // takes flags that do not match them.
  require_error(
      [&] {
        head.pick(at::randn({1, kVocab + 1}), {true});
      },
      {"logits", "float32 [b <= 1, 64]", "[1, 65]"});
  require_error(
      [&] {
        head.pick(at::randn({1, kVocab}, at::kDouble), {true});
      },
      {"logits", "float32", "Double"});
  require_error(
      [&] {
        head.pick(at::empty({1, kVocab}, at::device(at::kMeta)), {true});
      },
      {"logits", "the head's device cpu", "meta"});
  require_error(
      [&] {
        head.pick(at::randn({1, kVocab}), {true, true});
      },
      {"takes", "1 flags", "got 2"});
  require_error(
      [&] {
        head.pick_all(at::randn({1, kVocab}),
                      at::ones({1}, at::device(at::kMeta).dtype(at::kLong)));
      },
      {"takes", "on the head's device cpu", "meta"});
  // Row 0 still draws with its good settings.
  SamplingHead fresh = make_head(1);
  fresh.set_row(0, good, {}, {});
  const at::Tensor x = at::randn({1, kVocab});
  CHECK(pick_one(head, x) == pick_one(fresh, x));
}

TEST_CASE("the greedy grid's slices cover a row and its CPU twin merges to argmax and logsumexp",
          "[sampling][pick_grid]") {
  // About two blocks per multiprocessor over the batch, none with fewer
  // than `least` logits.
  CHECK(reference::detail::grid_ctas(128256, 1, 132, 2048) == 62);
  CHECK(reference::detail::grid_ctas(128256, 16, 132, 2048) == 17);
  CHECK(reference::detail::grid_ctas(128256, 1000, 132, 2048) == 1);
  // pick_grid.hpp: the CUDA pick splits a plain greedy row over blocks and
  // merges their partials in the last one; the CPU twin walks the same grid.
  at::manual_seed(12);
  for (int64_t vocab : {1, 3, 5, 4097, 50257, 128256}) {
    for (int64_t ctas : {1, 2, 7, 63, 300}) {
      int64_t covered = 0;
      for (int64_t c = 0; c < ctas; ++c) {
        const int64_t begin = reference::detail::slice_begin(vocab, ctas, c);
        CHECK(begin == covered);
        CHECK((begin % 4 == 0 || begin == vocab));
        covered = reference::detail::slice_begin(vocab, ctas, c + 1);
      }
      CHECK(covered == vocab);
      CHECK(reference::detail::grid_ctas(vocab, 1, 132, 2048) ==
            std::max<int64_t>(1, vocab / 2048));
      const int64_t b = 3;
      at::Tensor logits = at::randn({b, vocab}).mul_(3);
      // A tie at the top: the lower index wins, as at::argmax's.
      logits.select(1, vocab - 1).fill_(20);
      logits.select(1, vocab / 2).fill_(20);
      std::vector<int64_t> ids(static_cast<size_t>(b));
      std::vector<float> norms(static_cast<size_t>(b));
      reference::detail::greedy_grid_cpu(logits.data_ptr<float>(), b, vocab, ctas, ids.data(),
                                         norms.data());
      const at::Tensor want_ids = logits.argmax(1);
      const at::Tensor want_norm = logits.logsumexp(1);
      INFO("vocab " << vocab << ", ctas " << ctas);
      for (int64_t r = 0; r < b; ++r) {
        const auto i = static_cast<size_t>(r);
        CHECK(ids[i] == want_ids[r].item<int64_t>());
        CHECK(std::abs(norms[i] - want_norm[r].item<float>()) <= 1e-5 * (1 + std::abs(norms[i])));
      }
    }
  }
}
