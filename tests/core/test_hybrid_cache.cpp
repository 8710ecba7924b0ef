// HybridCache: sliding-window rings beside full layers, chunked prefill,
// decode far past the window, ragged rows, and a randomized comparison
// against a reference that keeps every token.

#include "support.hpp"

#include <random>

using namespace statickv;
using namespace statickv::test;

namespace {

// [b, H, T, D] gathered at per-row positions [b, q] (padding reads position 0).
at::Tensor gather_positions(const at::Tensor& seq, const at::Tensor& pos) {
  const at::Tensor index = pos.clamp_min(0);
  std::vector<at::Tensor> rows;
  for (int64_t r = 0; r < seq.size(0); ++r) rows.push_back(seq[r].index_select(1, index[r]));
  return at::stack(rows);
}

struct Sequences {
  at::Tensor q, k, v;  // [b, H, T, D] float32
};

Sequences random_sequences(int64_t batch, int64_t total, at::ScalarType dtype) {
  // Rounded through `dtype` so the float32 expectation sees the same inputs.
  auto make = [&](int64_t heads) {
    return at::randn({batch, heads, total, kDim}).to(dtype).to(at::kFloat);
  };
  Sequences s;
  s.q = make(kHeads);
  s.k = make(kKvHeads);
  s.v = make(kKvHeads);
  return s;
}

// Feeds each row's sequence through `cache` (layer 0 sliding, layer 1 full):
// prefill of prompt_lens[r] tokens in chunks of `chunk` positions, then
// `decode` single-token steps, every row at its own positions. Checks every
// step's attention output of both layers against recomputation without a
// cache. Returns the largest difference seen.
double run_and_compare(HybridCache& cache, const Sequences& s,
                       const std::vector<int64_t>& prompt_lens, int64_t chunk, int64_t decode) {
  const int64_t b = static_cast<int64_t>(prompt_lens.size());
  const int64_t window = cache.config().sliding_window;
  const at::ScalarType dtype = cache.config().dtype;
  const at::Tensor expected_sliding = recompute(s.q, s.k, s.v, window);
  const at::Tensor expected_full = recompute(s.q, s.k.mul(2), s.v.mul(2));
  const at::Tensor lens = at::tensor(prompt_lens, i64()).view({b, 1});
  const int64_t longest = *std::max_element(prompt_lens.begin(), prompt_lens.end());
  double worst = 0;

  auto run_step = [&](const at::Tensor& pos) {
    StepPlan step = cache.prepare(pos, b);
    const at::Tensor key = gather_positions(s.k, pos);
    const at::Tensor value = gather_positions(s.v, pos);
    const at::Tensor query = gather_positions(s.q, pos).to(dtype);
    const at::Tensor live = pos.ge(0).view({b, 1, pos.size(1), 1});
    KV slide = cache.update(0, key.to(dtype), value.to(dtype), step);
    KV full = cache.update(1, key.mul(2).to(dtype), value.mul(2).to(dtype), step);
    const at::Tensor got_sliding = sdpa_attention(query, slide.keys, slide.values, step.mask(0));
    const at::Tensor got_full = reference_attention(query, full.keys, full.values, step.mask(1));
    const at::Tensor want_sliding = gather_positions(expected_sliding, pos);
    const at::Tensor want_full = gather_positions(expected_full, pos);
    const at::Tensor zero = at::zeros({}, at::kFloat);
    const double d1 = max_diff(at::where(live, got_sliding.to(at::kFloat), zero),
                               at::where(live, want_sliding, zero));
    const double d2 =
        max_diff(at::where(live, got_full.to(at::kFloat), zero), at::where(live, want_full, zero));
    worst = std::max({worst, d1, d2});
  };

  for (int64_t start = 0; start < longest; start += chunk) {
    const at::Tensor pos = at::arange(start, start + std::min(chunk, longest - start), i64())
                               .unsqueeze(0)
                               .expand({b, -1});
    run_step(at::where(pos.lt(lens), pos, -1));
  }
  for (int64_t i = 0; i < decode; ++i) run_step(lens.add(i));
  return worst;
}

}  // namespace

