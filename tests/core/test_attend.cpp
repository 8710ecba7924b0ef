// Cache::attend, the cache's attention entry point (Note [attention paths],
// docs/design.md), and the lazily built masks behind it (Note [lazy masks]).
// On the CPU attend takes the masked path; the varlen path's arguments are
// built here all the same and run through a plain-ATen emulation of
// FlashAttention's varlen semantics (tests/support.hpp), which pins their
// offsets and layouts without a GPU. The kernel itself: tests/cuda/test_cuda.cpp.

#include "support.hpp"

#include <thread>

using namespace statickv;
using namespace statickv::test;

namespace {

// A cache and a reference that keeps every token, driven with the same
// ragged steps; every step checks attend() and the varlen emulation of
// every layer against the reference, on the real tokens.
class Session {
 public:
  explicit Session(const CacheConfig& config)
      : cache_(config), max_batch_(config.max_batch), max_len_(config.max_len) {
    for (int64_t l = 0; l < config.num_layers; ++l) {
      const int64_t window = cache_.layer(l).window();
      refs_.emplace_back(max_batch_, kKvHeads, max_len_, kDim, window);
    }
  }

  Cache& cache() { return cache_; }
  std::vector<ReferenceLayer>& refs() { return refs_; }

  // One step over host positions [b, q] (-1 = padding).
  void step(const at::Tensor& pos) {
    const int64_t b = pos.size(0), q = pos.size(1);
    StepPlan plan = cache_.prepare(pos, b);
    const at::Tensor real = pos.ge(0).view({b, 1, q, 1});
    for (int64_t l = 0; l < cache_.num_layers(); ++l) {
      const at::Tensor k = at::randn({b, kKvHeads, q, kDim}, f32());
      const at::Tensor v = at::randn({b, kKvHeads, q, kDim}, f32());
      // Queries token-major, as a model computes them ([b, q, heads, D]).
      const at::Tensor query = at::randn({b, q, kHeads, kDim}, f32()).transpose(1, 2);
      const KV kv = cache_.update(l, k, v, plan);
      refs_[static_cast<size_t>(l)].write(pos, k, v);
      const at::Tensor want = refs_[static_cast<size_t>(l)].attend(query, pos).mul(real);
      const at::Tensor got = cache_.attend(l, query, kv, plan);
      INFO("layer " << l << " positions " << pos << " max diff " << max_diff(got.mul(real), want));
      REQUIRE(close(got.mul(real), want, 1e-5));
      if (cache_.layer(l).window() == 0) check_varlen(l, query, kv, plan, want, real);
    }
  }

 private:
  void check_varlen(int64_t l, const at::Tensor& query, const KV& kv, const StepPlan& plan,
                    const at::Tensor& want, const at::Tensor& real) {
    for (KvLayout layout : {KvLayout::kStridedView, KvLayout::kPackedCopy}) {
      const statickv::detail::VarlenArgs args = cache_.varlen_args(l, query, kv, plan, layout);
      const at::Tensor got = statickv::detail::unpack_varlen(args, emulate_flash_varlen(args));
      INFO("varlen layer " << l << " layout " << static_cast<int>(layout) << " max diff "
                           << max_diff(got, want));
      REQUIRE(at::isfinite(got).all().item<bool>());  // unpacking never reads the unwritten tail
      REQUIRE(close(got, want, 1e-5));
      // Padded queries get exactly 0.
      REQUIRE_FALSE(got.mul(real.logical_not()).any().item<bool>());
    }
  }

