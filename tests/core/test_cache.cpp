// Cache, StaticCache and HybridCache (include/statickv/cache.hpp), member by
// member: construction and the byte estimates, the step (prepare, update,
// write_target, attend and its varlen arguments), the row operations
// (reset, reset_rows, copy_row, reorder, rollback, save_row and
// restore_row, copy_from) and the inspection accessors, each pinned to the
// contract its `///` comment states. The long scenarios live in the feature
// tests (test_static_cache.cpp, test_hybrid_cache.cpp, test_reset_rows.cpp,
// test_rollback.cpp, test_row_state.cpp, test_copy_from.cpp, test_attend.cpp).

#include "support.hpp"

#include <string>

using namespace statickv;
using namespace statickv::test;

namespace {

/// Keys for positions [b, q]: row r's token at position p is 1000 * (r + 1)
/// + p on every kv head and element, so a slot tells which row and position
/// wrote it. [b, kKvHeads, q, kDim], float.
at::Tensor codes(const at::Tensor& pos) {
  const int64_t b = pos.size(0), q = pos.size(1);
  const at::Tensor rows = at::arange(1, b + 1, i64()).mul(1000).view({b, 1});
  return pos.add(rows)
      .to(at::kFloat)
      .view({b, 1, q, 1})
      .expand({b, kKvHeads, q, kDim})
      .contiguous();
}

/// One step over rows 0..b-1 at per-row positions [b, q]: codes() as keys,
/// their negation as values, in every layer.
StepPlan write(Cache& cache, const at::Tensor& pos) {
  StepPlan step = cache.prepare(pos, pos.size(0));
  const at::Tensor key = codes(pos);
  for (int64_t l = 0; l < cache.num_layers(); ++l) cache.update(l, key, key.neg(), step);
  return step;
}

/// The key code held in `slot` of `row` in `layer` (kv head 0, element 0).
float stored(const Cache& cache, int64_t layer, int64_t row, int64_t slot) {
  return cache.keys(layer)[row][0][slot][0].item<float>();
}

bool all_true(const at::Tensor& t) { return t.all().item<bool>(); }

bool contains(const char* text, const char* fragment) {
  return text != nullptr && std::string(text).find(fragment) != std::string::npos;
}

}  // namespace

// ==== Construction and bytes ====

TEST_CASE("a cache allocates zeroed buffers of the documented shapes from its config", "[cache]") {
  const CacheConfig config = ConfigBuilder().max_batch(3).max_len(16).hybrid(/*window=*/4, 3);
  const Cache cache(config);
  CHECK(cache.config().max_batch == 3);
  CHECK(cache.config().layer_types == config.layer_types);
  CHECK(cache.num_layers() == 2);
  CHECK(cache.layer(0).type() == LayerType::kSliding);
  CHECK(cache.layer(1).type() == LayerType::kFull);
  CHECK(cache.capacity(0) == 4 + 3 - 1);  // Note [ring capacity]
  CHECK(cache.capacity(1) == 16);
  for (int64_t l = 0; l < 2; ++l) {
    INFO("layer " << l);
    const std::vector<int64_t> shape = {3, kKvHeads, cache.capacity(l) + 1, kDim};
    CHECK(cache.keys(l).sizes() == at::IntArrayRef(shape));  // the scratch slot included
    CHECK(cache.values(l).sizes() == at::IntArrayRef(shape));
    CHECK(cache.keys(l).scalar_type() == at::kFloat);
    CHECK(all_true(cache.keys(l).eq(0)));
    CHECK(all_true(cache.values(l).eq(0)));
    CHECK(cache.slot_positions(l).sizes() == at::IntArrayRef({3, cache.capacity(l)}));
    CHECK(all_true(cache.slot_positions(l).eq(-1)));
  }
  CHECK(at::equal(cache.seq_lengths(), positions({0, 0, 0})));
  require_error([] { Cache bad(ConfigBuilder().max_len(0)); }, {"CacheConfig.max_len", "got 0"});
  require_error([&] { cache.keys(2); }, {"layer", "[0, 2)", "got 2"});
}

