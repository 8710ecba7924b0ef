// The sampling head alone (reference/sampling, docs/sampling.md): per-row
// settings in device tensors, transformers' filter order, penalties by
// their owners' rules, counter-based draws that do not depend on the
// batch, log-probabilities of the raw distribution, the fused pick against
// the composition, refusals by name, the CUDA greedy grid's CPU twin, row
// moves (copy_row, reorder), speculative verification (verify, check_verify,
// verify_all), draft draws and copy_picks. The draws' host mirrors
// (draw_key, sampling_noise) are test_host_sampling.cpp's. The comparison
// with transformers' own logits processors is the [hf] case in
// tests/reference/test_hf_crosscheck.cpp; the head inside Generator's and
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

}  // namespace

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

namespace {

/// Verification logits [1, k + 1, vocab] whose position t prefers best[t].
at::Tensor verifying(const std::vector<int64_t>& best) {
  at::Tensor x = at::zeros({1, static_cast<int64_t>(best.size()), kVocab});
  for (size_t t = 0; t < best.size(); ++t) x[0][static_cast<int64_t>(t)][best[t]] = 2.0f;
  return x;
}

DraftSet drafts_of(std::vector<std::vector<int64_t>> ids) {
  DraftSet d;
  d.ids = std::move(ids);
  return d;
}

}  // namespace

TEST_CASE("options returns the options the head was built with and refuses by", "[sampling]") {
  SamplingHeadOptions o;
  o.max_batch = 3, o.vocab_size = 50, o.max_logprobs = 4, o.max_bias = 7, o.max_stop = 2;
  o.fused = false;
  SamplingHead head(o);
  const SamplingHeadOptions& got = head.options();
  CHECK(got.max_batch == 3);
  CHECK(got.vocab_size == 50);
  CHECK(got.device == at::Device(at::kCPU));
  CHECK(got.max_logprobs == 4);
  CHECK(got.max_bias == 7);
  CHECK(got.max_stop == 2);
  CHECK_FALSE(got.fused);
  Sampling s;
  for (int64_t id = 0; id < 8; ++id) s.logit_bias.emplace_back(id, 1.0);
  require_error([&] { head.set_row(0, s, {}, {}); }, {"logit_bias", "at most 7", "8"});
  s = Sampling(), s.logprobs = 5;
  require_error([&] { head.set_row(0, s, {}, {}); }, {"logprobs", "0..4", "5"});
}

TEST_CASE("copy_row gives row to the settings, draws, penalties and pick of row from",
          "[sampling]") {
  SamplingHead head = make_head(2), fresh = make_head(1);
  Sampling s, greedy;
  s.temperature = 1.0, s.seed = 17, s.presence_penalty = 2.0;
  head.set_row(0, s, {}, {});
  head.set_row(1, greedy, {}, {});
  fresh.set_row(0, s, {}, {});
  at::manual_seed(6);
  const at::Tensor warm = at::randn({2, kVocab});
  for (int t = 0; t < 3; ++t) head.pick(warm, {true, false});  // row 0 draws and is penalized
  head.copy_row(0, 1);
  CHECK(head.fetch(2)[1].token == head.fetch(2)[0].token);
  std::vector<int64_t> row0, row1, alone;
  for (int t = 0; t < 10; ++t) {
    const at::Tensor x = at::randn({1, kVocab}) * 2;
    head.pick(x.expand({2, kVocab}).contiguous(), {true, true});
    const auto picked = head.fetch(2);
    row0.push_back(picked[0].token);
    row1.push_back(picked[1].token);
    alone.push_back(pick_one(fresh, x));
  }
  CHECK(row1 == row0);
  CHECK(alone != row0);  // a new row with the same settings has not drawn three tokens yet
}

TEST_CASE("reorder makes rows 0 to n the old rows of index, state and picks included",
          "[sampling]") {
  SamplingHead head = make_head(3), kept = make_head(3);
  for (int64_t r = 0; r < 3; ++r) {
    Sampling s;
    s.temperature = 0.8 + 0.1 * static_cast<double>(r), s.seed = 100 + static_cast<uint64_t>(r);
    s.frequency_penalty = 0.5;
    head.set_row(r, s, {}, {});
    kept.set_row(r, s, {}, {});
  }
  at::manual_seed(7);
  const at::Tensor first = at::randn({3, kVocab});
  head.pick(first, {true, true, true});
  kept.pick(first, {true, true, true});
  head.reorder(at::tensor({int64_t{2}, int64_t{0}}));
  CHECK(head.fetch(2)[0].token == kept.fetch(3)[2].token);
  CHECK(head.fetch(2)[1].token == kept.fetch(3)[0].token);
  for (int step = 0; step < 8; ++step) {
    const at::Tensor x = at::randn({3, kVocab}) * 2;
    kept.pick(x, {true, true, true});
    head.pick(at::stack({x[2], x[0]}), {true, true});
    INFO("step " << step);
    CHECK(head.fetch(2)[0].token == kept.fetch(3)[2].token);
    CHECK(head.fetch(2)[1].token == kept.fetch(3)[0].token);
  }
  require_error([&] { head.reorder(at::tensor({0.0f})); }, {"index", "host int64 [n]", "Float"});
}

