// The layer policies (include/statickv/layers.hpp): where a position lives
// in a layer's buffer. The host slot_of() is the specification, checked
// here against slot numbers listed by hand and computed independently;
// slots_of() must be the same mapping on tensors; view_len, window and the
// scratch slot follow the header's rules; slot_ring is the modulus the
// fused decode prepare may use; a policy refuses a size it cannot serve,
// naming it; make_layer_policy builds each type from a config.

#include "support.hpp"

#include <limits>

using namespace statickv;
using namespace statickv::test;

namespace {

constexpr int64_t kLowest = std::numeric_limits<int64_t>::min();
constexpr int64_t kHighest = std::numeric_limits<int64_t>::max();

/// slots_of over every position from -1 (the sanitized padding) to
/// max_len - 1, shaped [rows, cols] as a per-row step is, compared with
/// slot_of position by position.
void require_device_equals_host(const LayerPolicy& policy, int64_t max_len) {
  const int64_t count = max_len + 1;
  const at::Tensor pos = at::arange(-1, max_len, i64()).view({1, count});
  const at::Tensor slots = policy.slots_of(pos);
  REQUIRE(slots.sizes() == pos.sizes());
  REQUIRE(slots.scalar_type() == at::kLong);
  for (int64_t i = 0; i < count; ++i) {
    const int64_t p = i - 1;
    INFO("position " << p);
    CHECK(slots[0][i].item<int64_t>() == policy.slot_of(p));
  }
}

}  // namespace

TEST_CASE("full layers store position p in slot p and route the rest to scratch", "[layers]") {
  const FullAttentionLayer full(/*max_len=*/16);
  CHECK(full.capacity() == 16);
  CHECK(full.scratch_slot() == 16);
  CHECK(full.slot_of(0) == 0);
  CHECK(full.slot_of(15) == 15);
  CHECK(full.slot_of(16) == 16);
  CHECK(full.slot_of(-1) == 16);
  CHECK(full.view_len(5) == 5);
  CHECK(at::equal(full.slots_of(positions({0, 7, -1})), positions({0, 7, 16})));
}

TEST_CASE("sliding layers store position p in slot p % capacity", "[layers]") {
  const SlidingWindowLayer ring(/*window=*/4, /*capacity=*/6, /*max_len=*/100);
  CHECK(ring.slot_of(0) == 0);
  CHECK(ring.slot_of(5) == 5);
  CHECK(ring.slot_of(6) == 0);
  CHECK(ring.slot_of(99) == 99 % 6);
  CHECK(ring.slot_of(100) == 6);
  CHECK(ring.slot_of(-1) == 6);
  CHECK(ring.view_len(50) == 6);
  CHECK(at::equal(ring.slots_of(positions({13, -1, 6})), positions({1, 6, 0})));
}

TEST_CASE("a policy names its type, window and buffer: capacity slots plus the scratch slot",
          "[layers]") {
  const FullAttentionLayer full(/*max_len=*/16);
  CHECK(full.type() == LayerType::kFull);
  CHECK(full.window() == 0);  // unlimited
  CHECK(full.buffer_len() == 17);
  const SlidingWindowLayer ring(/*window=*/4, /*capacity=*/6, /*max_len=*/100);
  CHECK(ring.type() == LayerType::kSliding);
  CHECK(ring.window() == 4);
  CHECK(ring.capacity() == 6);
  CHECK(ring.scratch_slot() == 6);
  CHECK(ring.buffer_len() == 7);
  // A ring capped at max_len (Note [ring capacity]) still has its scratch slot past it.
  const SlidingWindowLayer capped(/*window=*/8, /*capacity=*/10, /*max_len=*/10);
  CHECK(capped.capacity() == 10);
  CHECK(capped.scratch_slot() == 10);
  CHECK(capped.buffer_len() == 11);
}

TEST_CASE("slot_of sends every position below 0 or at max_len and past to the scratch slot",
          "[layers]") {
  const FullAttentionLayer full(/*max_len=*/8);
  const SlidingWindowLayer ring(/*window=*/3, /*capacity=*/5, /*max_len=*/8);
  for (const int64_t p : {int64_t{-2}, int64_t{-7}, kLowest, int64_t{8}, int64_t{9}, kHighest}) {
    INFO("position " << p);
    CHECK(full.slot_of(p) == 8);
    CHECK(ring.slot_of(p) == 5);
  }
  // Every stored position lands inside the visible slots, in a slot listed by hand.
  const std::vector<int64_t> ring_slots = {0, 1, 2, 3, 4, 0, 1, 2};  // p % 5
  for (int64_t p = 0; p < 8; ++p) {
    INFO("position " << p);
    CHECK(full.slot_of(p) == p);
    CHECK(ring.slot_of(p) == ring_slots[static_cast<size_t>(p)]);
  }
}