  Cache cache_;
  std::vector<ReferenceLayer> refs_;
  int64_t max_batch_, max_len_;
};

// Steps that bring row r to lengths[r] (or leave it if it is past), `chunk`
// tokens a step at most; each step padded to its longest row (right padding,
// or left padding when `left`), so rows carry different query lengths.
void prefill(Session& s, std::vector<int64_t>& have, const std::vector<int64_t>& lengths,
             int64_t chunk, bool left) {
  const auto b = static_cast<int64_t>(lengths.size());
  for (;;) {
    std::vector<int64_t> take(lengths.size());
    int64_t q = 0;
    for (size_t r = 0; r < lengths.size(); ++r) {
      take[r] = std::min(chunk, std::max<int64_t>(0, lengths[r] - have[r]));
      q = std::max(q, take[r]);
    }
    if (q == 0) return;
    at::Tensor pos = at::full({b, q}, -1, i64());
    for (int64_t r = 0; r < b; ++r) {
      const auto ur = static_cast<size_t>(r);
      const int64_t first = left ? q - take[ur] : 0;
      for (int64_t t = 0; t < take[ur]; ++t) pos[r][first + t] = have[ur] + t;
      have[ur] += take[ur];
    }
    s.step(pos);
  }
}

// Decode steps: each row one token past its length, padded once it is full.
void decode(Session& s, std::vector<int64_t>& have, int64_t steps, int64_t max_len) {
  const auto b = static_cast<int64_t>(have.size());
  for (int64_t i = 0; i < steps; ++i) {
    at::Tensor pos = at::full({b, 1}, -1, i64());
    for (int64_t r = 0; r < b; ++r) {
      const auto ur = static_cast<size_t>(r);
      if (have[ur] < max_len) pos[r][0] = have[ur]++;
    }
    s.step(pos);
  }
}

}  // namespace

TEST_CASE("attend equals the reference for every layer type, ragged rows and row operations",
          "[attend]") {
  const int64_t max_len = 16;
  // Live batch 3 of max_batch 4; all full, and a sliding ring beside a full layer.
  const std::vector<CacheConfig> configs = {
      ConfigBuilder().max_batch(4).max_len(max_len).max_chunk(5),
      ConfigBuilder().max_batch(4).max_len(max_len).hybrid(/*window=*/4, /*chunk=*/5)};
  for (const CacheConfig& config : configs) {
    for (bool left : {false, true}) {
      at::manual_seed(left ? 11 : 12);
      Session s(config);
      std::vector<int64_t> have = {0, 0, 0};
      // Ragged chunked prefill: rows of lengths 1, 16 and 7 in chunks of 5.
      prefill(s, have, {1, max_len, 7}, /*chunk=*/5, left);
      decode(s, have, 3, max_len);  // row 1 is full: a padded row
      // Row operations between steps: fork row 0 into row 2, reorder, reset row 1.
      s.cache().copy_row(0, 2);
      for (auto& ref : s.refs()) ref.copy_row(0, 2);
      have[2] = have[0];
      s.cache().reorder(positions({2, 0, 1}));
      for (auto& ref : s.refs()) ref.reorder({2, 0, 1});
      have = {have[2], have[0], have[1]};
      s.cache().reset_rows(positions({1}));
      for (auto& ref : s.refs()) ref.reset_row(1);
      have[1] = 0;
      prefill(s, have, {have[0] + 2, 9, have[2]}, /*chunk=*/4, left);
      decode(s, have, max_len, max_len);  // until every row is full
      CHECK(have == std::vector<int64_t>{max_len, max_len, max_len});
    }
  }
}

TEST_CASE("attend with shared positions equals the masked path, on both varlen layouts",
          "[attend]") {
  at::manual_seed(3);
  StaticCache cache(ConfigBuilder().max_batch(4).max_len(16));
  for (int64_t start : {0, 6}) {
    const int64_t q = start == 0 ? 6 : 1;
    StepPlan step = cache.prepare(arange_positions(start, q), /*live_batch=*/2);
    const at::Tensor query = at::randn({2, kHeads, q, kDim}, f32());
    const at::Tensor kv = at::randn({2, kKvHeads, q, kDim}, f32());
    const KV views = cache.update(0, kv, kv, step);
    const at::Tensor masked =
        sdpa_attention(query, views.keys, views.values, step.additive_mask(0));
    CHECK(cache.attention_path(0, query) == AttentionPath::kMasked);  // a CPU cache
    CHECK(at::equal(cache.attend(0, query, views, step), masked));
    CHECK(at::equal(cache.attend(0, query, views, step, AttentionPath::kMasked), masked));
    for (KvLayout layout : {KvLayout::kStridedView, KvLayout::kPackedCopy}) {
      const statickv::detail::VarlenArgs args = cache.varlen_args(0, query, views, step, layout);
      CHECK(close(statickv::detail::unpack_varlen(args, emulate_flash_varlen(args)), masked, 1e-5));
    }
  }
}