TEST_CASE(
    "sliding and full layers equal windowed and causal recomputation for every window, "
    "prompt and chunk size",
    "[hybrid][equivalence]") {
  for (at::ScalarType dtype : {at::kFloat, at::kBFloat16}) {
    for (int64_t window : {1, 3, 16, 40}) {
      const std::vector<int64_t> prompts = {std::max<int64_t>(window - 1, 1), window, window + 5};
      const std::vector<int64_t> chunks = {1, 2, std::max<int64_t>(window - 1, 1), window + 1};
      for (int64_t prompt : prompts) {
        for (int64_t chunk : chunks) {
          for (bool ragged : {false, true}) {
            at::manual_seed(window * 1000 + prompt * 10 + chunk);
            // Ragged: three rows whose prompts differ in length.
            const std::vector<int64_t> lens =
                ragged ? std::vector<int64_t>{prompt, std::max<int64_t>(prompt - 1, 1), prompt + 2}
                       : std::vector<int64_t>{prompt};
            const int64_t decode = 3 * window + 2;
            const int64_t total = prompt + 2 + decode;
            HybridCache cache(
                ConfigBuilder().max_batch(4).max_len(total).hybrid(window, chunk).dtype(dtype));
            const Sequences s = random_sequences(static_cast<int64_t>(lens.size()), total, dtype);
            const double diff = run_and_compare(cache, s, lens, chunk, decode);
            INFO("dtype " << dtype << " window " << window << " prompt " << prompt << " chunk "
                          << chunk << " ragged " << ragged << " max diff " << diff);
            CHECK(diff <= tolerance(dtype));
          }
        }
      }
    }
  }
}

TEST_CASE("a prefill longer than the window leaves the newest positions in the ring",
          "[hybrid][ring]") {
  // window 4, chunks of up to 10: the ring has 4 + 10 - 1 = 13 slots.
  HybridCache cache(ConfigBuilder().max_batch(1).max_len(64).hybrid(/*window=*/4, /*chunk=*/10));
  CHECK(cache.capacity(0) == 13);
  CHECK(cache.capacity(1) == 64);
  StepPlan step = cache.prepare(arange_positions(0, 10), 1);
  for (int64_t l = 0; l < 2; ++l) {
    cache.update(l, at::zeros({1, 2, 10, kDim}), at::zeros({1, 2, 10, kDim}), step);
  }
  step = cache.prepare(arange_positions(10, 10), 1);
  for (int64_t l = 0; l < 2; ++l) {
    cache.update(l, at::zeros({1, 2, 10, kDim}), at::zeros({1, 2, 10, kDim}), step);
  }
  // Positions 7..19 (the newest 13) sit at slot p % 13.
  at::Tensor expected = at::full({13}, -1, i64());
  for (int64_t p = 7; p < 20; ++p) expected[p % 13] = p;
  CHECK(at::equal(cache.slot_positions(0)[0], expected));
  // The last query (19) sees exactly the window 16..19; the first (10) sees 7..10.
  const at::Tensor seen_last = cache.slot_positions(0)[0].masked_select(step.mask(0)[0][0][9]);
  CHECK(at::equal(std::get<0>(seen_last.sort()), arange_positions(16, 4)));
  const at::Tensor seen_first = cache.slot_positions(0)[0].masked_select(step.mask(0)[0][0][0]);
  CHECK(at::equal(std::get<0>(seen_first.sort()), arange_positions(7, 4)));
}

