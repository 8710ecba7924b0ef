// ShapeBuckets and GraphRunner on the CPU: bucket policies, padding that
// never touches a live row, bucketed outputs equal to unbucketed ones,
// stats and the inputs a runner takes (input_count). The same runner replays
// CUDA graphs on a GPU (test_cuda.cpp).

#include "support.hpp"

#include <random>

using namespace statickv;
using namespace statickv::test;

TEST_CASE("bucket policies produce the documented sizes", "[buckets]") {
  CHECK(ShapeBuckets::powers_of_two(12).sizes() == std::vector<int64_t>{1, 2, 4, 8, 12});
  CHECK(ShapeBuckets::powers_of_two(16, 4).sizes() == std::vector<int64_t>{4, 8, 16});
  CHECK(ShapeBuckets::multiples_of(4, 10).sizes() == std::vector<int64_t>{4, 8, 10});
  CHECK(ShapeBuckets::geometric(1.5, 20).sizes() ==
        std::vector<int64_t>{1, 2, 3, 5, 8, 12, 18, 20});
  CHECK(ShapeBuckets::of({8, 2, 2, 5}).sizes() == std::vector<int64_t>{2, 5, 8});
  CHECK(ShapeBuckets::of({8, 2, 5}).capture_order() == std::vector<int64_t>{8, 5, 2});
}

TEST_CASE("round_up picks the smallest bucket that fits and rejects what none fits", "[buckets]") {
  const ShapeBuckets b = ShapeBuckets::powers_of_two(64);
  CHECK(b.round_up(1) == 1);
  CHECK(b.round_up(3) == 4);
  CHECK(b.round_up(33) == 64);
  CHECK(b.index_of(5) == 3);
  CHECK(b.count() == 7);
  require_error([&] { b.round_up(65); }, {"size", "[1, 64]", "got 65"});
  require_error([&] { b.round_up(0); }, {"size", "got 0"});
  require_error([] { ShapeBuckets::of({}); }, {"ShapeBuckets.sizes", "none"});
  require_error([] { ShapeBuckets::of({4, 0}); }, {"ShapeBuckets.sizes", "got 0"});
  require_error([] { ShapeBuckets::geometric(1.0, 8); }, {"ShapeBuckets.ratio", "got 1"});
  require_error([] { ShapeBuckets::powers_of_two(8, 9); }, {"ShapeBuckets.min", "got 9"});
}

TEST_CASE("pad_into fills padding and unpad recovers the real part", "[buckets]") {
  at::Tensor padded = at::zeros({4, 8}, i64());
  const at::Tensor real = positions(2, {5, 6, 7, 9, 10, 11});
  pad_into(padded, real, -1);
  CHECK(at::equal(unpad(padded, 2, 3), real));
  CHECK(padded.narrow(0, 2, 2).eq(-1).all().item<bool>());
  CHECK(padded.narrow(1, 3, 5).eq(-1).all().item<bool>());
  require_error([&] { pad_into(padded, at::zeros({5, 1}, i64()), -1); }, {"input", "fits"});
}