TEST_CASE("StaticCache takes full layers only while HybridCache takes any mix", "[cache]") {
  const StaticCache full{ConfigBuilder()};
  CHECK(full.layer(0).type() == LayerType::kFull);
  CHECK(full.layer(1).type() == LayerType::kFull);
  const HybridCache mixed(ConfigBuilder().hybrid(4, 4));
  CHECK(mixed.layer(0).type() == LayerType::kSliding);
  CHECK(mixed.layer(0).window() == 4);
  CHECK(mixed.layer(1).type() == LayerType::kFull);
  const HybridCache all_full{ConfigBuilder()};
  CHECK(all_full.capacity(1) == 16);
  require_error([] { StaticCache bad(ConfigBuilder().hybrid(4, 4)); },
                {"StaticCache", "layer_types[0]", "HybridCache"});
  require_error([] { HybridCache bad(ConfigBuilder().num_kv_heads(0)); },
                {"CacheConfig.num_kv_heads", "got 0"});
}

TEST_CASE("memory_bytes is the documented byte count and what estimate_memory_bytes predicts",
          "[cache][memory]") {
  // 2 full layers x keys and values [4, 2, 16 + 1, 8] float, slot_positions
  // [4, 17] and row offsets [4, 2] int64 (one group), seq_lengths [4].
  const int64_t kv = 2 * 2 * 4 * 2 * 17 * 8 * 4;
  const int64_t expected = kv + 4 * 17 * 8 + 4 * 2 * 8 + 4 * 8;
  const StaticCache plain{ConfigBuilder()};
  CHECK(plain.memory_bytes() == expected);
  CHECK(plain.device_memory_bytes() == expected);
  CHECK(plain.host_memory_bytes() == 0);
  CHECK(plain.staging_bytes() == 0);
  CHECK(estimate_memory_bytes(ConfigBuilder()) == expected);
  // Per layer type: two more full layers add their keys and values only.
  CHECK(estimate_memory_bytes(ConfigBuilder().num_layers(4)) == expected + kv);
  const std::vector<CacheConfig> configs = {ConfigBuilder(), ConfigBuilder().hybrid(4, 3),
                                            ConfigBuilder().kv_storage(KvStorage::kInt8),
                                            ConfigBuilder().hybrid(4, 3).host_offload(true)};
  for (const CacheConfig& config : configs) {
    INFO("kv_storage " << config.kv_storage << ", host_offload " << config.host_offload);
    const auto cache = make_cache(config);
    const CacheConfig::Bytes bytes = estimate_memory(config);
    CHECK(cache->device_memory_bytes() == bytes.device);
    CHECK(cache->host_memory_bytes() == bytes.host);
    CHECK(cache->memory_bytes() == estimate_memory_bytes(config));
    CHECK(cache->memory_bytes() == bytes.device + bytes.host);
    bool overflow = false;
    CHECK(cache->staging_bytes() == config.staging_bytes(&overflow));
    CHECK(cache->staging_bytes() <= cache->device_memory_bytes());
  }
  // Host offload moves keys and values to the host and adds a ring of two
  // staging buffers [4, 2, 17, 8] (keys and values) on the device.
  const StaticCache offloaded(ConfigBuilder().host_offload(true));
  CHECK(offloaded.host_memory_bytes() == kv);
  CHECK(offloaded.staging_bytes() == 2 * 2 * 4 * 2 * 17 * 8 * 4);
  CHECK(offloaded.device_memory_bytes() == expected - kv + offloaded.staging_bytes());
}

// ==== The step ====

TEST_CASE("prepare plans one step for the live rows and advances their seq_lengths", "[cache]") {
  StaticCache cache(ConfigBuilder().max_batch(3));
  const StepPlan step = cache.prepare(positions(2, {0, 1, 2, 0, 1, -1}), 2);
  CHECK(step.live_batch() == 2);
  CHECK(step.query_len() == 3);
  CHECK(step.per_row());
  CHECK(step.attend_len() == 16);  // default: max_len
  CHECK(at::equal(cache.seq_lengths(), positions({3, 2, 0})));
  const StepPlan shared = cache.prepare(positions({3}), 2, /*attend_len=*/8);
  CHECK_FALSE(shared.per_row());
  CHECK(shared.view_len(0) == 8);
  CHECK(at::equal(cache.seq_lengths(), positions({4, 4, 0})));
  // Refusals name the argument and change nothing.
  const Snapshot before(cache);
  require_error([&] { cache.prepare(positions({4}), 4); },
                {"live_batch", "[1, max_batch=3]", "got 4"});
  require_error([&] { cache.prepare(positions({16}), 1); }, {"cache_position", "got 16"});
  require_error([&] { cache.prepare(positions({4}), 1, 17); }, {"attend_len", "got 17"});
  require_error([&] { cache.prepare(cache.seq_lengths().narrow(0, 0, 1), 1); },
                {"cache_position", "does not share memory with the cache"});
  CHECK(before.same_as(cache));
}

