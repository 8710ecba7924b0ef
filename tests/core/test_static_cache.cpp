// StaticCache: the specification of full-attention caching.

#include "support.hpp"

using namespace statickv;
using namespace statickv::test;

namespace {

// Feeds whole sequences through a cache in a prefill chunk then decode steps
// and returns every step's attention output concatenated along q, for one
// layer, computed with `attend` (the fused or the reference kernel).
template <typename Attend>
at::Tensor run_through_cache(Cache& cache, int64_t live_batch, const at::Tensor& q,
                             const at::Tensor& k, const at::Tensor& v, int64_t prefill,
                             bool follow_length, Attend attend) {
  const int64_t total = q.size(2);
  std::vector<at::Tensor> outputs;
  int64_t start = 0;
  while (start < total) {
    const int64_t len = start == 0 ? prefill : 1;
    const int64_t attend_len = follow_length ? start + len : -1;
    StepPlan step = cache.prepare(arange_positions(start, len), live_batch, attend_len);
    at::Tensor out;
    for (int64_t layer = 0; layer < cache.num_layers(); ++layer) {
      // Every layer gets its own data (a scaled copy) so layers cannot alias.
      const double s = 1.0 + static_cast<double>(layer);
      KV kv = cache.update(layer, k.narrow(2, start, len).mul(s).to(cache.config().dtype),
                           v.narrow(2, start, len).mul(s).to(cache.config().dtype), step);
      if (layer == 1) {
        out = attend(q.narrow(2, start, len).to(cache.config().dtype), kv.keys, kv.values,
                     step.mask(layer));
      }
    }
    outputs.push_back(out);
    start += len;
  }
  return at::cat(outputs, 2);
}

}  // namespace

TEST_CASE("decode through the cache equals attention recomputed without a cache",
          "[static][equivalence]") {
  struct Case {
    int64_t max_batch, live_batch, prefill, total;
    bool follow_length;
  };
  const std::vector<Case> cases = {
      {1, 1, 1, 6, false},   {4, 4, 5, 12, false}, {8, 3, 7, 16, true},
      {16, 1, 16, 20, true}, {2, 2, 3, 24, true},
  };
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    for (const Case& c : cases) {
      at::manual_seed(7);
      const at::Tensor q = at::randn({c.live_batch, kHeads, c.total, 8});
      const at::Tensor k = at::randn({c.live_batch, 2, c.total, 8});
      const at::Tensor v = at::randn({c.live_batch, 2, c.total, 8});
      // Layer 1 stores 2x the data (see run_through_cache).
      const at::Tensor expected =
          recompute(q.to(dtype).to(at::kFloat), k.mul(2).to(dtype).to(at::kFloat),
                    v.mul(2).to(dtype).to(at::kFloat));
      StaticCache cache(ConfigBuilder().max_batch(c.max_batch).max_len(32).dtype(dtype));
      const at::Tensor fused = run_through_cache(cache, c.live_batch, q, k, v, c.prefill,
                                                 c.follow_length, sdpa_attention);
      cache.reset();
      const at::Tensor plain = run_through_cache(cache, c.live_batch, q, k, v, c.prefill,
                                                 c.follow_length, reference_attention);
      INFO("dtype " << dtype << " max_batch " << c.max_batch << " live " << c.live_batch
                    << " prefill " << c.prefill << " follow_length " << c.follow_length);
      INFO("max diff fused " << max_diff(fused, expected) << " plain "
                             << max_diff(plain, expected));
      CHECK(close(fused, expected, tolerance(dtype)));
      CHECK(close(plain, expected, tolerance(dtype)));
    }
  }
}

TEST_CASE("a max_batch 16 cache serving live batch b equals a cache of exactly b rows",
          "[static][batch-prefix]") {
  at::manual_seed(11);
  const int64_t total = 9;
  const at::Tensor q = at::randn({16, kHeads, total, 8});
  const at::Tensor k = at::randn({16, 2, total, 8});
  const at::Tensor v = at::randn({16, 2, total, 8});
  StaticCache big(ConfigBuilder().max_batch(16).max_len(16));
  for (int64_t b = 1; b <= 16; ++b) {
    big.reset();
    StaticCache exact(ConfigBuilder().max_batch(b).max_len(16));
    const auto slice = [&](const at::Tensor& t) { return t.narrow(0, 0, b); };
    const at::Tensor served = run_through_cache(big, b, slice(q), slice(k), slice(v),
                                                /*prefill=*/4, false, sdpa_attention);
    const at::Tensor alone = run_through_cache(exact, b, slice(q), slice(k), slice(v),
                                               /*prefill=*/4, false, sdpa_attention);
    INFO("live batch " << b << " max diff " << max_diff(served, alone));
    CHECK(close(served, alone, 1e-6));
  }
}