TEST_CASE("decode past the window writes one slot in place per step", "[hybrid][ring]") {
  HybridCache cache(ConfigBuilder().max_batch(2).max_len(64).hybrid(/*window=*/3, /*chunk=*/1));
  CHECK(cache.capacity(0) == 3);  // decode-only: exactly the window
  const auto before = addresses(cache);
  for (int64_t p = 0; p < 20; ++p) {
    const Snapshot prior(cache);
    StepPlan step = cache.prepare(positions({p}), 2);
    const at::Tensor kv = at::full({2, 2, 1, kDim}, static_cast<double>(p));
    cache.update(0, kv, kv, step);
    // Only slot p % 3 (and the scratch slot) changed.
    const at::Tensor changed =
        cache.keys(0).ne(prior.keys[0]).any(3).any(1).any(0).narrow(0, 0, 3);  // [3]
    at::Tensor expected = at::zeros({3}, at::kBool);
    if (p > 0) expected[p % 3] = true;  // position 0 writes zeros over zeros
    CHECK(at::equal(changed, expected));
    CHECK(addresses(cache) == before);
  }
  CHECK(at::equal(cache.slot_positions(0)[0], positions({18, 19, 17})));
}

TEST_CASE("masks are computed once per layer type and shared by its layers", "[hybrid][mask]") {
  HybridCache cache(ConfigBuilder()
                        .max_batch(2)
                        .max_len(32)
                        .hybrid(/*window=*/4, /*chunk=*/4)
                        .layer_types(sliding_then_full(6, 2)));  // S S F S S F
  StepPlan step = cache.prepare(arange_positions(0, 4), 2);
  CHECK(step.mask(0).data_ptr() == step.mask(1).data_ptr());
  CHECK(step.mask(0).data_ptr() == step.mask(4).data_ptr());
  CHECK(step.mask(2).data_ptr() == step.mask(5).data_ptr());
  CHECK(step.mask(0).data_ptr() != step.mask(2).data_ptr());
  CHECK(step.mask(0).sizes() == at::IntArrayRef({2, 1, 4, 7}));
  CHECK(step.mask(2).sizes() == at::IntArrayRef({2, 1, 4, 32}));
}

TEST_CASE("the additive mask blocks exactly what the bool mask blocks, and attention agrees",
          "[hybrid][mask]") {
  for (at::ScalarType dtype : {at::kFloat, at::kHalf, at::kBFloat16}) {
    INFO("dtype " << dtype);
    HybridCache cache(
        ConfigBuilder().max_batch(3).max_len(16).hybrid(/*window=*/3, /*chunk=*/4).dtype(dtype));
    at::manual_seed(11);
    // Ragged prefill (row 1 padded after two tokens, row 2 all padding), then
    // a ragged decode step in which row 2 is still padding.
    const std::vector<at::Tensor> steps = {positions(3, {0, 1, 2, 3, 0, 1, -1, -1, -1, -1, -1, -1}),
                                           positions(3, {4, 2, -1})};
    for (const at::Tensor& pos : steps) {
      const int64_t q = pos.size(1);
      StepPlan step = cache.prepare(pos, 3);
      const at::Tensor real = pos.ge(0).view({3, 1, q, 1});
      for (int64_t layer = 0; layer < 2; ++layer) {
        const at::Tensor& mask = step.mask(layer);
        const at::Tensor& additive = step.additive_mask(layer);
        CHECK(additive.scalar_type() == dtype);
        CHECK(additive.sizes() == mask.sizes());
        CHECK(at::equal(additive.eq(0), mask));
        const at::Tensor blocked = additive.masked_select(mask.logical_not());
        CHECK(at::equal(blocked, at::full_like(blocked, statickv::detail::lowest_value(dtype))));

        const at::Tensor kv_in = at::randn({3, kKvHeads, q, kDim}).to(dtype);
        KV kv = cache.update(layer, kv_in, kv_in.mul(2), step);
        const at::Tensor query = at::randn({3, kHeads, q, kDim}).to(dtype);
        const at::Tensor with_bool = sdpa_attention(query, kv.keys, kv.values, mask);
        const at::Tensor with_additive = sdpa_attention(query, kv.keys, kv.values, additive);
        const at::Tensor zero = at::zeros({}, query.options());
        CHECK(close(at::where(real, with_additive, zero), at::where(real, with_bool, zero),
                    tolerance(dtype)));
        CHECK(close(at::where(real, with_additive, zero),
                    at::where(real, reference_attention(query, kv.keys, kv.values, mask), zero),
                    tolerance(dtype)));
        // Padded queries attend to nothing; their output is meaningless but finite.
        CHECK(at::isfinite(with_additive).all().item<bool>());
      }
    }
  }
}