TEST_CASE("update writes each token at its slot and returns views of the live rows", "[cache]") {
  StaticCache cache(ConfigBuilder().max_batch(3));
  const at::Tensor pos = positions(2, {0, 1, 2, 5, -1, 6});  // row 1 padded in the middle
  StepPlan step = cache.prepare(pos, 2, /*attend_len=*/8);
  const at::Tensor key = codes(pos);
  const KV kv = cache.update(0, key, key.neg(), step);
  CHECK(kv.keys.sizes() == at::IntArrayRef({2, kKvHeads, 8, kDim}));
  CHECK(kv.keys.data_ptr() == cache.keys(0).data_ptr());  // a view, no copy
  CHECK(kv.values.data_ptr() == cache.values(0).data_ptr());
  CHECK(stored(cache, 0, 0, 2) == 1002);
  CHECK(stored(cache, 0, 1, 5) == 2005);
  CHECK(stored(cache, 0, 1, 6) == 2006);
  CHECK(stored(cache, 0, 1, 16) == 1999);  // the padded token: the scratch slot
  CHECK(cache.values(0)[1][1][6][3].item<float>() == -2006);
  CHECK(kv.keys[1][1][5][7].item<float>() == 2005);
  CHECK(all_true(cache.keys(1).eq(0)));  // another layer: untouched
  // Refusals name the argument and write nothing.
  const Snapshot before(cache);
  require_error([&] { cache.update(0, key.narrow(2, 0, 2), key, step); },
                {"key", "expected shape"});
  require_error([&] { cache.update(2, key, key, step); }, {"layer", "got 2"});
  CHECK(before.same_as(cache));
  cache.prepare(positions({7}), 2, 8);
  const Snapshot after_prepare(cache);
  require_error([&] { cache.update(1, key, key, step); }, {"step", "stale"});
  CHECK(after_prepare.same_as(cache));
}

TEST_CASE("write_target gives update's buffers, slots and views and writes nothing", "[cache]") {
  HybridCache cache(ConfigBuilder().max_batch(3).hybrid(/*window=*/4, /*chunk=*/3));
  const StepPlan step = cache.prepare(positions({4, 5, 6}), 2);  // shared: [q] slots
  const at::Tensor key = at::ones({2, kKvHeads, 3, kDim});
  const Snapshot before(cache);
  const std::vector<at::Tensor> slots = {positions(2, {4, 5, 0, 4, 5, 0}),   // ring of 6
                                         positions(2, {4, 5, 6, 4, 5, 6})};  // full
  for (int64_t l : {0, 1}) {
    INFO("layer " << l);
    const statickv::detail::WriteTarget target = cache.write_target(l, key, key, step);
    CHECK(target.keys.data_ptr() == cache.keys(l).data_ptr());
    CHECK(target.keys.sizes() == cache.keys(l).sizes());
    CHECK(target.values.data_ptr() == cache.values(l).data_ptr());
    CHECK(at::equal(target.slots, slots[static_cast<size_t>(l)]));
    CHECK(at::equal(target.slots, step.write_slots(l).expand({2, 3})));
    CHECK(target.views.keys.sizes() == at::IntArrayRef({2, kKvHeads, step.view_len(l), kDim}));
    CHECK(target.views.keys.data_ptr() == cache.keys(l).data_ptr());
  }
  CHECK(before.same_as(cache));
  require_error([&] { cache.write_target(0, key.narrow(0, 0, 1), key, step); },
                {"key", "expected shape"});
  HybridCache offloaded(ConfigBuilder().host_offload(true));
  const StepPlan offloaded_step = offloaded.prepare(positions({0, 1, 2}), 2);
  require_error([&] { offloaded.write_target(0, key, key, offloaded_step); },
                {"write_target", "host_offload=false"});
}

