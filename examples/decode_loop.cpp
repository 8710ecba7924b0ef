// A decode loop over a StaticCache: prefill two prompts of different lengths
// in one ragged step, decode them together, finish one and start another in
// its row, all without a single reallocation. Attention here is random
// projections standing in for a model; the cache calls are the real ones.
#include <statickv/statickv.hpp>

#include <cstdio>
#include <vector>

int main() {
  c10::InferenceMode inference;  // inference: no autograd bookkeeping per op
  statickv::CacheConfig config;
  config.num_layers = 4;
  config.num_kv_heads = 2;
  config.head_dim = 16;
  config.max_batch = 8;  // capture once for 8 rows, serve any live batch <= 8
  config.max_len = 64;
  statickv::StaticCache cache(config);
  const int64_t heads = 4;  // grouped-query: 2 query heads per kv head
  const void* address = cache.keys(0).data_ptr();

  auto forward = [&](const at::Tensor& positions, int64_t live_batch) {
    const int64_t q = positions.size(-1);
    statickv::StepPlan step = cache.prepare(positions, live_batch, /*attend_len=*/32);
    at::Tensor out;
    for (int64_t layer = 0; layer < cache.num_layers(); ++layer) {
      const at::Tensor k = at::randn({live_batch, config.num_kv_heads, q, config.head_dim});
      const at::Tensor v = at::randn_like(k);
      const at::Tensor query = at::randn({live_batch, heads, q, config.head_dim});
      statickv::KV kv = cache.update(layer, k, v, step);
      out = statickv::sdpa_attention(query, kv.keys, kv.values, step.additive_mask(layer));
    }
    return out;
  };

  // Prefill: row 0 has 5 prompt tokens, row 1 has 3 (padded with -1).
  forward(at::tensor(std::vector<int64_t>{0, 1, 2, 3, 4, 0, 1, 2, -1, -1}).view({2, 5}),
          /*live_batch=*/2);
  // Decode 4 tokens; each row continues at its own position. The positions
  // are a copy: prepare() advances seq_lengths in place, and refuses a view
  // of it, whose values would change under the caller (who applies rotary
  // embeddings with them, say).
  for (int i = 0; i < 4; ++i) {
    const at::Tensor next = cache.seq_lengths().narrow(0, 0, 2).view({2, 1}).clone();
    forward(next, 2);
    if (!at::equal(next, at::tensor(std::vector<int64_t>{5 + i, 3 + i}).view({2, 1}))) return 1;
  }
  std::printf("after decode: seq_lengths = %lld, %lld\n",
              static_cast<long long>(cache.seq_lengths()[0].item<int64_t>()),
              static_cast<long long>(cache.seq_lengths()[1].item<int64_t>()));

  // Row 1 finishes; a new prompt starts in its place, row 0 keeps decoding.
  cache.reset_rows(at::tensor({int64_t{1}}));
  const at::Tensor out = forward(at::tensor(std::vector<int64_t>{9, 0}).view({2, 1}), 2);
  const bool stable = cache.keys(0).data_ptr() == address;
  const bool finite = at::isfinite(out).all().item<bool>();
  std::printf("row 1 restarted: seq_lengths = %lld, %lld; buffers moved: %s; output finite: %s\n",
              static_cast<long long>(cache.seq_lengths()[0].item<int64_t>()),
              static_cast<long long>(cache.seq_lengths()[1].item<int64_t>()), stable ? "no" : "YES",
              finite ? "yes" : "NO");
  const bool ok = stable && finite && cache.seq_lengths()[0].item<int64_t>() == 10 &&
                  cache.seq_lengths()[1].item<int64_t>() == 1;
  return ok ? 0 : 1;
}