TEST_CASE("duplicate ring slots in one device-routed write keep only the newest position",
          "[hybrid][ring]") {
  // As on CUDA: position values are not read on the host.
  HybridCache cache(ConfigBuilder()
                        .max_batch(1)
                        .max_len(32)
                        .hybrid(/*window=*/2, /*chunk=*/3)
                        .check_position_values(false));
  CHECK(cache.capacity(0) == 4);
  // Positions 1 and 5 share slot 1; 9 too. Only 9 may be stored there.
  StepPlan step = cache.prepare(positions({1, 5, 9}), 1);
  const at::Tensor key =
      at::arange(3, f32()).view({1, 1, 3, 1}).expand({1, 2, 3, kDim}).contiguous();
  cache.update(0, key, key, step);
  CHECK(at::equal(step.write_slots(0), positions({4, 4, 1})));
  CHECK(at::equal(cache.slot_positions(0)[0], positions({-1, 9, -1, -1})));
  CHECK(cache.keys(0)[0][0][1][0].item<float>() == 2.0f);
}

TEST_CASE("memory_bytes shows the ring's saving and matches the estimate before allocation",
          "[hybrid][memory]") {
  // Gemma-3-like layer pattern (5 sliding : 1 full, window 1024, max_len
  // 32768) at a small head size so the test allocates little.
  const CacheConfig c = ConfigBuilder()
                            .layer_types(sliding_then_full(12, 5))
                            .num_kv_heads(1)
                            .head_dim(4)
                            .max_batch(1)
                            .max_len(32768)
                            .sliding_window(1024)
                            .max_chunk(512);
  CacheConfig full = c;
  full.layer_types.clear();
  HybridCache hybrid(c);
  StaticCache dense(full);
  CHECK(hybrid.memory_bytes() == estimate_memory_bytes(c));
  CHECK(dense.memory_bytes() == estimate_memory_bytes(full));
  // 10 rings of 1024 + 512 - 1 slots and 2 full layers of 32768, each + scratch;
  // k and v, 1 head of 4 floats per slot.
  const int64_t per_slot = 2 * 1 * 4 * 4;
  const int64_t buffers = (10 * 1536 + 2 * 32769) * per_slot;
  const int64_t bookkeeping =
      8 /*seq_lengths*/ + (1536 + 1) * 8 /*sliding group*/ + (32769 + 1) * 8 /*full group*/;
  CHECK(hybrid.memory_bytes() == buffers + bookkeeping);
  CHECK(dense.memory_bytes() == 12 * 32769 * per_slot + 8 + (32769 + 1) * 8);
}

TEST_CASE("row operations keep sliding and full layers consistent", "[hybrid][rows]") {
  HybridCache cache(ConfigBuilder().max_batch(3).max_len(32).hybrid(/*window=*/3, /*chunk=*/4));
  ReferenceLayer sliding(3, kKvHeads, 32, kDim, /*window=*/3);
  at::manual_seed(21);
  const at::Tensor pos = positions(3, {0, 1, 2, 3, 0, 1, -1, -1, 0, 1, 2, -1});
  const at::Tensor key = at::randn({3, 2, 4, kDim});
  StepPlan step = cache.prepare(pos, 3);
  cache.update(0, key, key, step);
  cache.update(1, key, key, step);
  sliding.write(pos, key, key);
  cache.copy_row(/*src=*/0, /*dst=*/2);
  sliding.copy_row(0, 2);
  cache.reorder(positions({2, 1, 0}));
  sliding.reorder({2, 1, 0});
  cache.reset_rows(positions({1}));
  sliding.reset_row(1);
  CHECK(at::equal(cache.seq_lengths(), positions({4, 0, 4})));
  const at::Tensor next = positions(3, {4, 0, 4});
  const at::Tensor key2 = at::randn({3, 2, 1, kDim});
  const at::Tensor query = at::randn({3, kHeads, 1, kDim});
  step = cache.prepare(next, 3);
  KV kv = cache.update(0, key2, key2, step);
  sliding.write(next, key2, key2);
  const at::Tensor got = reference_attention(query, kv.keys, kv.values, step.mask(0));
  CHECK(close(got, sliding.attend(query, next), 1e-5));
}