TEST_CASE("bucketed runs equal unbucketed runs for every batch size and 40 prompt lengths",
          "[runner]") {
  const int64_t max_batch = 8, max_len = 128;
  const CacheConfig config =
      ConfigBuilder().max_batch(max_batch).max_len(max_len).hybrid(/*window=*/6, /*chunk=*/32);
  HybridCache bucketed(config);
  HybridCache exact(config);
  const AttentionStepShape shape;
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(max_batch);
  options.query_buckets = ShapeBuckets::powers_of_two(32);
  GraphRunner runner(attention_step_inputs(shape, at::kFloat), attention_step_fn(bucketed),
                     options);
  CHECK_FALSE(runner.uses_graphs());
  std::mt19937_64 rng(29151);
  at::manual_seed(37394);
  int64_t calls = 0;
  // Prefill: 40 prompts of random length, in random live batches.
  for (int i = 0; i < 40; ++i) {
    const int64_t b = static_cast<int64_t>(rng() % max_batch) + 1;
    const int64_t q = static_cast<int64_t>(rng() % 32) + 1;
    bucketed.reset();
    exact.reset();
    const at::Tensor pos = at::arange(q, i64()).view({1, q}).expand({b, q}).contiguous();
    const at::Tensor kv = at::randn({b, q, 2, 8});
    const at::Tensor query = at::randn({b, q, 4, 8});
    const at::Tensor got = runner.run({pos, kv, query})[0];
    const at::Tensor want = attention_step(exact, pos, kv, query);
    INFO("prefill " << i << ": batch " << b << " length " << q << " diff " << max_diff(got, want));
    REQUIRE(close(got, want, 1e-5));
    ++calls;
    // Then decode every live batch size 1..b on the same rows.
    for (int64_t live = 1; live <= b; ++live) {
      const at::Tensor p = at::full({live, 1}, q, i64());
      const at::Tensor k1 = at::randn({live, 1, 2, 8});
      const at::Tensor q1 = at::randn({live, 1, 4, 8});
      const at::Tensor g = runner.run({p, k1, q1})[0];
      const at::Tensor w = attention_step(exact, p, k1, q1);
      REQUIRE(close(g, w, 1e-5));
      ++calls;
    }
    for (int64_t l = 0; l < 2; ++l) {
      // Same stored entries and bookkeeping; only scratch slots may differ.
      REQUIRE(at::equal(bucketed.slot_positions(l), exact.slot_positions(l)));
      REQUIRE(at::equal(bucketed.keys(l).narrow(2, 0, bucketed.capacity(l)),
                        exact.keys(l).narrow(2, 0, exact.capacity(l))));
    }
    REQUIRE(at::equal(bucketed.seq_lengths(), exact.seq_lengths()));
  }
  const RunnerStats stats = runner.stats();
  CHECK(stats.eager_runs == calls);
  CHECK(stats.replays == 0);
  CHECK(stats.captures == 0);
  CHECK(static_cast<int64_t>(stats.keys.size()) <= 4 * 6);  // batch x length buckets
}

TEST_CASE("padded rows of a bucket leave the rows past the live batch bit-identical", "[runner]") {
  HybridCache cache(ConfigBuilder().max_batch(8).max_len(32).hybrid(/*window=*/6, /*chunk=*/32));
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::of({8});
  options.query_buckets = ShapeBuckets::of({4});
  GraphRunner runner(attention_step_inputs({}, at::kFloat), attention_step_fn(cache), options);
  // Fill all 8 rows with 4 tokens, then serve a live batch of 3 with 2 tokens.
  runner.run(
      {at::arange(4, i64()).repeat({8, 1}), at::randn({8, 4, 2, 8}), at::randn({8, 4, 4, 8})});
  const Snapshot before(cache);
  runner.run({positions(3, {4, 5, 4, 5, 4, 5}), at::randn({3, 2, 2, 8}), at::randn({3, 2, 4, 8})});
  for (int64_t l = 0; l < 2; ++l) {
    const int64_t cap = cache.capacity(l);
    CHECK(at::equal(cache.keys(l).narrow(0, 3, 5).narrow(2, 0, cap),
                    before.keys[l].narrow(0, 3, 5).narrow(2, 0, cap)));
    CHECK(at::equal(cache.slot_positions(l).narrow(0, 3, 5),
                    before.slot_positions[l].narrow(0, 3, 5)));
    // Live rows: positions 0..3 untouched, 4 and 5 written.
    CHECK(at::equal(cache.keys(l).narrow(0, 0, 3).narrow(2, 0, 4),
                    before.keys[l].narrow(0, 0, 3).narrow(2, 0, 4)));
  }
  CHECK(at::equal(cache.seq_lengths(), positions({6, 6, 6, 4, 4, 4, 4, 4})));
  const RunnerStats stats = runner.stats();
  REQUIRE(stats.keys.size() == 1);
  CHECK(stats.keys[0].runs == 2);
  CHECK(stats.keys[0].real_tokens == 32 + 6);
  CHECK(stats.keys[0].padded_tokens == 0 + 26);
  CHECK(stats.keys[0].padded_fraction() == Approx(26.0 / 64.0));
}

