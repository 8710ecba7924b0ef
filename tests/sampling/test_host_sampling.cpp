// host_sampling.hpp: the draws' host mirrors (draw_key, sampling_noise:
// integer functions of seed, draw index and token id, the same bits on every
// device) and the host sampler (host_sampling_probs: temperature, then
// transformers' top-k then top-p; host_sample_tokens: a seeded draw from
// it), the oracle the sampling head's tests (test_head.cpp) hold it to.

#include "support.hpp"

#include <statickv/sampling/host_sampling.hpp>

#include <ATen/CPUGeneratorImpl.h>

#include <cmath>

using namespace statickv::reference;

namespace {

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

/// Probabilities [1, n] as log-probabilities: softmax gives them back.
at::Tensor logits_of(std::vector<float> probs) { return at::tensor(probs).log().unsqueeze(0); }

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

TEST_CASE("draw_key advances by the golden-ratio step per draw and depends on the whole seed",
          "[sampling][host]") {
  for (const uint64_t seed : {uint64_t{0}, uint64_t{1}, uint64_t{0xfedcba9876543210ULL}}) {
    const int64_t first = draw_key(seed, 0);
    CHECK(first >= 0);
    CHECK(first < (int64_t{1} << 32));
    for (const int64_t index : {1, 2, 1000}) {
      CHECK(draw_key(seed, index) == ((first + index * 0x9e3779b1LL) & 0xffffffffLL));
    }
  }
  // The seed's high half counts: seeds that differ only there key differently.
  CHECK(draw_key(5, 0) != draw_key(5 + (uint64_t{1} << 32), 0));
  CHECK(draw_key(5, 0) != draw_key(6, 0));
}

TEST_CASE("sampling_noise gives float32 noise per id, one key per row", "[sampling][host]") {
  const at::Tensor keys = at::tensor({draw_key(1, 0), draw_key(2, 0), draw_key(3, 0)});
  const at::Tensor ids = at::arange(40, at::kLong).view({2, 20}).repeat({2, 1}).narrow(0, 0, 3);
  const at::Tensor g = sampling_noise(keys, ids);
  CHECK(g.scalar_type() == at::kFloat);
  CHECK(g.sizes() == at::IntArrayRef({3, 20}));
  CHECK(at::isfinite(g).all().item<bool>());
  // Rows 0 and 2 draw for the same ids with different keys; calling again
  // with the same keys and ids gives the same bits.
  CHECK(ids[0].equal(ids[2]));
  CHECK_FALSE(g[0].equal(g[2]));
  CHECK(sampling_noise(keys, ids).equal(g));
}

TEST_CASE("host_sampling_probs is softmax of logits over temperature after top-k then top-p",
          "[sampling][host]") {
  const at::Tensor x = logits_of({0.5f, 0.25f, 0.15f, 0.1f});
  const auto probs = [&](double t, int64_t k, double p) {
    const at::Tensor out = host_sampling_probs(x, t, k, p);
    CHECK(out.scalar_type() == at::kFloat);
    CHECK(out.device().is_cpu());
    CHECK(out.sizes() == x.sizes());
    return out[0];
  };
  const auto near = [](const at::Tensor& a, const at::Tensor& want) {
    INFO("got " << a << ", want " << want);
    return at::allclose(a, want, 1e-5, 1e-6);
  };
  const auto t = [](std::vector<float> values) { return at::tensor(values); };
  CHECK(near(probs(1.0, 0, 1.0), t({0.5f, 0.25f, 0.15f, 0.1f})));  // no filter
  CHECK(near(probs(2.0, 0, 1.0), x[0].div(2).softmax(-1)));
  CHECK(near(probs(1.0, 2, 1.0), t({2 / 3.f, 1 / 3.f, 0, 0})));    // the two most likely
  CHECK(near(probs(1.0, 4, 1.0), t({0.5f, 0.25f, 0.15f, 0.1f})));  // k = vocab: none dropped
  // top-p keeps the most likely tokens until their mass reaches p.
  CHECK(near(probs(1.0, 0, 0.7), t({2 / 3.f, 1 / 3.f, 0, 0})));
  CHECK(near(probs(1.0, 0, 0.8), t({0.5f / 0.9f, 0.25f / 0.9f, 0.15f / 0.9f, 0})));
  CHECK(near(probs(1.0, 0, 0.1), t({1, 0, 0, 0})));  // the top token always stays
  // top-k first, then top-p over what top-k kept: of 0.5 / 0.9, 0.25 / 0.9
  // and 0.15 / 0.9, the first two reach 0.6.
  CHECK(near(probs(1.0, 3, 0.6), t({0.5f / 0.75f, 0.25f / 0.75f, 0, 0})));
}

TEST_CASE("host_sampling_probs filters each row of any leading shape alone", "[sampling][host]") {
  at::manual_seed(2);
  const at::Tensor x = at::randn({2, 3, 10});
  const at::Tensor p = host_sampling_probs(x, 0.8, 4, 0.9);
  REQUIRE(p.sizes() == x.sizes());
  for (int64_t i = 0; i < 2; ++i) {
    for (int64_t j = 0; j < 3; ++j) {
      CHECK(p[i][j].equal(host_sampling_probs(x[i][j], 0.8, 4, 0.9)));
      CHECK(p[i][j].gt(0).sum().item<int64_t>() <= 4);
    }
  }
  CHECK(at::allclose(p.sum(-1), at::ones({2, 3}), 1e-5, 1e-6));
}

TEST_CASE("host_sample_tokens draws one token per row from host_sampling_probs with the generator",
          "[sampling][host]") {
  at::Tensor x = at::cat({logits_of({0.6f, 0.3f, 0.1f}), logits_of({0.1f, 0.2f, 0.7f})});
  const auto draw = [&](uint64_t seed, int64_t k) {
    at::Generator g = at::detail::createCPUGenerator(seed);
    return host_sample_tokens(x, 1.0, k, 1.0, g);
  };
  const at::Tensor first = draw(7, 0);
  CHECK(first.scalar_type() == at::kLong);
  CHECK(first.device().is_cpu());
  CHECK(first.sizes() == at::IntArrayRef({2}));
  CHECK(draw(7, 0).equal(first));  // the same seed draws the same tokens
  // top_k 1 leaves each row's argmax alone.
  for (uint64_t seed = 0; seed < 20; ++seed) CHECK(draw(seed, 1).equal(at::tensor({0L, 2L})));
  // One generator over many draws: the frequencies are the probabilities.
  at::Generator g = at::detail::createCPUGenerator(11);
  at::Tensor counts = at::zeros({2, 3});
  const int n = 4000;
  for (int i = 0; i < n; ++i) {
    const at::Tensor t = host_sample_tokens(x, 1.0, 0, 1.0, g);
    counts[0][t[0].item<int64_t>()] += 1;
    counts[1][t[1].item<int64_t>()] += 1;
  }
  CHECK((counts / n - host_sampling_probs(x, 1.0, 0, 1.0)).abs().max().item<double>() < 0.03);
}
