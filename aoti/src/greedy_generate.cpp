// greedy_generate: ragged prefill in chunks, then one token per row per
// step, all through one AOTInductor package on one statickv cache.

#include <statickv/aoti/package_decoder.hpp>

#include <algorithm>

namespace statickv::aoti {

namespace {

int64_t longest(const std::vector<int64_t>& lengths) {
  return *std::max_element(lengths.begin(), lengths.end());
}

/// Records row `r`'s logits at query `t` of `logits` [b, q, vocab] and
/// returns its greedy id.
int64_t record(const at::Tensor& logits, int64_t r, int64_t t, GreedyResult& result) {
  const at::Tensor row = logits[r][t].to(at::kFloat).cpu();
  auto& kept = result.logits[static_cast<size_t>(r)];
  kept = at::cat({kept, row.unsqueeze(0)});
  return row.argmax().item<int64_t>();
}

/// Prefills every prompt in chunks of up to max_query tokens, each row at its
/// own positions (a row whose prompt is done gets padding, position -1);
/// returns the first generated id of each row.
std::vector<int64_t> prefill(PackageDecoder& decoder,
                             const std::vector<std::vector<int64_t>>& prompts,
                             const ShapeBuckets& buckets, GreedyResult& result) {
  const auto b = static_cast<int64_t>(prompts.size());
  std::vector<int64_t> lengths;
  for (const auto& p : prompts) lengths.push_back(static_cast<int64_t>(p.size()));
  const at::Device device = decoder.cache().config().device;
  std::vector<int64_t> first(prompts.size(), 0);
  for (int64_t start = 0; start < longest(lengths); start += decoder.max_query()) {
    const int64_t q = std::min(decoder.max_query(), longest(lengths) - start);
    at::Tensor ids = at::zeros({b, q}, at::kLong);
    at::Tensor pos = at::full({b, q}, -1, at::kLong);
    for (int64_t r = 0; r < b; ++r) {
      for (int64_t t = 0; t < q && start + t < lengths[r]; ++t) {
        ids[r][t] = prompts[r][start + t];
        pos[r][t] = start + t;
      }
    }
    const at::Tensor logits =
        decoder.forward(ids.to(device), pos.to(device), buckets.round_up(start + q, "attend_len"));
    for (int64_t r = 0; r < b; ++r) {
      const int64_t t = lengths[r] - 1 - start;  // the row's last prompt token, if in this chunk
      if (t >= 0 && t < q) first[r] = record(logits, r, t, result);
    }
  }
  return first;
}

}  // namespace

GreedyResult greedy_generate(PackageDecoder& decoder,
                             const std::vector<std::vector<int64_t>>& prompts,
                             int64_t max_new_tokens, const ShapeBuckets& attend_buckets) {
  const CacheConfig& config = decoder.cache().config();
  const auto b = static_cast<int64_t>(prompts.size());
  TORCH_CHECK(b >= 1 && b <= config.max_batch,
              "prompts: expected 1 to max_batch=", config.max_batch, " prompts but got ", b);
  TORCH_CHECK(attend_buckets.max() == config.max_len,
              "attend_buckets: expected max = max_len=", config.max_len, " but got ",
              attend_buckets.max());
  TORCH_CHECK(max_new_tokens >= 1, "max_new_tokens: expected >= 1 but got ", max_new_tokens);
  std::vector<int64_t> lengths;
  for (size_t r = 0; r < prompts.size(); ++r) {
    lengths.push_back(static_cast<int64_t>(prompts[r].size()));
    TORCH_CHECK(lengths.back() >= 1 && lengths.back() + max_new_tokens <= config.max_len,
                "prompts[", r,
                "]: expected 1 to max_len - max_new_tokens = ", config.max_len - max_new_tokens,
                " tokens but got ", lengths.back());
  }
  GreedyResult result;
  result.tokens.resize(prompts.size());
  result.logits.assign(prompts.size(), at::empty({0, decoder.vocab_size()}, at::kFloat));
  decoder.cache().reset_rows(at::arange(b, at::TensorOptions(at::kLong).device(config.device)));
  std::vector<int64_t> next = prefill(decoder, prompts, attend_buckets, result);
  for (int64_t step = 0;; ++step) {
    for (int64_t r = 0; r < b; ++r) result.tokens[r].push_back(next[r]);
    if (step + 1 == max_new_tokens) break;
    at::Tensor pos = at::tensor(lengths, at::kLong).add_(step).view({b, 1});
    const at::Tensor ids = at::tensor(next, at::kLong).view({b, 1});
    const int64_t attend = attend_buckets.round_up(longest(lengths) + step + 1, "attend_len");
    const at::Tensor logits = decoder.forward(ids.to(config.device), pos.to(config.device), attend);
    for (int64_t r = 0; r < b; ++r) next[r] = record(logits, r, 0, result);
  }
  return result;
}

}  // namespace statickv::aoti
