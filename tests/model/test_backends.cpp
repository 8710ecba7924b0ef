// The attention backends (reference/model/include/statickv/model/backends.hpp):
// a CacheBackend over a StaticCache or HybridCache and the DynamicCache
// baseline give the same attention on the same passes, whole or token by
// token, with either kernel, soft-capped or not, rotated by attend_rotary on
// the plain or the fused path; the decode-path names; and what each refuses.

#include "support.hpp"

#include <statickv/attention.hpp>
#include <statickv/model/backends.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/rotary.hpp>

#include <vector>

using namespace statickv;
using namespace statickv::reference;
using namespace statickv::test;

namespace {

// One pass's inputs: positions [b, q] and, per layer, a query [b, 4, q, 16]
// and key/value [b, 2, q, 16] (named_config("tiny")'s heads).
struct Pass {
  at::Tensor positions;
  std::vector<at::Tensor> query, key, value;
};

Pass random_pass(const ModelConfig& m, at::Tensor positions) {
  Pass p;
  const int64_t b = positions.size(0), q = positions.size(1), d = m.head_dim;
  for (int64_t l = 0; l < m.num_hidden_layers; ++l) {
    p.query.push_back(at::randn({b, m.num_attention_heads, q, d}));
    p.key.push_back(at::randn({b, m.num_key_value_heads, q, d}));
    p.value.push_back(at::randn({b, m.num_key_value_heads, q, d}));
  }
  p.positions = std::move(positions);
  return p;
}

// Two rows: a 6-token prefill, then `decode` single-token steps.
std::vector<Pass> prefill_then_decode(const ModelConfig& m, int64_t decode, uint64_t seed) {
  at::manual_seed(seed);
  std::vector<Pass> passes = {random_pass(m, positions(2, {0, 1, 2, 3, 4, 5, 0, 1, 2, 3, 4, 5}))};
  for (int64_t t = 6; t < 6 + decode; ++t) passes.push_back(random_pass(m, positions(2, {t, t})));
  return passes;
}

// Every pass's attention output of every layer, in order.
std::vector<at::Tensor> run(AttentionBackend& backend, const std::vector<Pass>& passes) {
  std::vector<at::Tensor> out;
  for (const Pass& p : passes) {
    backend.begin(p.positions, -1);
    for (size_t l = 0; l < p.query.size(); ++l) {
      out.push_back(backend.attend(static_cast<int64_t>(l), p.query[l], p.key[l], p.value[l]));
    }
  }
  return out;
}

// A cache of `m`'s geometry: 2 rows of 32 positions, its window.
CacheConfig cache_of(const ModelConfig& m) {
  ConfigBuilder b;
  b.num_kv_heads(m.num_key_value_heads).head_dim(m.head_dim).max_batch(2).max_len(32);
  if (m.has_sliding()) b.layer_types(m.layer_types).sliding_window(m.sliding_window);
  return b.num_layers(m.num_hidden_layers);
}

void require_all_close(const std::vector<at::Tensor>& got, const std::vector<at::Tensor>& want,
                       double tol) {
  REQUIRE(got.size() == want.size());
  for (size_t i = 0; i < got.size(); ++i) {
    INFO("output " << i << " max diff " << max_diff(got[i], want[i]));
    CHECK(close(got[i], want[i], tol));
  }
}

}  // namespace

TEST_CASE("CacheBackend and DynamicCache attend alike over full and sliding layers, either kernel",
          "[backends]") {
  for (const char* name : {"tiny", "tiny-mistral"}) {
    INFO(name);
    const ModelConfig m = named_config(name);
    const std::vector<Pass> passes = prefill_then_decode(m, 8, 21);  // past the window of 8
    DynamicCache dynamic(m);
    const std::vector<at::Tensor> want = run(dynamic, passes);
    for (AttentionKernel kernel : {AttentionKernel::kSdpa, AttentionKernel::kReference}) {
      const std::unique_ptr<Cache> cache = make_cache(cache_of(m));
      CacheBackend backend(*cache, kernel);
      CHECK(backend.path() == DecodePath::kPlain);
      require_all_close(run(backend, passes), want, 1e-5);
    }
    DynamicCache reference(m, AttentionKernel::kReference);
    require_all_close(run(reference, passes), want, 1e-5);
  }
}

