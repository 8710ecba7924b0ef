// The varlen path's argument builders (include/statickv/varlen.hpp; Note
// [attention paths], docs/design.md), called directly on the CPU: the
// per-row arguments from step positions, the two key layouts and where each
// row's keys start in them, packing queries and unpacking the output, and,
// run through tests/support.hpp's emulation of FlashAttention's varlen
// semantics, the masked attention over the same keys. Cache::varlen_args
// and attend over real caches: test_attend.cpp; the kernel itself:
// tests/cuda/test_cuda.cpp.

#include "support.hpp"

#include <limits>
#include <utility>
#include <vector>

using namespace statickv;
using namespace statickv::test;
namespace sd = statickv::detail;
using statickv::detail::VarlenArgs;
using statickv::detail::VarlenRows;

namespace {

at::Tensor ints(std::vector<int32_t> values) { return at::tensor(values, at::kInt); }

at::Tensor arange32(int64_t n) { return at::arange(n, at::TensorOptions().dtype(at::kInt)); }

// Ragged positions [3, 4]: a right-padded row, a left-padded one and a row
// that is all padding.
at::Tensor ragged() { return positions(3, {2, 3, 4, -1, -1, -1, 5, 6, -1, -1, -1, -1}); }

// Everything the varlen path builds for `query` over `keys`/`values` (views
// [b, kv_heads, view_len, head_dim]) at positions `pos` [b or 1, q].
VarlenArgs build_args(const at::Tensor& query, const at::Tensor& keys, const at::Tensor& values,
                      const at::Tensor& pos, KvLayout layout) {
  const int64_t b = query.size(0), q = query.size(2), view_len = keys.size(2);
  const VarlenRows rows = sd::varlen_rows(pos, b, view_len, arange32(b + 1));
  VarlenArgs args;
  args.query = sd::varlen_query(query, rows);
  args.keys = sd::varlen_keys(keys, layout);
  args.values = sd::varlen_keys(values, layout);
  args.cum_seq_q = rows.cum_seq_q;
  args.cum_seq_k = sd::varlen_key_starts(keys, layout, arange32(b + 1));
  args.seqused_k = rows.seqused_k;
  args.max_q = q;
  args.max_k = view_len;
  args.causal = q > 1;
  args.order = rows.order;
  args.padded = rows.padded;
  args.batch = b;
  args.query_len = q;
  args.layout = layout;
  return args;
}

}  // namespace

TEST_CASE(
    "varlen_rows packs each row's real queries in token order and bounds its keys by its "
    "newest position",
    "[varlen]") {
  const VarlenRows rows = sd::varlen_rows(ragged(), 3, /*view_len=*/8, arange32(5));
  CHECK(at::equal(rows.cum_seq_q, ints({0, 3, 5, 5})));
  CHECK(at::equal(rows.seqused_k, ints({5, 7, 0})));
  // Real tokens first, row-major (0, 1, 2 of row 0; 2, 3 of row 1), then
  // the padded ones in order.
  CHECK(at::equal(rows.order, positions({0, 1, 2, 6, 7, 3, 4, 5, 8, 9, 10, 11})));
  CHECK(rows.padded.sizes() == at::IntArrayRef({12, 1, 1}));
  CHECK(at::equal(rows.padded.view(-1), ragged().lt(0).view(-1)));
  // Keys are bounded by the view: a position past it reads the whole view.
  CHECK(at::equal(sd::varlen_rows(ragged(), 3, 6, arange32(5)).seqused_k, ints({5, 6, 0})));
  // Shared positions [1, q] stand for every row.
  const VarlenRows shared = sd::varlen_rows(positions(1, {4, 5}), 2, 8, arange32(3));
  CHECK(at::equal(shared.cum_seq_q, ints({0, 2, 4})));
  CHECK(at::equal(shared.seqused_k, ints({6, 6})));
  // One query a row: no packing, and a padded row reads no key.
  const VarlenRows decode = sd::varlen_rows(positions(3, {4, -1, 9}), 3, 8, arange32(4));
  CHECK(at::equal(decode.cum_seq_q, ints({0, 1, 2, 3})));
  CHECK(at::equal(decode.seqused_k, ints({5, 0, 8})));
  CHECK_FALSE(decode.order.defined());
  CHECK_FALSE(decode.padded.defined());
}