TEST_CASE("the varlen path's strided view is the cache buffer itself, at the documented offsets",
          "[attend]") {
  const int64_t max_batch = 4, max_len = 16, slots = max_len + 1;  // + the scratch slot
  StaticCache cache(ConfigBuilder().max_batch(max_batch).max_len(max_len));
  // Rows 0..2 at lengths 5, 1 and 9, then one decode step with row 1 padded.
  StepPlan step = cache.prepare(positions(3, {0,  1,  2,  3,  4, -1, -1, -1, -1, 0, -1, -1, -1, -1,
                                              -1, -1, -1, -1, 0, 1,  2,  3,  4,  5, 6,  7,  8}),
                                3, /*attend_len=*/12);
  const at::Tensor kv = at::randn({3, kKvHeads, 9, kDim}, f32());
  cache.update(0, kv, kv, step);
  const at::Tensor query = at::randn({3, kHeads, 9, kDim}, f32());
  KV views = cache.update(1, kv, kv, step);
  statickv::detail::VarlenArgs args = cache.varlen_args(1, query, views, step);
  CHECK(args.layout == KvLayout::kStridedView);
  CHECK(args.keys.data_ptr() == cache.keys(1).data_ptr());
  CHECK(args.values.data_ptr() == cache.values(1).data_ptr());
  CHECK(args.keys.strides() == at::IntArrayRef({kDim, slots * kDim, 1}));
  CHECK(args.keys.sizes() == at::IntArrayRef({2 * kKvHeads * slots + slots, kKvHeads, kDim}));
  CHECK(at::equal(args.cum_seq_k, at::tensor({0, 1, 2, 3}, at::kInt).mul(kKvHeads * slots)));
  CHECK(at::equal(args.cum_seq_q, at::tensor({0, 5, 6, 15}, at::kInt)));
  CHECK(at::equal(args.seqused_k, at::tensor({5, 1, 9}, at::kInt)));
  CHECK(args.max_q == 9);
  CHECK(args.max_k == 12);  // attend_len: the view length
  CHECK(args.causal);
  // Token t of row r, head h in the view is slot t of [r, h] in the buffer.
  CHECK(at::equal(args.keys.narrow(0, 2 * kKvHeads * slots, 9).select(1, 1),
                  cache.keys(1)[2][1].narrow(0, 0, 9)));
  // Packed copy: row r at r * view_len.
  const statickv::detail::VarlenArgs packed =
      cache.varlen_args(1, query, views, step, KvLayout::kPackedCopy);
  CHECK(at::equal(packed.cum_seq_k, at::tensor({0, 12, 24, 36}, at::kInt)));

  // Decode: one query per row, no packing; a padded row reads no key.
  step = cache.prepare(positions(3, {5, -1, 9}), 3, 12);
  views = cache.update(1, kv.narrow(2, 0, 1), kv.narrow(2, 0, 1), step);
  args = cache.varlen_args(1, query.narrow(2, 0, 1), views, step);
  CHECK(at::equal(args.cum_seq_q, at::tensor({0, 1, 2, 3}, at::kInt)));
  CHECK(at::equal(args.seqused_k, at::tensor({6, 0, 10}, at::kInt)));
  CHECK_FALSE(args.causal);
  CHECK_FALSE(args.order.defined());
}