TEST_CASE("a fresh DynamicCache fed a sequence in one pass equals it fed token by token",
          "[backends]") {
  const ModelConfig m = named_config("tiny-mistral");
  at::manual_seed(22);
  const Pass whole = random_pass(m, positions(1, {0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}));
  DynamicCache once(m);
  const std::vector<at::Tensor> all = run(once, {whole});
  DynamicCache stepwise(m);
  for (int64_t t = 0; t < 11; ++t) {
    Pass one;
    one.positions = whole.positions.narrow(1, t, 1);
    for (size_t l = 0; l < 2; ++l) {
      one.query.push_back(whole.query[l].narrow(2, t, 1));
      one.key.push_back(whole.key[l].narrow(2, t, 1));
      one.value.push_back(whole.value[l].narrow(2, t, 1));
    }
    const std::vector<at::Tensor> step = run(stepwise, {one});
    for (size_t l = 0; l < 2; ++l) {
      INFO("token " << t << " layer " << l);
      CHECK(close(step[l], all[l].narrow(2, t, 1), 1e-5));
    }
  }
}

TEST_CASE("DynamicCache's memory_bytes counts what it holds and reset frees it all", "[backends]") {
  const ModelConfig m = named_config("tiny");
  const std::vector<Pass> passes = prefill_then_decode(m, 3, 23);
  DynamicCache cache(m);
  CHECK(cache.memory_bytes() == 0);
  const std::vector<at::Tensor> first = run(cache, passes);
  // 9 tokens of 2 rows: int64 positions, and per layer float keys and values.
  const int64_t tokens = 2 * 9;
  CHECK(cache.memory_bytes() == tokens * 8 + 2 * 2 * tokens * m.num_key_value_heads * 16 * 4);
  cache.reset();
  CHECK(cache.memory_bytes() == 0);
  // After reset it is a fresh cache: a new row count is taken, the passes replay alike.
  CHECK_NOTHROW(cache.begin(positions(3, {0, 0, 0}), -1));
  cache.reset();
  require_all_close(run(cache, passes), first, 0);
}

TEST_CASE("attend_rotary rotates queries and keys then attends, on the plain and the fused path",
          "[backends]") {
  const ModelConfig m = named_config("tiny");
  const std::vector<Pass> passes = prefill_then_decode(m, 3, 24);
  std::vector<std::pair<at::Tensor, at::Tensor>> trig;  // [b, 1, q, d] per pass
  for (const Pass& p : passes) {
    const at::Tensor angle =
        p.positions.to(at::kFloat).unsqueeze(1).unsqueeze(-1).mul(at::linspace(0.01, 1.0, 16));
    trig.emplace_back(angle.cos(), angle.sin());
  }
  const auto run_rotary = [&](AttentionBackend& backend, bool rotary) {
    std::vector<at::Tensor> out;
    for (size_t i = 0; i < passes.size(); ++i) {
      const Pass& p = passes[i];
      const auto& [cos, sin] = trig[i];
      backend.begin(p.positions, -1);
      for (int64_t l = 0; l < 2; ++l) {
        const auto q = p.query[l], k = p.key[l], v = p.value[l];
        out.push_back(
            rotary ? backend.attend_rotary(l, q, k, v, cos, sin)
                   : backend.attend(l, apply_rotary(q, cos, sin), apply_rotary(k, cos, sin), v));
      }
    }
    return out;
  };
  DynamicCache dynamic(m);
  const std::vector<at::Tensor> want = run_rotary(dynamic, false);
  DynamicCache rotated(m);
  require_all_close(run_rotary(rotated, true), want, 0);
  for (DecodePath path : {DecodePath::kPlain, DecodePath::kFused}) {
    INFO(to_string(path));
    StaticCache cache(cache_of(m));
    CacheBackend backend(cache, AttentionKernel::kSdpa, path);
    CHECK(backend.path() == path);
    require_all_close(run_rotary(backend, true), want, 1e-5);
  }
}