TEST_CASE("update returns batch-prefix views that share the cache's storage",
          "[static][batch-prefix]") {
  StaticCache cache(ConfigBuilder().max_batch(8).max_len(16));
  StepPlan step = cache.prepare(arange_positions(0, 3), /*live_batch=*/5, /*attend_len=*/10);
  const at::Tensor key = at::randn({5, 2, 3, 8});
  KV kv = cache.update(/*layer=*/0, key, key.neg(), step);
  CHECK(kv.keys.sizes() == at::IntArrayRef({5, 2, 10, 8}));
  CHECK(kv.keys.data_ptr() == cache.keys(0).data_ptr());
  CHECK(kv.values.data_ptr() == cache.values(0).data_ptr());
  CHECK(step.mask(0).sizes() == at::IntArrayRef({5, 1, 3, 10}));
  CHECK(at::equal(kv.keys.narrow(2, 0, 3), key));
  CHECK(at::equal(kv.values.narrow(2, 0, 3), key.neg()));
  // The mask is causal over the written positions and empty past them.
  const at::Tensor expected = bools({1, 0, 0, 1, 1, 0, 1, 1, 1}).view({3, 3});
  CHECK(at::equal(step.mask(0)[4][0].narrow(1, 0, 3), expected));
  CHECK_FALSE(step.mask(0).narrow(3, 3, 7).any().item<bool>());
}

TEST_CASE("no buffer address changes across updates, reset and row operations",
          "[static][addresses]") {
  const KvStorage storage = GENERATE(from_range(all_storages()));
  INFO("kv_storage " << storage);
  StaticCache cache(ConfigBuilder().max_batch(4).max_len(16).kv_storage(storage));
  const auto before = addresses(cache);
  StepPlan step = cache.prepare(arange_positions(0, 4), 4);
  for (int64_t l = 0; l < 2; ++l) {
    cache.update(l, at::randn({4, 2, 4, 8}), at::randn({4, 2, 4, 8}), step);
  }
  CHECK(addresses(cache) == before);
  step = cache.prepare(positions(2, {4, 5, -1, 4}), 2);
  cache.update(0, at::randn({2, 2, 2, 8}), at::randn({2, 2, 2, 8}), step);
  CHECK(addresses(cache) == before);
  cache.copy_row(0, 3);
  CHECK(addresses(cache) == before);
  cache.reorder(positions({3, 2, 1, 0}));
  CHECK(addresses(cache) == before);
  cache.reset_rows(positions({1, 2}));
  CHECK(addresses(cache) == before);
  cache.rollback(std::vector<int64_t>{1});
  CHECK(addresses(cache) == before);
  cache.reset();
  CHECK(addresses(cache) == before);
}

TEST_CASE("ragged per-row positions write each row at its own positions", "[static][ragged]") {
  StaticCache cache(ConfigBuilder().max_batch(3).max_len(16));
  ReferenceLayer reference(3, 2, 16, 8, /*window=*/0);
  at::manual_seed(3);
  // Rows at different lengths: prefill 5, 2 and 7 tokens (left-aligned,
  // padded with -1), then decode each row at its own next position.
  at::Tensor pos = positions(3, {0, 1, 2,  3,  4,  -1, -1,  //
                                 0, 1, -1, -1, -1, -1, -1,  //
                                 0, 1, 2,  3,  4,  5,  6});
  for (int step_index = 0; step_index < 4; ++step_index) {
    const int64_t q = pos.size(1);
    const at::Tensor key = at::randn({3, 2, q, 8});
    const at::Tensor value = at::randn({3, 2, q, 8});
    const at::Tensor query = at::randn({3, kHeads, q, 8});
    StepPlan step = cache.prepare(pos, 3);
    KV kv = cache.update(0, key, value, step);
    reference.write(pos, key, value);
    const at::Tensor got = reference_attention(query, kv.keys, kv.values, step.mask(0));
    const at::Tensor want = reference.attend(query, pos);
    INFO("step " << step_index << " max diff " << max_diff(got, want));
    CHECK(close(got, want, 1e-5));
    pos = cache.seq_lengths().view({3, 1}).clone();  // next token of every row
  }
  CHECK(at::equal(cache.seq_lengths(), positions({8, 5, 10})));
}