TEST_CASE(
    "attend on the CPU is sdpa with the step's additive mask and says why varlen cannot serve",
    "[cache][attend]") {
  at::manual_seed(11);
  HybridCache cache(ConfigBuilder().max_batch(2).hybrid(4, 4));
  StepPlan step = cache.prepare(positions(2, {0, 1, 2, 0, 1, -1}), 2);
  const at::Tensor kv = at::randn({2, kKvHeads, 3, kDim});
  const at::Tensor query = at::randn({2, kHeads, 3, kDim});
  std::vector<KV> views;
  for (int64_t l : {0, 1}) {
    INFO("layer " << l);
    views.push_back(cache.update(l, kv, kv, step));
    const KV& v = views.back();
    CHECK(cache.attention_path(l, query) == AttentionPath::kMasked);
    const at::Tensor out = cache.attend(l, query, v, step);
    CHECK(out.sizes() == query.sizes());
    CHECK(at::equal(out, sdpa_attention(query, v.keys, v.values, step.additive_mask(l))));
    CHECK(all_true(at::isfinite(out)));  // row 1's padded query too
  }
  CHECK(contains(cache.varlen_refusal(0, query), "sliding-window layer"));
  CHECK(contains(cache.varlen_refusal(1, query), "CPU"));
  require_error([&] { cache.attend(1, query, views[1], step, AttentionPath::kVarlen); },
                {"path", "varlen", "CPU"});
  require_error([&] { cache.attention_path(2, query); }, {"layer", "got 2"});
  const HybridCache int8(ConfigBuilder().kv_storage(KvStorage::kInt8));
  CHECK(contains(int8.varlen_refusal(1, query), "quantized KV storage"));
  const HybridCache offloaded(ConfigBuilder().host_offload(true));
  CHECK(contains(offloaded.varlen_refusal(1, query), "host offload"));
}

TEST_CASE("varlen_args packs each row's live queries over its live keys on full layers only",
          "[cache][attend]") {
  at::manual_seed(12);
  HybridCache cache(ConfigBuilder().max_batch(3).hybrid(4, 4));
  StepPlan step = cache.prepare(positions(2, {0, 1, 2, 0, -1, -1}), 2, /*attend_len=*/8);
  const at::Tensor kv = at::randn({2, kKvHeads, 3, kDim});
  const at::Tensor query = at::randn({2, kHeads, 3, kDim});
  const KV views0 = cache.update(0, kv, kv, step);
  const KV views1 = cache.update(1, kv, kv, step);
  const statickv::detail::VarlenArgs args = cache.varlen_args(1, query, views1, step);
  CHECK(at::equal(args.cum_seq_q, at::tensor({0, 3, 4}, at::kInt)));  // each row's real queries
  CHECK(at::equal(args.seqused_k, at::tensor({3, 1}, at::kInt)));
  // Fixed shape [b * q, heads, head_dim]: the real tokens first, row by row.
  CHECK(args.query.sizes() == at::IntArrayRef({6, kHeads, kDim}));
  CHECK(at::equal(args.query[2], query[0].select(1, 2)));
  CHECK(at::equal(args.query[3], query[1].select(1, 0)));
  CHECK(args.max_q == 3);
  CHECK(args.max_k == 8);  // the view length
  CHECK(args.causal);
  CHECK(args.batch == 2);
  CHECK(args.query_len == 3);
  CHECK(args.keys.data_ptr() == cache.keys(1).data_ptr());  // the buffer itself
  // The kernel's result over these arguments is the masked path's for live tokens.
  const at::Tensor varlen =
      statickv::detail::unpack_varlen(args, emulate_flash_varlen(args).to(at::kFloat));
  const at::Tensor masked = cache.attend(1, query, views1, step, AttentionPath::kMasked);
  CHECK(close(varlen[0], masked[0], 1e-5));
  CHECK(close(varlen[1].narrow(1, 0, 1), masked[1].narrow(1, 0, 1), 1e-5));
  require_error([&] { cache.varlen_args(0, query, views0, step); },
                {"layer", "full-attention layer", "sliding"});
}

// ==== Rows ====

TEST_CASE("reset empties every row and zeroes every buffer in place", "[cache][rows]") {
  const CacheConfig config = ConfigBuilder().max_batch(2).hybrid(4, 4);
  HybridCache cache(config);
  const StepPlan step = write(cache, positions(2, {0, 1, 2, 0, 1, -1}));
  const std::vector<const void*> before = addresses(cache);
  cache.reset();
  CHECK(addresses(cache) == before);
  CHECK(Snapshot(cache) == Snapshot(HybridCache(config)));  // scratch slots included
  const at::Tensor key = codes(positions(2, {0, 1, 2, 0, 1, -1}));
  require_error([&] { cache.update(0, key, key, step); }, {"step", "stale"});
}