TEST_CASE("slots_of on a tensor is slot_of for every sanitized position, in any shape",
          "[layers]") {
  require_device_equals_host(FullAttentionLayer(/*max_len=*/12), 12);
  for (const int64_t capacity : {1, 4, 5, 12}) {
    INFO("ring capacity " << capacity);
    require_device_equals_host(SlidingWindowLayer(/*window=*/1, capacity, /*max_len=*/12), 12);
  }
  // Per-row positions [b, q] keep their shape, row by row.
  const SlidingWindowLayer ring(/*window=*/2, /*capacity=*/3, /*max_len=*/20);
  CHECK(at::equal(ring.slots_of(positions(2, {7, 8, -1, -1, 0, 19})),
                  positions(2, {1, 2, 3, 3, 0, 1})));
  const FullAttentionLayer full(/*max_len=*/20);
  CHECK(at::equal(full.slots_of(positions(2, {7, 8, -1, -1, 0, 19})),
                  positions(2, {7, 8, 20, 20, 0, 19})));
}

TEST_CASE("a full layer's views cover the attended length, a ring's always the whole ring",
          "[layers]") {
  const FullAttentionLayer full(/*max_len=*/16);
  const SlidingWindowLayer ring(/*window=*/4, /*capacity=*/6, /*max_len=*/16);
  // attend_len -> a full layer's view: the attended length, never past max_len.
  const std::vector<std::pair<int64_t, int64_t>> table = {{0, 0},   {1, 1},   {5, 5},    {15, 15},
                                                          {16, 16}, {17, 16}, {1000, 16}};
  for (const auto& [attend_len, expected] : table) {
    INFO("attend_len " << attend_len);
    CHECK(full.view_len(attend_len) == expected);
    CHECK(ring.view_len(attend_len) == 6);
  }
}

TEST_CASE("make_layer_policy builds each layer type with the config's sizes", "[layers]") {
  const CacheConfig config = ConfigBuilder().max_len(32).sliding_window(4).max_chunk(3);
  const auto full = make_layer_policy(config, LayerType::kFull);
  CHECK(full->type() == LayerType::kFull);
  CHECK(full->capacity() == 32);
  CHECK(full->window() == 0);
  const auto ring = make_layer_policy(config, LayerType::kSliding);
  CHECK(ring->type() == LayerType::kSliding);
  CHECK(ring->window() == 4);
  CHECK(ring->capacity() == 4 + 3 - 1);  // window + max_chunk - 1
  CHECK(ring->slot_of(6) == 0);
  CHECK(ring->slot_of(32) == 6);  // past max_len: the scratch slot

  const CacheConfig decode_only = ConfigBuilder().max_len(32).sliding_window(4).max_chunk(1);
  CHECK(make_layer_policy(decode_only, LayerType::kSliding)->capacity() == 4);
  const CacheConfig capped = ConfigBuilder().max_len(10).sliding_window(8).max_chunk(8);
  CHECK(make_layer_policy(capped, LayerType::kSliding)->capacity() == 10);  // capped at max_len
}

TEST_CASE("a policy refuses a size it cannot serve, naming it", "[layers][errors]") {
  require_error([] { FullAttentionLayer(0); }, {"FullAttentionLayer", "max_len > 0", "got 0"});
  require_error([] { FullAttentionLayer{kLowest}; },
                {"FullAttentionLayer", "max_len > 0", "got -9223372036854775808"});
  require_error([] { SlidingWindowLayer(/*window=*/0, /*capacity=*/4, /*max_len=*/8); },
                {"SlidingWindowLayer", "window > 0", "got 0"});
  require_error([] { SlidingWindowLayer(/*window=*/-3, /*capacity=*/4, /*max_len=*/8); },
                {"SlidingWindowLayer", "window > 0", "got -3"});
  require_error([] { SlidingWindowLayer(/*window=*/2, /*capacity=*/0, /*max_len=*/8); },
                {"SlidingWindowLayer", "capacity in [1, max_len=8]", "got 0"});
  require_error([] { SlidingWindowLayer(/*window=*/2, /*capacity=*/9, /*max_len=*/8); },
                {"SlidingWindowLayer", "capacity in [1, max_len=8]", "got 9"});
  CHECK_NOTHROW(SlidingWindowLayer(/*window=*/2, /*capacity=*/8, /*max_len=*/8));
  CHECK_NOTHROW(FullAttentionLayer(1));
}

TEST_CASE("slot_ring is the modulus of slot_of for stored positions, or -1 for another mapping",
          "[layers]") {
  const FullAttentionLayer full(/*max_len=*/16);
  const SlidingWindowLayer ring(/*window=*/4, /*capacity=*/6, /*max_len=*/16);
  CHECK(full.slot_ring() == 0);  // p itself
  CHECK(ring.slot_ring() == 6);  // p % capacity
  for (int64_t p = 0; p < 16; ++p) {
    INFO("position " << p);
    CHECK(full.slot_of(p) == p);
    CHECK(ring.slot_of(p) == p % ring.slot_ring());
  }
  // A policy whose mapping is not of that form keeps the default: -1.
  struct Reversed final : LayerPolicy {
    LayerType type() const override { return LayerType::kFull; }
    int64_t capacity() const override { return 4; }
    int64_t window() const override { return 0; }
    int64_t view_len(int64_t) const override { return 4; }
    int64_t slot_of(int64_t pos) const override { return pos >= 0 && pos < 4 ? 3 - pos : 4; }
    at::Tensor slots_of(const at::Tensor& pos) const override {
      return at::where(pos.ge(0), pos.neg().add(3), 4);
    }
  };
  const Reversed reversed;
  CHECK(reversed.slot_ring() == -1);
  CHECK(reversed.slot_of(0) == 3);  // indeed neither p nor p % anything
}
