// StagingBuffer (include/statickv/staging.hpp; Note [staging buffer],
// docs/design.md) on its own: its zeroed buffers allocated once, stage()'s
// batch-prefix views, layout()'s contiguous view of fewer slots, which
// (holder, stamp) holds it, and release(), which poisons the buffer with NaN
// in a debug build. The buffer inside quantized and offloaded caches:
// test_quantized.cpp and test_offload.cpp.

#include "support.hpp"

#include <statickv/staging.hpp>

using namespace statickv;
using namespace statickv::test;

namespace {

constexpr int64_t kBatch = 3, kSlots = 5;

StagingBuffer make_buffer() { return StagingBuffer(kBatch, kKvHeads, kSlots, kDim, f32()); }

}  // namespace

TEST_CASE("a StagingBuffer holds zeroed keys and values of its shape, and none when default-made",
          "[staging]") {
  const StagingBuffer none;
  CHECK_FALSE(none.defined());
  CHECK(none.nbytes() == 0);
  CHECK(none.holder() == -1);
  CHECK_FALSE(none.keys().defined());
  CHECK_FALSE(none.values().defined());

  const StagingBuffer buffer = make_buffer();
  CHECK(buffer.defined());
  CHECK(buffer.keys().sizes() == at::IntArrayRef({kBatch, kKvHeads, kSlots, kDim}));
  CHECK(buffer.values().sizes() == buffer.keys().sizes());
  CHECK(buffer.keys().scalar_type() == at::kFloat);
  CHECK(buffer.keys().eq(0).all().item<bool>());
  CHECK(buffer.values().eq(0).all().item<bool>());
  CHECK(buffer.keys().data_ptr() != buffer.values().data_ptr());
  CHECK(buffer.nbytes() == 2 * kBatch * kKvHeads * kSlots * kDim * 4);
  CHECK(buffer.holder() == -1);  // nothing staged yet
  const StagingBuffer wide(kBatch, kKvHeads, kSlots, kDim, f32().dtype(at::kDouble));
  CHECK(wide.nbytes() == 2 * buffer.nbytes());
}

TEST_CASE("stage gives views of the first rows and slots and makes its caller the one holder",
          "[staging]") {
  StagingBuffer buffer = make_buffer();
  const void* keys_at = buffer.keys().data_ptr();
  auto [keys, values] = buffer.stage(/*holder=*/1, /*stamp=*/7, /*rows=*/2, /*slots=*/3);
  CHECK(keys.sizes() == at::IntArrayRef({2, kKvHeads, 3, kDim}));
  CHECK(values.sizes() == keys.sizes());
  CHECK(keys.data_ptr() == keys_at);  // views of the buffer, its strides
  CHECK(values.data_ptr() == buffer.values().data_ptr());
  CHECK(keys.strides() == buffer.keys().strides());
  keys.fill_(1);
  values.fill_(2);
  const at::Tensor staged_keys = buffer.keys().narrow(0, 0, 2).narrow(2, 0, 3);
  CHECK(staged_keys.eq(1).all().item<bool>());
  CHECK(buffer.values().narrow(0, 0, 2).narrow(2, 0, 3).eq(2).all().item<bool>());
  CHECK(buffer.keys().sum().item<double>() == static_cast<double>(staged_keys.numel()));
  CHECK(buffer.holds(1, 7));
  CHECK_FALSE(buffer.holds(1, 8));
  CHECK_FALSE(buffer.holds(2, 7));
  CHECK(buffer.holder() == 1);
  // The next stage takes it over: the earlier one is no longer current.
  buffer.stage(2, 7, 3, kSlots);
  CHECK(buffer.holds(2, 7));
  CHECK_FALSE(buffer.holds(1, 7));
  CHECK(buffer.holder() == 2);
  CHECK(buffer.keys().data_ptr() == keys_at);  // allocated once
}

TEST_CASE("hold makes a caller the holder without staging", "[staging]") {
  StagingBuffer buffer = make_buffer();
  buffer.stage(1, 7, 2, 3);
  buffer.hold(4, 9);
  CHECK(buffer.holds(4, 9));
  CHECK_FALSE(buffer.holds(1, 7));
  CHECK(buffer.holder() == 4);
  CHECK(buffer.keys().eq(0).all().item<bool>());  // the buffer itself untouched
}

TEST_CASE("layout sees the buffer as a contiguous buffer of fewer slots over the same memory",
          "[staging]") {
  StagingBuffer buffer = make_buffer();
  buffer.keys().copy_(at::randn(buffer.keys().sizes(), f32()));
  buffer.values().copy_(at::randn(buffer.values().sizes(), f32()));
  for (int64_t slots : {int64_t{1}, int64_t{3}, kSlots}) {
    INFO("slots " << slots);
    const auto [keys, values] = buffer.layout(slots);
    const std::vector<int64_t> shape = {kBatch, kKvHeads, slots, kDim};
    CHECK(keys.sizes() == at::IntArrayRef(shape));
    CHECK(keys.is_contiguous());
    CHECK(values.is_contiguous());
    CHECK(keys.data_ptr() == buffer.keys().data_ptr());
    CHECK(values.data_ptr() == buffer.values().data_ptr());
    // Element [r, h, s, d] is element ((r * heads + h) * slots + s) * head_dim + d.
    const int64_t n = kBatch * kKvHeads * slots * kDim;
    CHECK(at::equal(keys, buffer.keys().view(-1).narrow(0, 0, n).view(shape)));
    CHECK(at::equal(values, buffer.values().view(-1).narrow(0, 0, n).view(shape)));
  }
  CHECK(at::equal(buffer.layout(kSlots).first, buffer.keys()));
  CHECK(buffer.holder() == -1);  // a layout holds nothing
}

TEST_CASE("layout refuses slots outside one to the buffer's slots by name", "[staging][errors]") {
  const StagingBuffer buffer = make_buffer();
  require_error([&] { buffer.layout(0); }, {"slots", "[1, 5]", "got 0"});
  require_error([&] { buffer.layout(kSlots + 1); }, {"slots", "[1, 5]", "got 6"});
}

TEST_CASE("release ends the hold, and a debug build fills the buffer with NaN", "[staging]") {
  StagingBuffer buffer = make_buffer();
  auto [keys, values] = buffer.stage(1, 7, 2, 3);
  keys.fill_(1);
  values.fill_(1);
  buffer.release();
  CHECK_FALSE(buffer.holds(1, 7));
  CHECK(buffer.holder() == -1);
#ifdef NDEBUG
  CHECK(keys.eq(1).all().item<bool>());  // release builds leave the contents
  CHECK(values.eq(1).all().item<bool>());
#else
  CHECK(at::isnan(buffer.keys()).all().item<bool>());
  CHECK(at::isnan(buffer.values()).all().item<bool>());
#endif
  StagingBuffer none;
  CHECK_NOTHROW(none.release());
  CHECK_FALSE(none.defined());
}