TEST_CASE("randomized step sequences match a reference that keeps every token",
          "[hybrid][random]") {
  std::mt19937_64 rng(20261130);
  auto uniform = [&](int64_t lo, int64_t hi) {  // inclusive
    return std::uniform_int_distribution<int64_t>(lo, hi)(rng);
  };
  int64_t compared_steps = 0;
  for (int sequence = 0; sequence < 120; ++sequence) {
    const int64_t max_batch = uniform(1, 4);
    const int64_t window = uniform(1, 6);
    const int64_t chunk = uniform(1, 5);
    const int64_t max_len = uniform(12, 40);
    HybridCache cache(ConfigBuilder().max_batch(max_batch).max_len(max_len).hybrid(window, chunk));
    ReferenceLayer ref_sliding(max_batch, kKvHeads, max_len, kDim, window);
    ReferenceLayer ref_full(max_batch, kKvHeads, max_len, kDim, 0);
    std::vector<int64_t> length(static_cast<size_t>(max_batch), 0);
    const auto before = addresses(cache);
    at::manual_seed(sequence);
    for (int op = 0; op < 30; ++op) {
      const int64_t kind = uniform(0, 9);
      if (kind == 0) {
        const int64_t row = uniform(0, max_batch - 1);
        cache.reset_rows(positions({row}));
        ref_sliding.reset_row(row);
        ref_full.reset_row(row);
        length[row] = 0;
        continue;
      }
      if (kind == 1) {
        const int64_t src = uniform(0, max_batch - 1);
        const int64_t dst = uniform(0, max_batch - 1);
        cache.copy_row(src, dst);
        ref_sliding.copy_row(src, dst);
        ref_full.copy_row(src, dst);
        length[dst] = length[src];
        continue;
      }
      if (kind == 2) {
        std::vector<int64_t> order;
        const int64_t n = uniform(1, max_batch);
        for (int64_t i = 0; i < n; ++i) order.push_back(uniform(0, max_batch - 1));
        cache.reorder(at::tensor(order, i64()));
        ref_sliding.reorder(order);
        ref_full.reorder(order);
        std::vector<int64_t> old = length;
        for (int64_t i = 0; i < n; ++i) length[i] = old[order[i]];
        continue;
      }
      // A step: a random live batch, each row a random number of new tokens
      // (0 = a padded row), padded to the longest.
      const int64_t b = uniform(1, max_batch);
      const int64_t q = uniform(1, chunk);
      at::Tensor pos = at::full({b, q}, -1, i64());
      for (int64_t r = 0; r < b; ++r) {
        const int64_t n = std::min(uniform(0, q), max_len - length[r]);
        for (int64_t t = 0; t < n; ++t) pos[r][t] = length[r] + t;
        length[r] += n;
      }
      const at::Tensor key = at::randn({b, kKvHeads, q, kDim});
      const at::Tensor value = at::randn({b, kKvHeads, q, kDim});
      const at::Tensor query = at::randn({b, kHeads, q, kDim});
      StepPlan step = cache.prepare(pos, b);
      KV slide = cache.update(0, key, value, step);
      KV full = cache.update(1, key, value, step);
      ref_sliding.write(pos, key, value);
      ref_full.write(pos, key, value);
      const at::Tensor got_s = reference_attention(query, slide.keys, slide.values, step.mask(0));
      const at::Tensor got_f = reference_attention(query, full.keys, full.values, step.mask(1));
      INFO("sequence " << sequence << " op " << op << " window " << window << " chunk " << chunk
                       << " positions " << pos);
      REQUIRE(close(got_s, ref_sliding.attend(query, pos), 1e-5));
      REQUIRE(close(got_f, ref_full.attend(query, pos), 1e-5));
      ++compared_steps;
    }
    CHECK(addresses(cache) == before);
  }
  CHECK(compared_steps > 2000);
}