namespace {

/// Batch buckets 1, 2, 4; query buckets 1 to 8; attend buckets 8 to 32.
GraphRunner::Options three_bucket_options() {
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(4);
  options.query_buckets = ShapeBuckets::powers_of_two(8);
  options.attend_buckets = ShapeBuckets::multiples_of(8, 32);
  return options;
}

}  // namespace

TEST_CASE("a key's static buffers keep their addresses across calls", "[runner]") {
  HybridCache cache(ConfigBuilder().max_batch(4).max_len(32).hybrid(/*window=*/6, /*chunk=*/32));
  GraphRunner runner(attention_step_inputs({}, at::kFloat), attention_step_fn(cache),
                     three_bucket_options());
  runner.capture_all();  // eager build: allocates every key's buffers
  CHECK(runner.stats().keys.size() == 3 * 4 * 4);
  const GraphKey key = runner.key_for(3, 5, 9);
  CHECK(key == GraphKey{4, 8, 16});
  std::vector<const void*> before;
  for (const auto& t : runner.static_inputs(key)) before.push_back(t.data_ptr());
  for (int64_t start = 0; start < 12; start += 5) {
    runner.run({at::arange(start, start + 5, i64()).repeat({3, 1}), at::randn({3, 5, 2, 8}),
                at::randn({3, 5, 4, 8})},
               /*attend_len=*/16);
    std::vector<const void*> now;
    for (const auto& t : runner.static_inputs(key)) now.push_back(t.data_ptr());
    CHECK(now == before);
  }
}

TEST_CASE("row outputs hold one entry per padded row and come back as [b, ...]", "[runner]") {
  // Per token: x * 2. Per row: the sum over the row's tokens (padding adds 0)
  // and the row's largest position (padding is -1), as a prefill step that
  // keeps only each row's last token would.
  const GraphRunner::StepFn step = [](const std::vector<at::Tensor>& in, const GraphKey&) {
    return std::vector<at::Tensor>{in[0].mul(2), in[0].sum(1), in[1].amax(1)};
  };
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(8);
  options.query_buckets = ShapeBuckets::powers_of_two(16);
  options.row_outputs = {1, 2};
  GraphRunner runner({{"x", at::kFloat, {3}, 0.0}, {"positions", at::kLong, {}, -1}}, step,
                     options);
  at::manual_seed(3);
  for (int64_t b : {1, 3, 5, 8}) {
    for (int64_t q : {1, 2, 7, 9}) {
      INFO("b " << b << ", q " << q);
      const at::Tensor x = at::randn({b, q, 3});
      const at::Tensor pos = at::arange(q, i64()).add(4).repeat({b, 1});
      const std::vector<at::Tensor> out = runner.run({x, pos});
      REQUIRE(out.size() == 3);
      CHECK(at::equal(out[0], x.mul(2)));
      CHECK(out[1].sizes() == at::IntArrayRef({b, 3}));
      CHECK(at::allclose(out[1], x.sum(1)));
      CHECK(at::equal(out[2], at::full({b}, q + 3, i64())));
    }
  }
}

TEST_CASE("GraphRunner rejects row outputs that are not per row", "[runner][errors]") {
  const auto inputs = std::vector<InputSpec>{{"x", at::kFloat, {}, 0.0}};
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(4);
  options.query_buckets = ShapeBuckets::powers_of_two(4);
  options.row_outputs = {0};
  // An output declared per row must have the padded batch as its first dim.
  GraphRunner scalar(
      inputs,
      [](const std::vector<at::Tensor>& in, const GraphKey&) {
        return std::vector<at::Tensor>{in[0].sum()};
      },
      options);
  require_error(
      [&] {
        scalar.run({at::zeros({3, 2})});
      },
      {"step output 0", "[4, ...]", "row output", "got []"});
  options.row_outputs = {1};
  GraphRunner missing(
      inputs,
      [](const std::vector<at::Tensor>& in, const GraphKey&) {
        return std::vector<at::Tensor>{in[0]};
      },
      options);
  require_error(
      [&] {
        missing.run({at::zeros({3, 2})});
      },
      {"Options.row_outputs", "below the step's 1 outputs", "got 1"});
  options.row_outputs = {0, 0};
  require_error(
      [&] {
        GraphRunner r(
            inputs,
            [](const std::vector<at::Tensor>& in, const GraphKey&) {
              return std::vector<at::Tensor>{in[0]};
            },
            options);
      },
      {"Options.row_outputs[1]", "distinct", "0 twice"});
}

