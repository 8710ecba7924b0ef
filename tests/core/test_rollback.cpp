// Rollback (Note [ring rollback], docs/design.md): taking back the newest
// positions of each row, as speculative decoding takes back rejected drafts.
// The specification: rollback then decode equals never having written the
// drafts, NaN in a rejected draft included; a sliding ring takes back what it
// can take back exactly and refuses a deeper rollback, leaving the cache as
// it was; device-resident lengths are routed, never read.

#include "support.hpp"

#include <limits>
#include <memory>

namespace {

using namespace statickv;
using namespace statickv::test;

constexpr float kNaN = std::numeric_limits<float>::quiet_NaN();

/// Writes the same keys and values at `pos` ([b, q], -1 = padding) into
/// every layer of `cache`; seeds make the two caches of a test get equal data.
void write(Cache& cache, const at::Tensor& pos, uint64_t seed, bool poison = false) {
  const CacheConfig& c = cache.config();
  const int64_t b = pos.size(0);
  const int64_t q = pos.size(1);
  const StepPlan step = cache.prepare(pos, b);
  at::manual_seed(seed);
  for (int64_t l = 0; l < c.num_layers; ++l) {
    at::Tensor k = at::randn({b, c.num_kv_heads, q, c.head_dim});
    at::Tensor v = at::randn_like(k);
    if (poison) {
      k.fill_(kNaN);
      v.fill_(kNaN);
    }
    cache.update(l, k, v, step);
  }
}

/// Prompt positions 0..len-1 for `b` rows, in chunks of at most max_chunk.
void prefill(Cache& cache, int64_t b, int64_t len) {
  const int64_t chunk = cache.config().effective_max_chunk();
  for (int64_t start = 0; start < len; start += chunk) {
    const int64_t n = std::min(chunk, len - start);
    write(cache, arange_positions(start, n).unsqueeze(0).expand({b, n}).contiguous(),
          100 + static_cast<uint64_t>(start));
  }
}

/// One decode token per row at its seq_length; returns each layer's
/// attention output, [layers][b, heads, 1, head_dim].
std::vector<at::Tensor> decode(Cache& cache, int64_t b, uint64_t seed) {
  const CacheConfig& c = cache.config();
  const at::Tensor pos = cache.seq_lengths().narrow(0, 0, b).view({b, 1}).clone();
  const StepPlan step = cache.prepare(pos, b);
  at::manual_seed(seed);
  std::vector<at::Tensor> outputs;
  for (int64_t l = 0; l < c.num_layers; ++l) {
    const at::Tensor k = at::randn({b, c.num_kv_heads, 1, c.head_dim});
    const at::Tensor query = at::randn({b, 2 * c.num_kv_heads, 1, c.head_dim});
    const KV kv = cache.update(l, k, at::randn_like(k), step);
    outputs.push_back(reference_attention(query, kv.keys, kv.values, step.mask(l)));
  }
  return outputs;
}

}  // namespace

TEST_CASE("rollback then decode equals never having written the drafts, NaN drafts included",
          "[cache][rollback]") {
  // Two rows, a 10-token prompt, 4 draft positions (a verification step of
  // 3 drafts, q = 4 = max_chunk); row 0 rejects all 4 (the deepest rollback
  // a ring of window + max_chunk - 1 takes back), row 1 keeps 2. The
  // rejected drafts are NaN.
  const std::vector<std::pair<const char*, CacheConfig>> layouts = {
      {"static", ConfigBuilder().max_batch(2).max_len(32).max_chunk(4)},
      {"hybrid", ConfigBuilder().max_batch(2).max_len(32).hybrid(/*window=*/4, /*chunk=*/4)},
      {"static int8",
       ConfigBuilder().max_batch(2).max_len(32).max_chunk(4).kv_storage(KvStorage::kInt8)},
      {"hybrid fp8",
       ConfigBuilder().max_batch(2).max_len(32).hybrid(4, 4).kv_storage(KvStorage::kFp8E4m3)},
  };
  for (const auto& [name, config] : layouts) {
    INFO(name);
    auto drafted = make_cache(config);
    auto plain = make_cache(config);
    prefill(*drafted, 2, 10);
    prefill(*plain, 2, 10);
    std::vector<const void*> addresses;
    for (int64_t l = 0; l < 2; ++l) addresses.push_back(drafted->keys(l).data_ptr());

    // The accepted drafts get the same data in both caches (seed 7); the
    // rejected ones, NaN, only in `drafted`.
    write(*drafted, positions(2, {10, 11, 12, 13, 10, 11, 12, 13}), 7);
    write(*drafted, positions(2, {10, 11, 12, 13, -1, -1, 12, 13}), 8, /*poison=*/true);
    write(*plain, positions(2, {-1, -1, -1, -1, 10, 11, -1, -1}), 7);
    drafted->rollback(positions({10, 12}));

    CHECK(at::equal(drafted->seq_lengths(), plain->seq_lengths()));
    for (int64_t l = 0; l < 2; ++l) {
      CHECK(drafted->keys(l).data_ptr() == addresses[static_cast<size_t>(l)]);
      if (drafted->layer(l).type() != LayerType::kFull) continue;
      // Full layers: every visible slot bit-identical to never having drafted.
      const int64_t cap = drafted->capacity(l);
      CHECK(bit_identical(drafted->keys(l).narrow(2, 0, cap), plain->keys(l).narrow(2, 0, cap)));
      CHECK(
          bit_identical(drafted->values(l).narrow(2, 0, cap), plain->values(l).narrow(2, 0, cap)));
      CHECK(at::equal(drafted->slot_positions(l), plain->slot_positions(l)));
    }
    for (uint64_t t = 0; t < 8; ++t) {  // past the ring's capacity of 7
      const auto got = decode(*drafted, 2, 50 + t);
      const auto want = decode(*plain, 2, 50 + t);
      for (size_t l = 0; l < got.size(); ++l) {
        INFO("decode step " << t << ", layer " << l);
        CHECK(at::isfinite(got[l]).all().item<bool>());
        CHECK(close(got[l], want[l], 1e-6));
      }
    }
  }
}