TEST_CASE("verify accepts a greedy row's drafts while they are the target's argmax", "[sampling]") {
  SamplingHead head = make_head(1);
  head.set_row(0, Sampling(), {}, {});
  const at::Tensor x = verifying({5, 6, 7, 8});  // k = 3
  const auto verified = [&](std::vector<int64_t> drafts) {
    head.verify(x, drafts_of({std::move(drafts)}), {true});
    return head.fetch(1)[0];
  };
  Picked p = verified({5, 6, 9});
  CHECK(p.accepted == 2);
  CHECK(p.token == 7);  // the correction: the argmax where draft 2 was rejected
  at::Tensor ids = at::zeros({1}, at::kLong);
  head.copy_picks(ids);
  CHECK(ids.item<int64_t>() == 7);
  p = verified({5, 6, 7});
  CHECK(p.accepted == 3);
  CHECK(p.token == 8);  // every draft accepted: the bonus token
  p = verified({1, 6, 7});
  CHECK(p.accepted == 0);
  CHECK(p.token == 5);
  p = verified({5});  // fewer drafts than k
  CHECK(p.accepted == 1);
  CHECK(p.token == 6);
  // A row that does not take keeps its last result.
  head.verify(x, drafts_of({{5, 6, 7}}), {false});
  CHECK(head.fetch(1)[0].token == 6);
  CHECK(head.fetch(1)[0].accepted == 1);
}

TEST_CASE("verify accepts a sampled draft with the target's probability of it", "[sampling]") {
  // The row's p: half on token 3 and half on token 4 at both positions.
  at::Tensor x = at::full({1, 2, kVocab}, -30.0f);
  x.select(2, 3).fill_(0.0f);
  x.select(2, 4).fill_(0.0f);
  SamplingHead head = make_head(1);
  int accepted = 0;
  for (uint64_t seed = 0; seed < 400; ++seed) {
    Sampling s;
    s.temperature = 1.0, s.seed = seed;
    head.set_row(0, s, {}, {});
    head.verify(x, drafts_of({{3}}), {true});
    const Picked p = head.fetch(1)[0];
    INFO("seed " << seed);
    CHECK((p.token == 3 || p.token == 4));
    if (p.accepted == 1) {
      ++accepted;
    } else {
      CHECK(p.accepted == 0);
      CHECK(p.token == 4);  // norm(max(0, p - q)) with q a point mass on 3
    }
  }
  CHECK(accepted > 140);
  CHECK(accepted < 260);
  // A draft the row's filters leave out (top_p) is never accepted.
  for (uint64_t seed = 0; seed < 50; ++seed) {
    Sampling s;
    s.temperature = 1.0, s.top_p = 0.9, s.seed = seed;
    head.set_row(0, s, {}, {});
    head.verify(x, drafts_of({{9}}), {true});
    CHECK(head.fetch(1)[0].accepted == 0);
    CHECK((head.fetch(1)[0].token == 3 || head.fetch(1)[0].token == 4));
  }
}