TEST_CASE("set_logit_softcap caps every backend's scores as softcapped_attention does",
          "[backends]") {
  const ModelConfig m = named_config("tiny");
  at::manual_seed(25);
  Pass p = random_pass(m, positions(1, {0, 1, 2, 3, 4}));
  for (at::Tensor& q : p.query) q.mul_(8);  // scores well past the cap
  const at::Tensor causal = at::ones({5, 5}, at::kBool).tril().view({1, 1, 5, 5});
  const at::Tensor capped = softcapped_attention(p.query[1], p.key[1], p.value[1], causal, 2.0);
  CHECK_FALSE(close(capped, reference_attention(p.query[1], p.key[1], p.value[1], causal), 1e-3));
  DynamicCache dynamic(m);
  dynamic.set_logit_softcap(2.0);
  CHECK(close(run(dynamic, {p})[1], capped, 1e-5));
  StaticCache cache(cache_of(m));
  CacheBackend backend(cache);  // sdpa chosen: a capped layer runs softcapped_attention
  backend.set_logit_softcap(2.0);
  CHECK(close(run(backend, {p})[1], capped, 1e-5));
  backend.set_logit_softcap(0);
  cache.reset();
  CHECK(close(run(backend, {p})[1], reference_attention(p.query[1], p.key[1], p.value[1], causal),
              1e-5));
}

TEST_CASE("decode paths print and parse as auto, plain and fused, and another name is refused",
          "[backends]") {
  for (DecodePath path : {DecodePath::kAuto, DecodePath::kPlain, DecodePath::kFused}) {
    CHECK(parse_decode_path(to_string(path)) == path);
  }
  CHECK(std::string(to_string(DecodePath::kAuto)) == "auto");
  CHECK(std::string(to_string(DecodePath::kFused)) == "fused");
  require_error([] { parse_decode_path("fast", "--decode-path"); },
                {"--decode-path", "auto, plain or fused", "'fast'"});
  require_error([] { parse_decode_path("Plain"); }, {"path:", "'Plain'"});
}

TEST_CASE("check_tokens takes int64 [b, q] and names what is not", "[backends]") {
  CHECK_NOTHROW(check_tokens("ids", at::zeros({2, 3}, at::kLong)));
  require_error([] { check_tokens("ids", at::zeros({6}, at::kLong)); },
                {"ids", "int64 [b, q]", "[6]"});
  require_error(
      [] {
        check_tokens("positions", at::zeros({2, 3}, at::kInt));
      },
      {"positions", "Long", "Int"});
}

TEST_CASE("the backends refuse auto, attention before begin, and a pass of another batch",
          "[backends]") {
  const ModelConfig m = named_config("tiny");
  StaticCache cache(cache_of(m));
  require_error([&] { (void)CacheBackend(cache, AttentionKernel::kSdpa, DecodePath::kAuto); },
                {"CacheBackend path", "resolve auto", "got auto"});
  const at::Tensor q = at::randn({1, 4, 1, 16}), kv = at::randn({1, 2, 1, 16});
  CacheBackend backend(cache);
  require_error([&] { backend.attend(0, q, kv, kv); }, {"expected begin() before attend()"});
  DynamicCache dynamic(m);
  require_error([&] { dynamic.attend(0, q, kv, kv); }, {"expected begin() before attend()"});
  dynamic.begin(positions(1, {0}), -1);
  require_error([&] { dynamic.attend(2, q, kv, kv); }, {"layer", "[0, 2)", "got 2"});
  require_error(
      [&] {
        dynamic.begin(positions(2, {1, 1}), -1);
      },
      {"DynamicCache.positions", "1 rows", "got 2"});
  require_error([&] { dynamic.begin(positions({1}), -1); }, {"DynamicCache.positions"});
}