TEST_CASE("GraphRunner rejects inputs that match no spec or bucket", "[runner][errors]") {
  HybridCache cache(ConfigBuilder().max_batch(4).max_len(32).hybrid(/*window=*/6, /*chunk=*/32));
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(4);
  options.query_buckets = ShapeBuckets::powers_of_two(8);
  GraphRunner runner(attention_step_inputs({}, at::kFloat), attention_step_fn(cache), options);
  const at::Tensor pos = positions(1, {0, 1});
  const at::Tensor kv = at::zeros({1, 2, 2, 8});
  const at::Tensor q = at::zeros({1, 2, 4, 8});
  const Snapshot before(cache);
  require_error([&] { runner.run({pos, kv}); }, {"inputs", "3 tensors", "got 2"});
  require_error([&] { runner.run({pos.to(at::kInt), kv, q}); }, {"inputs[0] (positions)", "Int"});
  require_error(
      [&] {
        runner.run({pos, at::zeros({1, 2, 3, 8}), q});
      },
      {"inputs[1] (kv)", "[1, 2, 3, 8]"});
  require_error(
      [&] {
        runner.run({pos, kv, at::zeros({2, 2, 4, 8})});
      },
      {"inputs[2] (query)", "like inputs[0]"});
  require_error(
      [&] {
        runner.run(
            {positions(5, {0, 0, 0, 0, 0}), at::zeros({5, 1, 2, 8}), at::zeros({5, 1, 4, 8})});
      },
      {"size", "[1, 4]", "got 5"});
  require_error(
      [&] {
        runner.run({at::zeros({1, 9}, i64()), at::zeros({1, 9, 2, 8}), at::zeros({1, 9, 4, 8})});
      },
      {"size", "got 9"});
  CHECK(before.same_as(cache));
  require_error([] { GraphRunner r({}, nullptr, {}); }, {"inputs", "none"});
}

TEST_CASE("input_count is the number of input specs run takes", "[runner]") {
  const GraphRunner::StepFn twice = [](const std::vector<at::Tensor>& in, const GraphKey&) {
    return std::vector<at::Tensor>{in[0].mul(2)};
  };
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(4);
  options.query_buckets = ShapeBuckets::powers_of_two(4);
  const GraphRunner one({{"x", at::kFloat, {}, 0.0}}, twice, options);
  CHECK(one.input_count() == 1);
  GraphRunner two({{"x", at::kFloat, {3}, 0.0}, {"positions", at::kLong, {}, -1}}, twice, options);
  CHECK(two.input_count() == 2);
  const at::Tensor x = at::ones({1, 2, 3});
  CHECK(at::equal(two.run({x, positions(1, {0, 1})})[0], x.mul(2)));
  require_error([&] { two.run({x}); }, {"inputs", "2 tensors", "got 1"});
  HybridCache cache(ConfigBuilder().max_batch(4));
  const GraphRunner three(attention_step_inputs({}, at::kFloat), attention_step_fn(cache), options);
  CHECK(three.input_count() == 3);
}

TEST_CASE("every key of a query bucket steps on batch-prefix views of one buffer per input",
          "[runner]") {
  HybridCache cache(ConfigBuilder().max_batch(4).max_len(32).hybrid(/*window=*/6, /*chunk=*/32));
  GraphRunner runner(attention_step_inputs({}, at::kFloat), attention_step_fn(cache),
                     three_bucket_options());
  runner.capture_all();
  for (int64_t q : {1, 2, 4, 8}) {
    const std::vector<at::Tensor>& buffers = runner.input_buffers(q);
    REQUIRE(buffers.size() == 3);
    CHECK(buffers[0].sizes() == at::IntArrayRef({4, q}));
    CHECK(buffers[2].sizes() == at::IntArrayRef({4, q, 4, 8}));
    for (int64_t b : {1, 2, 4}) {
      for (int64_t a : {8, 16, 24, 32}) {
        const std::vector<at::Tensor>& inputs = runner.static_inputs(GraphKey{b, q, a});
        for (size_t i = 0; i < inputs.size(); ++i) {
          INFO("b " << b << ", q " << q << ", attend " << a << ", input " << i);
          CHECK(inputs[i].data_ptr() == buffers[i].data_ptr());
          CHECK(inputs[i].size(0) == b);
          CHECK(inputs[i].is_contiguous());
        }
      }
    }
  }
  // A length between buckets names its bucket's buffers.
  CHECK(runner.input_buffers(3)[0].data_ptr() == runner.input_buffers(4)[0].data_ptr());
  require_error([&] { runner.input_buffers(9); }, {"query_len", "got 9"});
}