TEST_CASE("masks are built on first use, and prepare() runs fewer ATen ops for it", "[attend]") {
  const CacheConfig lazy_config = ConfigBuilder().max_batch(4).max_len(16).hybrid(4, 4);
  CacheConfig eager_config = lazy_config;
  eager_config.eager_masks = true;
  HybridCache lazy(lazy_config), eager(eager_config);
  const at::Tensor kv = at::randn({3, kKvHeads, 4, kDim}, f32());
  for (Cache* c : {&lazy, &eager}) {  // prefill, masks dropped unused
    StepPlan step = c->prepare(positions(3, {0, 1, 2, 3, 0, 1, -1, -1, 0, 1, 2, -1}), 3);
    for (int64_t l = 0; l < 2; ++l) c->update(l, kv, kv, step);
  }
  const at::Tensor pos = positions(3, {4, 2, 3});
  int64_t lazy_ops = 0, eager_ops = 0, mask_ops = 0;
  StepPlan lazy_step, eager_step;
  {
    OpCounter ops;
    lazy_step = lazy.prepare(pos, 3);
    lazy_ops = ops.launches();
  }
  {
    OpCounter ops;
    eager_step = eager.prepare(pos, 3);
    eager_ops = ops.launches();
  }
  {
    OpCounter ops;
    for (int64_t l = 0; l < 2; ++l) lazy_step.additive_mask(l);
    mask_ops = ops.launches();
  }
  std::cout << "ATen ops of one per-row decode prepare() (a sliding and a full layer type): "
            << eager_ops << " with eager masks, " << lazy_ops << " lazy; building both layer "
            << "types' masks on first use: " << mask_ops << "\n";
  // Lazy, the step is the one fused kernel (Note [decode prepare]); eager,
  // the composition builds the masks too.
  CHECK(lazy_ops == 1);
  CHECK(mask_ops > 0);
  CHECK(lazy_ops + mask_ops < eager_ops);
  for (int64_t l = 0; l < 2; ++l) {
    CHECK(at::equal(lazy_step.mask(l), eager_step.mask(l)));
    CHECK(at::equal(lazy_step.additive_mask(l), eager_step.additive_mask(l)));
  }
}

TEST_CASE("a held StepPlan's unbuilt masks describe its own step after the cache moves on",
          "[attend]") {
  const CacheConfig lazy_config = ConfigBuilder().max_batch(2).max_len(16).hybrid(4, 4);
  CacheConfig eager_config = lazy_config;
  eager_config.eager_masks = true;
  HybridCache lazy(lazy_config), eager(eager_config);
  std::vector<StepPlan> lazy_steps, eager_steps;
  for (int64_t t = 0; t < 7; ++t) {
    const at::Tensor pos = positions(2, {t, t == 3 ? -1 : t});
    lazy_steps.push_back(lazy.prepare(pos, 2));
    eager_steps.push_back(eager.prepare(pos, 2));
    if (t == 4) {  // row operations retire a held plan too
      lazy.copy_row(0, 1);
      eager.copy_row(0, 1);
    }
    if (t == 5) {  // so does a rollback (speculative decoding's rejected drafts)
      lazy.rollback(std::vector<int64_t>{5, 4});
      eager.rollback(std::vector<int64_t>{5, 4});
    }
  }
  // And a restored row: the latest plan's masks are those of before.
  lazy_steps.push_back(lazy.prepare(positions(2, {7, 7}), 2));
  eager_steps.push_back(eager.prepare(positions(2, {7, 7}), 2));
  lazy.restore_row(lazy.save_row(0), 1);
  eager.restore_row(eager.save_row(0), 1);
  lazy.reset();
  for (size_t i = 0; i < lazy_steps.size(); ++i) {
    for (int64_t l = 0; l < 2; ++l) {
      INFO("step " << i << " layer " << l);
      CHECK(at::equal(lazy_steps[i].mask(l), eager_steps[i].mask(l)));
    }
  }
  // Dropped plans cost nothing: a prepare() after a dropped plan runs as few
  // ops as one after a plan whose masks were already built; one after a held
  // plan with unbuilt masks builds them first.
  int64_t after_dropped = 0, after_built = 0, after_unbuilt = 0;
  { StepPlan dropped = lazy.prepare(positions(2, {0, 0}), 2); }
  StepPlan next;
  {
    OpCounter ops;
    next = lazy.prepare(positions(2, {1, 1}), 2);
    after_dropped = ops.launches();
  }
  next.mask(0);
  next.mask(1);
  {
    OpCounter ops;
    next = lazy.prepare(positions(2, {2, 2}), 2);
    after_built = ops.launches();
  }
  {
    OpCounter ops;
    next = lazy.prepare(positions(2, {3, 3}), 2);
    after_unbuilt = ops.launches();
  }
  CHECK(after_dropped == after_built);
  CHECK(after_unbuilt > after_built);
}