TEST_CASE("reset_rows makes the named rows fresh rows and leaves the others alone",
          "[cache][rows]") {
  const CacheConfig config = ConfigBuilder().max_batch(3).hybrid(4, 4);
  HybridCache cache(config);
  write(cache, positions(3, {0, 1, 2, 0, 1, 2, 0, 1, -1}));  // row 2 pads into its scratch slot
  const HybridCache fresh(config);
  const Snapshot written(cache);
  cache.reset_rows(positions({2, 0}));
  CHECK(at::equal(cache.seq_lengths(), positions({0, 3, 0})));
  for (int64_t l = 0; l < 2; ++l) {
    INFO("layer " << l);
    for (int64_t row : {0, 2}) {
      CHECK(bit_identical(cache.keys(l)[row], fresh.keys(l)[row]));
      CHECK(bit_identical(cache.values(l)[row], fresh.values(l)[row]));
      CHECK(at::equal(cache.slot_positions(l)[row], fresh.slot_positions(l)[row]));
    }
    CHECK(bit_identical(cache.keys(l)[1], written.keys[static_cast<size_t>(l)][1]));
    CHECK(at::equal(cache.slot_positions(l)[1], written.slot_positions[static_cast<size_t>(l)][1]));
  }
  const Snapshot before(cache);
  require_error([&] { cache.reset_rows(positions({1, 1})); }, {"rows[1]", "distinct"});
  require_error([&] { cache.reset_rows(positions({0, 3})); }, {"rows[1]", "got 3"});
  CHECK(before.same_as(cache));
}

TEST_CASE("copy_row makes row dst a copy of row src", "[cache][rows]") {
  StaticCache cache(ConfigBuilder().max_batch(3));
  write(cache, positions(2, {0, 1, 2, 3, 0, 1, -1, -1}));
  cache.copy_row(0, 2);
  CHECK(at::equal(cache.seq_lengths(), positions({4, 2, 4})));
  for (int64_t l = 0; l < 2; ++l) {
    INFO("layer " << l);
    CHECK(bit_identical(cache.keys(l)[2], cache.keys(l)[0]));
    CHECK(bit_identical(cache.values(l)[2], cache.values(l)[0]));
    CHECK(at::equal(cache.slot_positions(l)[2], cache.slot_positions(l)[0]));
    CHECK(stored(cache, l, 2, 3) == 1003);
  }
  const Snapshot before(cache);
  require_error([&] { cache.copy_row(3, 0); }, {"src", "got 3"});
  require_error([&] { cache.copy_row(0, -1); }, {"dst", "got -1"});
  CHECK(before.same_as(cache));
}

TEST_CASE(
    "reorder makes each row i the old row that indices gives at i and leaves later rows alone",
    "[cache][rows]") {
  StaticCache cache(ConfigBuilder().max_batch(4));
  write(cache, positions(4, {0, 1, 2, 0, 1, -1, 0, -1, -1, 0, 1, 2}));
  const Snapshot old(cache);
  cache.reorder(positions({2, 0, 0}));  // repeats allowed; row 3 untouched
  CHECK(at::equal(cache.seq_lengths(), positions({1, 3, 3, 3})));
  const std::vector<int64_t> from = {2, 0, 0, 3};
  for (size_t l = 0; l < 2; ++l) {
    for (int64_t row = 0; row < 4; ++row) {
      INFO("layer " << l << ", row " << row);
      const int64_t src = from[static_cast<size_t>(row)];
      CHECK(bit_identical(cache.keys(static_cast<int64_t>(l))[row], old.keys[l][src]));
      CHECK(bit_identical(cache.values(static_cast<int64_t>(l))[row], old.values[l][src]));
      CHECK(at::equal(cache.slot_positions(static_cast<int64_t>(l))[row],
                      old.slot_positions[l][src]));
    }
  }
  const Snapshot before(cache);
  require_error([&] { cache.reorder(positions({0, 4})); }, {"indices[1]", "got 4"});
  CHECK(before.same_as(cache));
}