TEST_CASE("run_in_place steps on what the buffers hold and pads the rows past the batch",
          "[runner]") {
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(8);
  options.query_buckets = ShapeBuckets::of({1});
  GraphRunner runner(chained_step_inputs(), chained_step(), options);
  const std::vector<at::Tensor>& buffers = runner.input_buffers(1);
  // Three live rows written once from the host; rows 3..7 hold garbage.
  buffers[0].copy_(at::arange(8, i64()).mul(100).unsqueeze(1));
  buffers[1].copy_(at::arange(8, i64()).add(5).unsqueeze(1));
  const at::Tensor garbage_ids = buffers[0].narrow(0, 4, 4).clone();
  for (int64_t step = 0; step < 4; ++step) {
    const at::Tensor out = runner.run_in_place(/*batch=*/3, /*query_len=*/1)[0];
    INFO("step " << step);
    REQUIRE(out.sizes() == at::IntArrayRef({3, 1}));
    // Row r: id 100 r + step at position 5 + r + step.
    const at::Tensor r = at::arange(3, i64()).unsqueeze(1);
    CHECK(at::equal(out, r.mul(100).add(step).mul(10).add(r.add(5 + step))));
  }
  // Row 3 is in the key's bucket (4): padded on the device and left padding.
  CHECK(buffers[1][3].item<int64_t>() == -1);
  CHECK(buffers[0][3].item<int64_t>() == 0);
  // Rows past the bucket belong to no step of this key: untouched.
  CHECK(at::equal(buffers[0].narrow(0, 4, 4), garbage_ids));
  const RunnerStats stats = runner.stats();
  REQUIRE(stats.keys.size() == 1);
  CHECK(stats.keys[0].runs == 4);
  CHECK(stats.keys[0].real_tokens == 12);
  CHECK(stats.keys[0].padded_tokens == 4);
}

TEST_CASE("run_in_place after run continues from the inputs the step wrote", "[runner]") {
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(4);
  options.query_buckets = ShapeBuckets::of({1});
  GraphRunner runner(chained_step_inputs(), chained_step(), options);
  // The host hands two rows in once; the step's own writes feed the rest,
  // and a smaller batch bucket reads the same rows.
  const auto column = [](std::vector<int64_t> v) { return positions(v).unsqueeze(1); };
  CHECK(at::equal(runner.run({column({7, 9}), column({3, 3})})[0], column({73, 93})));
  CHECK(at::equal(runner.run_in_place(2, 1)[0], column({84, 104})));
  CHECK(at::equal(runner.run_in_place(1, 1)[0], column({95})));
  // Row 1 sat out the batch-1 step: it reads what step 2 left it.
  CHECK(at::equal(runner.run_in_place(2, 1)[0], column({106, 115})));
}

TEST_CASE("run_in_place refuses a batch or length no bucket serves", "[runner][errors]") {
  GraphRunner::Options options;
  options.batch_buckets = ShapeBuckets::powers_of_two(4);
  options.query_buckets = ShapeBuckets::powers_of_two(2);
  GraphRunner runner(chained_step_inputs(), chained_step(), options);
  require_error([&] { runner.run_in_place(0, 1); }, {"batch: expected a value in [1, 4]", "got 0"});
  require_error([&] { runner.run_in_place(5, 1); }, {"batch: expected a value in [1, 4]", "got 5"});
  require_error([&] { runner.run_in_place(1, 0); }, {"query_len: expected", "[1, 2]", "got 0"});
  require_error([&] { runner.run_in_place(1, 3); }, {"query_len: expected", "[1, 2]", "got 3"});
  CHECK(runner.stats().keys.empty());
}