TEST_CASE("check_verify refuses by name what verify refuses, and neither changes a row",
          "[sampling][errors]") {
  SamplingHead head = make_head(2), fresh = make_head(2);
  Sampling greedy, penalized;
  penalized.presence_penalty = 0.5;
  for (SamplingHead* h : {&head, &fresh}) {
    h->set_row(0, greedy, {}, {});
    h->set_row(1, penalized, {}, {});
  }
  const DraftSet d = drafts_of({{1, 2}, {3}});
  head.check_verify(2, d, {true, false});  // the penalized row does not take: accepted
  require_error(
      [&] {
        head.check_verify(2, d, {true, true});
      },
      {"verify", "penalties, logit_bias, min_tokens or logprobs",
       "row 1 has presence_penalty=0.5"});
  require_error(
      [&] {
        head.check_verify(1, d, {true, false});
      },
      {"drafts[0]", "at most k=1", "got 2"});
  require_error(
      [&] {
        head.check_verify(2, drafts_of({{kVocab}, {}}), {true, false});
      },
      {"drafts[0]", "[0, 64)", "got 64"});
  require_error([&] { head.check_verify(0, d, {true, false}); }, {"k", ">= 1", "got 0"});
  require_error([&] { head.check_verify(2, d, {true}); }, {"takes flags", "got 1 and 2"});
  // verify refuses the same before verifying anything.
  at::Tensor x = at::zeros({2, 3, kVocab});
  x.select(2, 1).fill_(1.0f);
  require_error([&] { head.verify(x, d, {true, true}); }, {"penalties"});
  require_error([&] { head.verify(x.narrow(1, 0, 2), d, {true, false}); }, {"drafts[0]", "k=1"});
  head.verify(x, d, {true, false});
  fresh.verify(x, d, {true, false});
  CHECK(head.fetch(1)[0].accepted == 1);
  CHECK(head.fetch(1)[0].token == fresh.fetch(1)[0].token);
}

TEST_CASE("check_verify names the taking row and the setting verification cannot apply",
          "[sampling][errors]") {
  std::vector<std::pair<Sampling, std::string>> cases(6);
  cases[0].first.repetition_penalty = 1.3, cases[0].second = "repetition_penalty=1.3";
  cases[1].first.presence_penalty = 0.5, cases[1].second = "presence_penalty=0.5";
  cases[2].first.frequency_penalty = 0.25, cases[2].second = "frequency_penalty=0.25";
  cases[3].first.logit_bias = {{3, 1.0}, {4, -1.0}}, cases[3].second = "logit_bias with 2 entries";
  cases[4].first.min_tokens = 2, cases[4].second = "min_tokens=2";
  cases[5].first.logprobs = 0, cases[5].second = "logprobs=0";
  for (const auto& [setting, named] : cases) {
    INFO(named);
    SamplingHead head = make_head(3);
    head.set_row(0, Sampling{}, {}, {});
    head.set_row(1, Sampling{}, {}, {});
    head.set_row(2, setting, {}, {});
    const DraftSet d = drafts_of({{1}, {2}, {3}});
    require_error([&] { head.check_verify(1, d, {true, true, true}); }, {"row 2 has " + named});
    head.check_verify(1, d, {true, true, false});  // row 2 does not take: accepted
  }
}

TEST_CASE("verify_all verifies what verify verifies, from the pass's ids and positions",
          "[sampling]") {
  const int64_t b = 3, k = 3;
  SamplingHead one = make_head(b), all = make_head(b);
  std::vector<Sampling> rows(3);
  rows[1].temperature = 0.9, rows[1].top_k = 8;
  rows[2].temperature = 1.2, rows[2].top_p = 0.9, rows[2].min_p = 0.02;
  for (int64_t r = 0; r < b; ++r) {
    rows[static_cast<size_t>(r)].seed = 31 + static_cast<uint64_t>(r);
    one.set_row(r, rows[static_cast<size_t>(r)], {}, {});
    all.set_row(r, rows[static_cast<size_t>(r)], {}, {});
  }
  at::manual_seed(8);
  int64_t accepted = 0;
  for (int step = 0; step < 20; ++step) {
    const at::Tensor logits = at::randn({b, k + 1, kVocab}) * 3;
    const at::Tensor best = logits.argmax(-1);
    // Column 0 is the last token; drafts at columns 1.. with positions >= 0.
    at::Tensor ids = at::zeros({b, k + 1}, at::kLong);
    at::Tensor positions = at::full({b, k + 1}, -1, at::kLong);
    positions.select(1, 0).fill_(9);
    DraftSet drafts;
    drafts.ids.resize(static_cast<size_t>(b));
    const std::vector<int64_t> counts = {3, 2, step % 4};
    for (int64_t r = 0; r < b; ++r) {
      for (int64_t t = 0; t < counts[static_cast<size_t>(r)]; ++t) {
        const int64_t argmax = best[r][t].item<int64_t>();
        const int64_t id = (step + t + r) % 5 == 0 ? (argmax + 1) % kVocab : argmax;
        drafts.ids[static_cast<size_t>(r)].push_back(id);
        ids[r][t + 1] = id;
        positions[r][t + 1] = 10 + t;
      }
    }
    const std::vector<bool> takes = {true, step % 3 != 0, true};
    one.verify(logits, drafts, takes);
    all.verify_all(logits, ids, positions,
                   at::tensor(std::vector<int64_t>(takes.begin(), takes.end())), at::Tensor());
    const auto a = one.fetch(b), c = all.fetch(b);
    for (size_t r = 0; r < 3; ++r) {
      INFO("step " << step << ", row " << r);
      CHECK(a[r].token == c[r].token);
      CHECK(a[r].accepted == c[r].accepted);
      accepted += a[r].accepted;
    }
  }
  CHECK(accepted > 10);  // the drafts were not all rejected at once
  require_error(
      [&] {
        all.verify_all(at::zeros({b, k + 1, kVocab}), at::zeros({b, k}, at::kLong),
                       at::zeros({b, k}, at::kLong), at::ones({b}, at::kLong), at::Tensor());
      },
      {"ids, positions", "int64 [3, 4]", "[3, 3]"});
}