TEST_CASE("padded tokens and padded rows never change another row or a live entry",
          "[static][padding]") {
  StaticCache cache(ConfigBuilder().max_batch(4).max_len(8));
  StepPlan step = cache.prepare(arange_positions(0, 4), 4);
  for (int64_t l = 0; l < 2; ++l) {
    cache.update(l, at::randn({4, 2, 4, 8}), at::randn({4, 2, 4, 8}), step);
  }
  const Snapshot before(cache);
  // Row 0 writes position 4 and one padded token; row 1 is a padded row;
  // row 2 rewrites nothing but pads; rows 3 is outside the live batch.
  step = cache.prepare(positions(3, {4, -1, -1, -1, -5, -2}), 3);
  const at::Tensor key = at::full({3, 2, 2, 8}, 42.0);
  for (int64_t l = 0; l < 2; ++l) cache.update(l, key, key, step);
  for (int64_t l = 0; l < 2; ++l) {
    const auto live = [](const at::Tensor& t) { return t.narrow(2, 0, 8); };  // no scratch
    // Row 0: only slot 4 changed.
    CHECK(
        at::equal(live(cache.keys(l))[0].narrow(1, 0, 4), live(before.keys[l])[0].narrow(1, 0, 4)));
    CHECK(at::equal(cache.keys(l)[0].select(1, 4), at::full({2, 8}, 42.0)));
    CHECK(
        at::equal(live(cache.keys(l))[0].narrow(1, 5, 3), live(before.keys[l])[0].narrow(1, 5, 3)));
    // Rows 1..3: every visible slot unchanged.
    CHECK(at::equal(live(cache.keys(l)).narrow(0, 1, 3), live(before.keys[l]).narrow(0, 1, 3)));
    CHECK(at::equal(live(cache.values(l)).narrow(0, 1, 3), live(before.values[l]).narrow(0, 1, 3)));
    CHECK(at::equal(cache.slot_positions(l).narrow(0, 1, 3),
                    before.slot_positions[l].narrow(0, 1, 3)));
  }
  CHECK(at::equal(cache.seq_lengths(), positions({5, 4, 4, 4})));
  // Padded queries attend to nothing, and the reference gives them zeros.
  CHECK_FALSE(step.mask(0)[1].any().item<bool>());
  CHECK_FALSE(step.mask(0)[0][0][1].any().item<bool>());
  const at::Tensor out = reference_attention(
      at::randn({3, kHeads, 2, 8}), cache.keys(0).narrow(0, 0, 3).narrow(2, 0, 8),
      cache.values(0).narrow(0, 0, 3).narrow(2, 0, 8), step.mask(0));
  CHECK(at::isfinite(out).all().item<bool>());
  CHECK(at::equal(out[1], at::zeros_like(out[1])));
}

TEST_CASE("device-resident positions past max_len are routed to the scratch slot",
          "[static][padding]") {
  // check_position_values=false makes a CPU cache behave as a CUDA cache
  // does: positions are never read on the host.
  StaticCache cache(ConfigBuilder().max_batch(2).max_len(4).check_position_values(false));
  StepPlan step = cache.prepare(arange_positions(0, 4), 2);
  for (int64_t l = 0; l < 2; ++l) {
    cache.update(l, at::randn({2, 2, 4, 8}), at::randn({2, 2, 4, 8}), step);
  }
  const Snapshot before(cache);
  step = cache.prepare(positions({4, 9}), 2);
  cache.update(0, at::full({2, 2, 2, 8}, 5.0), at::full({2, 2, 2, 8}, 5.0), step);
  CHECK(at::equal(cache.keys(0).narrow(2, 0, 4), before.keys[0].narrow(2, 0, 4)));
  CHECK(at::equal(cache.slot_positions(0), before.slot_positions[0]));
  CHECK(at::equal(step.write_slots(0), positions({4, 4})));  // the scratch slot
  CHECK_FALSE(step.mask(0).any().item<bool>());
  CHECK(at::equal(cache.seq_lengths(), positions({4, 4})));
}

TEST_CASE("duplicate positions in one step keep only the later token", "[static][padding]") {
  StaticCache cache(ConfigBuilder().max_batch(1).max_len(8));
  StepPlan step = cache.prepare(positions({2, 3, 2}), 1);
  const at::Tensor key = at::arange(3, f32()).view({1, 1, 3, 1}).expand({1, 2, 3, 8}).contiguous();
  cache.update(0, key, key, step);
  CHECK(at::equal(step.write_slots(0), positions({8, 3, 2})));
  CHECK(at::equal(cache.keys(0)[0][0].select(1, 0).narrow(0, 2, 2), at::tensor({2.0f, 1.0f})));
}