TEST_CASE("varlen_keys and varlen_key_starts put row r slot s of kv head h where the layouts say",
          "[varlen]") {
  const int64_t max_batch = 4, heads = 2, slots = 6, dim = 3, b = 3, view_len = 5;
  const at::Tensor buffer =
      at::arange(max_batch * heads * slots * dim, f32()).view({max_batch, heads, slots, dim});
  const at::Tensor view = sd::batch_prefix(buffer, b, view_len);
  const at::Tensor strided = sd::varlen_keys(view, KvLayout::kStridedView);
  CHECK(strided.data_ptr() == buffer.data_ptr());  // the buffer itself, no copy
  CHECK(strided.sizes() == at::IntArrayRef({(b - 1) * heads * slots + slots, heads, dim}));
  CHECK(strided.strides() == at::IntArrayRef({dim, slots * dim, 1}));
  const at::Tensor packed = sd::varlen_keys(view, KvLayout::kPackedCopy);
  CHECK(packed.sizes() == at::IntArrayRef({b * view_len, heads, dim}));
  CHECK(packed.is_contiguous());
  const at::Tensor strided_starts =
      sd::varlen_key_starts(view, KvLayout::kStridedView, arange32(8));
  const at::Tensor packed_starts = sd::varlen_key_starts(view, KvLayout::kPackedCopy, arange32(8));
  CHECK(at::equal(strided_starts, ints({0, 12, 24, 36})));  // r * heads * slots
  CHECK(at::equal(packed_starts, ints({0, 5, 10, 15})));    // r * view_len
  for (int64_t r = 0; r < b; ++r) {
    for (int64_t h = 0; h < heads; ++h) {
      for (int64_t s = 0; s < view_len; ++s) {
        INFO("row " << r << " head " << h << " slot " << s);
        const at::Tensor want = buffer[r][h][s];
        CHECK(at::equal(strided[strided_starts[r].item<int>() + s][h], want));
        CHECK(at::equal(packed[packed_starts[r].item<int>() + s][h], want));
      }
    }
  }
}

TEST_CASE(
    "varlen_query packs the real tokens first and unpack_varlen puts them back with padded "
    "tokens zero",
    "[varlen]") {
  at::manual_seed(1);
  const at::Tensor pos = ragged();
  const at::Tensor query = at::randn({3, kHeads, 4, kDim}, f32());
  const VarlenRows rows = sd::varlen_rows(pos, 3, 8, arange32(4));
  const at::Tensor packed = sd::varlen_query(query, rows);
  REQUIRE(packed.sizes() == at::IntArrayRef({12, kHeads, kDim}));
  const std::vector<std::pair<int64_t, int64_t>> real = {{0, 0}, {0, 1}, {0, 2}, {1, 2}, {1, 3}};
  for (size_t k = 0; k < real.size(); ++k) {
    CHECK(
        at::equal(packed[static_cast<int64_t>(k)], query[real[k].first].select(1, real[k].second)));
  }
  VarlenArgs args;
  args.order = rows.order;
  args.padded = rows.padded;
  args.batch = 3;
  args.query_len = 4;
  const at::Tensor keep = pos.ge(0).view({3, 1, 4, 1});
  // The kernel leaves the packed tail unwritten: NaN there must not come back.
  const at::Tensor written = packed.clone();
  written.narrow(0, 5, 7).fill_(std::numeric_limits<float>::quiet_NaN());
  const at::Tensor unpacked = sd::unpack_varlen(args, written);
  CHECK(unpacked.sizes() == query.sizes());
  CHECK(at::equal(unpacked, query.mul(keep)));
  // One query a row: a reshape each way.
  const VarlenRows decode = sd::varlen_rows(positions(3, {4, -1, 9}), 3, 8, arange32(4));
  const at::Tensor one = query.narrow(2, 1, 1);
  const at::Tensor tokens = sd::varlen_query(one, decode);
  CHECK(at::equal(tokens, one.squeeze(2)));
  args.query_len = 1;
  CHECK(at::equal(sd::unpack_varlen(args, tokens), one));
}

TEST_CASE(
    "the varlen arguments give, under FlashAttention's semantics, the masked attention over "
    "the same keys",
    "[varlen]") {
  at::manual_seed(2);
  const int64_t view_len = 8;
  const at::Tensor buffer_k = at::randn({4, kKvHeads, view_len + 1, kDim}, f32());
  const at::Tensor buffer_v = at::randn({4, kKvHeads, view_len + 1, kDim}, f32());
  const at::Tensor keys = sd::batch_prefix(buffer_k, 3, view_len);
  const at::Tensor values = sd::batch_prefix(buffer_v, 3, view_len);
  const at::Tensor slot = at::arange(view_len, i64()).view({1, 1, 1, view_len});
  for (const at::Tensor& pos : {ragged(), positions(3, {4, -1, 7})}) {
    const int64_t q = pos.size(1);
    const at::Tensor query = at::randn({3, kHeads, q, kDim}, f32());
    // The cache's rule: slot j holds position j, seen by queries at j or later.
    const at::Tensor qpos = pos.view({3, 1, q, 1});
    const at::Tensor mask = slot.le(qpos).logical_and(qpos.ge(0));
    const at::Tensor want = reference_attention(query, keys, values, mask);
    for (KvLayout layout : {KvLayout::kStridedView, KvLayout::kPackedCopy}) {
      INFO("q " << q << " layout " << static_cast<int>(layout));
      const VarlenArgs args = build_args(query, keys, values, pos, layout);
      const at::Tensor got = sd::unpack_varlen(args, emulate_flash_varlen(args));
      REQUIRE(at::isfinite(got).all().item<bool>());
      CHECK(close(got, want, 1e-5));
    }
  }
  CHECK(sd::kDefaultKvLayout == KvLayout::kStridedView);
  CHECK_FALSE(sd::flash_capable(at::Device(at::kCPU)));  // the varlen path needs CUDA
}