TEST_CASE("draft draws from each row's distribution by draw index and changes no state",
          "[sampling]") {
  SamplingHead head = make_head(2), fresh = make_head(2);
  Sampling greedy, sampled;
  sampled.temperature = 1.0, sampled.top_k = 4, sampled.seed = 5;
  for (SamplingHead* h : {&head, &fresh}) {
    h->set_row(0, greedy, {}, {});
    h->set_row(1, sampled, {}, {});
  }
  at::manual_seed(9);
  const at::Tensor logits = at::randn({2, kVocab});
  const auto [ids, q] = head.draft(logits, 0);
  CHECK(ids.scalar_type() == at::kLong);
  CHECK(ids.sizes() == at::IntArrayRef({2}));
  CHECK(q.scalar_type() == at::kFloat);
  CHECK(q.sizes() == at::IntArrayRef({2, kVocab}));
  CHECK(at::allclose(q, head.probabilities(logits)));
  const int64_t argmax = logits[0].argmax().item<int64_t>();
  CHECK(ids[0].item<int64_t>() == argmax);  // a greedy row's q is a point mass
  CHECK(q[0][argmax].item<float>() == 1.0f);
  CHECK(q[1].gt(0).sum().item<int64_t>() == 4);
  CHECK(head.draft(logits, 0).first.equal(ids));  // the same i draws the same
  // Over draft indices the sampled row's draws follow its q.
  at::Tensor seen = at::zeros({kVocab});
  int64_t greedy_other = 0;
  for (int64_t i = 0; i < 3000; ++i) {
    const at::Tensor d = head.draft(logits, i).first;
    greedy_other += d[0].item<int64_t>() != argmax;
    seen[d[1].item<int64_t>()] += 1;
  }
  CHECK(greedy_other == 0);
  CHECK((seen / 3000 - q[1]).abs().max().item<double>() < 0.03);
  // No state changed: a pick now is a fresh head's pick.
  head.pick(logits, {true, true});
  fresh.pick(logits, {true, true});
  CHECK(head.fetch(2)[1].token == fresh.fetch(2)[1].token);
}

TEST_CASE("copy_picks writes rows' latest picked ids into a tensor on the head's device",
          "[sampling]") {
  SamplingHead head = make_head(3);
  for (int64_t r = 0; r < 3; ++r) head.set_row(r, Sampling(), {}, {});
  head.pick(preferring({4, 9, 2}), {true, true, true});
  at::Tensor ids = at::full({3}, -1, at::kLong);
  head.copy_picks(ids);
  CHECK(ids.equal(at::tensor({int64_t{4}, int64_t{9}, int64_t{2}})));
  // Rows [0, b) for b = ids.size(0); a row that did not take keeps its pick.
  head.pick(preferring({7, 8, 6}), {false, true, true});
  at::Tensor two = at::full({2}, -1, at::kLong);
  head.copy_picks(two);
  CHECK(two.equal(at::tensor({int64_t{4}, int64_t{8}})));
  require_error([&] { head.copy_picks(at::zeros({3}, at::kInt)); }, {"ids", "int64", "Int"});
  require_error([&] { head.copy_picks(at::zeros({4}, at::kLong)); }, {"ids", "b <= 3", "[4]"});
  // A large vocabulary's ids come back exact.
  SamplingHead wide = make_head(1, 50000);
  wide.set_row(0, Sampling(), {}, {});
  at::Tensor x = at::zeros({1, 50000});
  x[0][49999] = 1.0f;
  wide.pick(x, {true});
  at::Tensor id = at::zeros({1}, at::kLong);
  wide.copy_picks(id);
  CHECK(id.item<int64_t>() == 49999);
}