TEST_CASE("concurrent first calls build a StepPlan's mask once", "[attend]") {
  HybridCache cache(ConfigBuilder().max_batch(2).max_len(16).hybrid(4, 4));
  const StepPlan step = cache.prepare(positions(2, {0, 1}), 2);
  std::vector<const void*> seen(8);
  std::vector<std::thread> threads;
  for (size_t i = 0; i < seen.size(); ++i) {
    threads.emplace_back(
        [&, i] { seen[i] = step.additive_mask(static_cast<int64_t>(i % 2)).data_ptr(); });
  }
  for (auto& t : threads) t.join();
  for (size_t i = 2; i < seen.size(); ++i) CHECK(seen[i] == seen[i % 2]);
  CHECK(seen[0] != seen[1]);  // two layer types, two masks
}

TEST_CASE("attend refuses bad arguments by name before computing anything", "[attend]") {
  HybridCache cache(ConfigBuilder().max_batch(2).max_len(16).hybrid(4, 4));
  HybridCache other(ConfigBuilder().max_batch(2).max_len(16).hybrid(4, 4));
  StepPlan step = cache.prepare(positions(2, {0, 0}), 2);
  const at::Tensor kv = at::randn({2, kKvHeads, 1, kDim}, f32());
  const KV views0 = cache.update(0, kv, kv, step);
  const KV views1 = cache.update(1, kv, kv, step);
  const at::Tensor query = at::randn({2, kHeads, 1, kDim}, f32());
  require_error([&] { cache.attend(1, query.narrow(0, 0, 1), views1, step); },
                {"query", "[live_batch, heads, q, head_dim]", "[1, 4, 1, 8]"});
  require_error([&] { cache.attend(1, query.narrow(1, 0, 3), views1, step); },
                {"query", "multiple of kv_heads=2", "3"});
  require_error([&] { cache.attend(1, query.to(at::kDouble), views1, step); },
                {"query", "dtype Float", "Double"});
  require_error([&] { cache.attend(1, query, views0, step); },
                {"kv.keys", "layer 1", "not a view of that buffer"});
  require_error(
      [&] {
        cache.attend(1, query, KV{views1.keys.contiguous(), views1.values}, step);
      },
      {"kv.keys", "update(1, ...)"});
  require_error([&] { cache.attend(2, query, views1, step); }, {"layer", "[0, 2)", "2"});
  require_error([&] { other.attend(1, query, views1, step); }, {"step", "another cache"});
  require_error([&] { cache.attend(1, query, views1, step, AttentionPath::kVarlen); },
                {"path", "varlen", "CPU"});
  require_error([&] { cache.attend(0, query, views0, step, AttentionPath::kVarlen); },
                {"path", "sliding-window layer"});
  require_error([&] { cache.varlen_args(0, query, views0, step); },
                {"layer", "full-attention layer", "sliding"});
  const StepPlan stale = step;
  step = cache.prepare(positions(2, {1, 1}), 2);
  require_error([&] { cache.attend(1, query, views1, stale); }, {"step", "stale"});
}