TEST_CASE("a rollback deeper than a ring keeps is refused and leaves the cache bit-identical",
          "[cache][rollback][errors]") {
  HybridCache cache(ConfigBuilder().max_batch(2).max_len(32).hybrid(/*window=*/4, /*chunk=*/4));
  prefill(cache, 2, 14);
  {
    const Snapshot before(cache);
    require_error(
        [&] {
          cache.rollback(std::vector<int64_t>{14, 9});
        },
        {"new_lengths[1]", "capacity 7", "max_chunk=4", "Note [ring rollback]", "got 9"});
    CHECK(before.same_as(cache));
    // The tensor form checks host-resident lengths the same way.
    require_error([&] { cache.rollback(positions({9, 14})); }, {"new_lengths[0]", "got 9"});
    CHECK(before.same_as(cache));
  }
  // max_chunk positions past the newest ever written, not past seq_length:
  // taking back 4, writing 1 and taking back 4 again reaches too far.
  cache.rollback(std::vector<int64_t>{10, 10});
  write(cache, positions(2, {10, 10}), 3);
  const Snapshot before(cache);
  require_error(
      [&] {
        cache.rollback(std::vector<int64_t>{7, 11});
      },
      {"new_lengths[0]", "got 7", "position 4"});
  CHECK(before.same_as(cache));
  cache.rollback(std::vector<int64_t>{10, 10});  // within the limit: accepted
  CHECK(at::equal(cache.seq_lengths(), positions({10, 10})));
}

TEST_CASE("a ring that holds the whole sequence takes back any number of positions",
          "[cache][rollback]") {
  // capacity = min(window + max_chunk - 1, max_len) = max_len: it never wraps.
  HybridCache cache(ConfigBuilder().max_batch(1).max_len(8).hybrid(/*window=*/4, /*chunk=*/8));
  REQUIRE(cache.capacity(0) == 8);
  prefill(cache, 1, 8);
  const Snapshot before(cache);
  cache.rollback(std::vector<int64_t>{1});
  for (int64_t l = 0; l < 2; ++l) {
    const auto i = static_cast<size_t>(l);
    CHECK(at::equal(cache.slot_positions(l)[0], positions({0, -1, -1, -1, -1, -1, -1, -1})));
    CHECK(bit_identical(cache.keys(l).narrow(2, 0, 1), before.keys[i].narrow(2, 0, 1)));
    CHECK(cache.keys(l).narrow(2, 1, 7).eq(0).all().item<bool>());
    CHECK(cache.values(l).narrow(2, 1, 7).eq(0).all().item<bool>());
  }
  CHECK(at::equal(cache.seq_lengths(), positions({1})));
}

TEST_CASE("device-routed new lengths are not read: negative empties the row, too long keeps it",
          "[cache][rollback]") {
  const CacheConfig config =
      ConfigBuilder().max_batch(3).max_len(16).check_position_values(false).max_chunk(4);
  StaticCache cache(config);
  const StaticCache fresh(config);
  prefill(cache, 3, 6);
  const Snapshot before(cache);
  cache.rollback(positions({-5, 100}));  // rows 0 and 1; row 2 not touched
  for (int64_t l = 0; l < 2; ++l) {
    const int64_t cap = cache.capacity(l);
    CHECK(bit_identical(cache.keys(l)[0].narrow(1, 0, cap), fresh.keys(l)[0].narrow(1, 0, cap)));
    CHECK(at::equal(cache.slot_positions(l)[0], fresh.slot_positions(l)[0]));
    CHECK(bit_identical(cache.keys(l).narrow(0, 1, 2),
                        before.keys[static_cast<size_t>(l)].narrow(0, 1, 2)));
  }
  CHECK(at::equal(cache.seq_lengths(), positions({0, 6, 6})));
}