TEST_CASE("rollback drops every position at or past each row's new length", "[cache][rollback]") {
  StaticCache cache(ConfigBuilder().max_batch(3));
  write(cache, positions(3, {0, 1, 2, 3, 0, 1, 2, 3, 0, 1, 2, 3}));
  cache.rollback(positions({2, 4}));  // rows 0 and 1; row 2 untouched
  CHECK(at::equal(cache.seq_lengths(), positions({2, 4, 4})));
  for (int64_t l = 0; l < 2; ++l) {
    INFO("layer " << l);
    CHECK(at::equal(cache.slot_positions(l)[0].narrow(0, 0, 5), positions({0, 1, -1, -1, -1})));
    CHECK(stored(cache, l, 0, 1) == 1001);
    CHECK(all_true(cache.keys(l)[0].narrow(1, 2, 2).eq(0)));  // cleared as reset_rows clears
    CHECK(all_true(cache.values(l)[0].narrow(1, 2, 2).eq(0)));
    CHECK(stored(cache, l, 1, 3) == 2003);
  }
  cache.rollback(std::vector<int64_t>{2, 1, 3});  // the host form
  CHECK(at::equal(cache.seq_lengths(), positions({2, 1, 3})));
  CHECK(cache.slot_positions(1)[2][3].item<int64_t>() == -1);
  CHECK(stored(cache, 1, 2, 3) == 0);
  const Snapshot before(cache);
  require_error([&] { cache.rollback(std::vector<int64_t>{3}); },
                {"new_lengths[0]", "seq_length=2", "got 3"});
  require_error(
      [&] {
        cache.rollback(positions({0, 0, 0, 0}));
      },
      {"new_lengths", "max_batch=3", "got 4"});
  CHECK(before.same_as(cache));
  // Unchecked values are routed: negative = 0, past seq_lengths = no change.
  StaticCache unchecked(ConfigBuilder().max_batch(2).check_position_values(false));
  write(unchecked, positions(2, {0, 1, 2, 0, 1, 2}));
  unchecked.rollback(positions({9, -3}));
  CHECK(at::equal(unchecked.seq_lengths(), positions({3, 0})));
  CHECK(all_true(unchecked.slot_positions(0)[1].eq(-1)));
}

TEST_CASE("save_row copies a row's live slots and restore_row makes a row exactly that row",
          "[cache][row_state]") {
  const CacheConfig config = ConfigBuilder().max_batch(2).hybrid(4, 4);
  HybridCache source(config);
  write(source, positions(2, {0, 1, 2, 0, 1, -1}));
  const RowState state = source.save_row(0);
  CHECK(state.length == 3);
  CHECK(state.types == config.layer_types);
  CHECK(state.keys[1].sizes() == at::IntArrayRef({kKvHeads, 3, kDim}));  // full: [0, length)
  CHECK(state.keys[0].sizes() == at::IntArrayRef({kKvHeads, 7, kDim}));  // sliding: the ring
  CHECK(at::equal(state.positions[1], positions({0, 1, 2})));
  CHECK(state.keys[1].device().is_cpu());
  CHECK(bit_identical(state.keys[1], source.keys(1)[0].narrow(1, 0, 3)));
  const RowState known = source.save_row(0, 3, source.config().device);
  for (size_t l = 0; l < 2; ++l) {
    CHECK(bit_identical(known.keys[l], state.keys[l]));
    CHECK(bit_identical(known.values[l], state.values[l]));
    CHECK(at::equal(known.positions[l], state.positions[l]));
  }
  HybridCache target(config);
  write(target, positions(2, {0, 1, 2, 3, 0, 1, 2, 3}));  // row 1 longer than the saved row
  target.restore_row(state, 1);
  CHECK(at::equal(target.seq_lengths(), positions({4, 3})));
  for (int64_t l = 0; l < 2; ++l) {
    INFO("layer " << l);
    CHECK(bit_identical(target.keys(l)[1], source.keys(l)[0]));  // the rest cleared
    CHECK(bit_identical(target.values(l)[1], source.values(l)[0]));
    CHECK(at::equal(target.slot_positions(l)[1], source.slot_positions(l)[0]));
  }
  require_error([&] { source.save_row(1, 5, source.config().device); },
                {"length: expected row 1's seq_length=2", "got 5"});
  const Snapshot before(target);
  require_error([&] { target.restore_row(state, 2); }, {"row", "[0, max_batch=2)", "got 2"});
  CHECK(before.same_as(target));
}