TEST_CASE("reset_rows empties exactly the named rows", "[static][rows]") {
  StaticCache cache(ConfigBuilder().max_batch(3).max_len(8));
  StepPlan step = cache.prepare(arange_positions(0, 3), 3);
  for (int64_t l = 0; l < 2; ++l) {
    cache.update(l, at::randn({3, 2, 3, 8}), at::randn({3, 2, 3, 8}), step);
  }
  const Snapshot before(cache);
  cache.reset_rows(positions({1}));
  CHECK(at::equal(cache.seq_lengths(), positions({3, 0, 3})));
  for (int64_t l = 0; l < 2; ++l) {
    CHECK(at::equal(cache.slot_positions(l)[1], at::full({8}, -1, i64())));
    CHECK(at::equal(cache.slot_positions(l)[0], before.slot_positions[l][0]));
    CHECK(at::equal(cache.slot_positions(l)[2], before.slot_positions[l][2]));
  }
  // A new step for the reset row sees only what it writes now.
  step = cache.prepare(positions(3, {3, 0, 3}), 3);
  CHECK(at::equal(step.mask(0)[1][0][0].narrow(0, 0, 4), bools({1, 0, 0, 0})));
  CHECK(at::equal(step.mask(0)[0][0][0].narrow(0, 0, 4), bools({1, 1, 1, 1})));
}

TEST_CASE("copy_row forks a prefilled row: both continue identically", "[static][rows]") {
  StaticCache cache(ConfigBuilder().max_batch(2).max_len(8));
  at::manual_seed(5);
  const at::Tensor key = at::randn({1, 2, 4, 8});
  StepPlan step = cache.prepare(arange_positions(0, 4), 1);
  for (int64_t l = 0; l < 2; ++l) cache.update(l, key, key, step);
  cache.copy_row(/*src=*/0, /*dst=*/1);
  const at::Tensor next = at::randn({1, 2, 1, 8}).expand({2, 2, 1, 8}).contiguous();
  step = cache.prepare(positions({4}), 2);
  KV kv = cache.update(0, next, next, step);
  const at::Tensor query = at::randn({1, kHeads, 1, 8}).expand({2, kHeads, 1, 8});
  const at::Tensor out = sdpa_attention(query, kv.keys, kv.values, step.mask(0));
  CHECK(at::equal(out[0], out[1]));
  CHECK(at::equal(cache.seq_lengths(), positions({5, 5})));
}

TEST_CASE("reorder gathers rows in place for beam search", "[static][rows]") {
  StaticCache cache(ConfigBuilder().max_batch(4).max_len(8));
  // Row r holds the value r at positions 0..r.
  at::Tensor pos = positions(4, {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3});
  pos = at::where(pos.le(at::arange(4, i64()).view({4, 1})), pos, -1);
  const at::Tensor data = at::arange(4, f32()).view({4, 1, 1, 1}).expand({4, 2, 4, 8}).contiguous();
  StepPlan step = cache.prepare(pos, 4);
  for (int64_t l = 0; l < 2; ++l) cache.update(l, data, data, step);
  const Snapshot before(cache);
  cache.reorder(positions({2, 2, 0}));  // rows 0,1 <- old row 2; row 2 <- old row 0
  for (int64_t l = 0; l < 2; ++l) {
    CHECK(at::equal(cache.keys(l)[0], before.keys[l][2]));
    CHECK(at::equal(cache.keys(l)[1], before.keys[l][2]));
    CHECK(at::equal(cache.values(l)[2], before.values[l][0]));
    CHECK(at::equal(cache.keys(l)[3], before.keys[l][3]));
    CHECK(at::equal(cache.slot_positions(l)[1], before.slot_positions[l][2]));
  }
  CHECK(at::equal(cache.seq_lengths(), positions({3, 3, 1, 4})));
}

TEST_CASE("a step made before a row operation is refused as stale", "[static][rows]") {
  StaticCache cache(ConfigBuilder().max_batch(2).max_len(8));
  StepPlan step = cache.prepare(positions({0}), 2);
  cache.reset_rows(positions({1}));
  const Snapshot before(cache);
  require_error(
      [&] {
        cache.update(0, at::zeros({2, 2, 1, 8}), at::zeros({2, 2, 1, 8}), step);
      },
      {"step", "stale"});
  CHECK(before.same_as(cache));
}

TEST_CASE("memory_bytes counts buffers with their scratch slot and the bookkeeping",
          "[static][memory]") {
  StaticCache cache(ConfigBuilder().max_batch(2).max_len(8));
  const int64_t buffers = 2 /*layers*/ * 2 /*k,v*/ * 2 * 2 * 9 * 8 * 4 /*bytes*/;
  const int64_t bookkeeping =
      2 * 9 * 8 /*slot_positions*/ + 2 * 8 /*seq_lengths*/ + 2 * 2 * 8 /*row_head_base*/;
  CHECK(cache.memory_bytes() == buffers + bookkeeping);
}