TEST_CASE("copy_from makes an independent copy of a cache built from an equal config",
          "[cache][copy_from]") {
  const CacheConfig config = ConfigBuilder().max_batch(2).hybrid(4, 4);
  HybridCache source(config), copy(config);
  write(source, positions(2, {0, 1, 2, 0, 1, -1}));
  const std::vector<const void*> before = addresses(copy);
  copy.copy_from(source);
  CHECK(Snapshot(copy) == Snapshot(source));
  CHECK(addresses(copy) == before);  // nothing reallocated
  const Snapshot copied(copy);
  write(source, positions(2, {3, 2}));
  CHECK(copied.same_as(copy));
  const Snapshot source_now(source);
  copy.reset();
  CHECK(source_now.same_as(source));
  const HybridCache other(ConfigBuilder().max_batch(3).hybrid(4, 4));
  require_error([&] { copy.copy_from(other); }, {"other", "max_batch"});
}

// ==== Storage accessors ====

TEST_CASE("plain storage has no scales, staging buffer or offload ring", "[cache][storage]") {
  const StaticCache plain{ConfigBuilder()};
  CHECK_FALSE(plain.key_scales(0).defined());
  CHECK_FALSE(plain.value_scales(1).defined());
  CHECK_FALSE(plain.staging().defined());
  CHECK_FALSE(plain.offload_ring().defined());
  CHECK(plain.staging_bytes() == 0);
}

TEST_CASE("a quantized cache stores codes whose product with key_scales is the key",
          "[cache][storage]") {
  StaticCache cache(ConfigBuilder().max_batch(2).kv_storage(KvStorage::kInt8));
  const at::Tensor pos = positions(2, {0, 1, 0, 1});
  write(cache, pos);
  CHECK(cache.keys(0).scalar_type() == at::kChar);
  const std::vector<int64_t> scale_shape = {2, kKvHeads, 17, 1};
  CHECK(cache.key_scales(0).sizes() == at::IntArrayRef(scale_shape));
  CHECK(cache.value_scales(1).sizes() == at::IntArrayRef(scale_shape));
  CHECK(cache.key_scales(0).scalar_type() == at::kFloat);
  const at::Tensor keys = cache.keys(0).to(at::kFloat).mul(cache.key_scales(0)).narrow(2, 0, 2);
  const at::Tensor values = cache.values(1).to(at::kFloat).mul(cache.value_scales(1));
  CHECK(at::allclose(keys, codes(pos), /*rtol=*/1e-3, /*atol=*/0));
  CHECK(at::allclose(values.narrow(2, 0, 2), codes(pos).neg(), 1e-3, 0));
  // One staging buffer [max_batch, kv_heads, max_view_slots, head_dim] in the compute dtype.
  REQUIRE(cache.staging().defined());
  CHECK(cache.staging().keys().sizes() == at::IntArrayRef({2, kKvHeads, 16, kDim}));
  CHECK(cache.staging().keys().scalar_type() == at::kFloat);
  CHECK(cache.staging_bytes() == 2 * 2 * kKvHeads * 16 * kDim * 4);
  CHECK_FALSE(cache.offload_ring().defined());
}

TEST_CASE("an offloaded cache keeps its buffers on the host and views in a ring of two",
          "[cache][storage]") {
  StaticCache cache(ConfigBuilder().max_batch(2).host_offload(true));
  write(cache, positions(2, {0, 1, 0, 1}));
  CHECK(cache.keys(0).device().is_cpu());
  CHECK(stored(cache, 0, 1, 1) == 2001);
  CHECK(cache.values(1)[0][1][1][0].item<float>() == -1001);
  REQUIRE(cache.offload_ring().defined());
  for (int slot : {0, 1}) {
    CHECK(cache.offload_ring().buffer(slot).keys().sizes() ==
          at::IntArrayRef({2, kKvHeads, 17, kDim}));  // max_buffer_slots
  }
  CHECK(cache.staging_bytes() == 2 * 2 * 2 * kKvHeads * 17 * kDim * 4);
  CHECK_FALSE(cache.key_scales(0).defined());
  CHECK(cache.host_memory_bytes() == 2 * 2 * 2 * kKvHeads * 17 * kDim * 4);
}
