// The Scheduler's pool of saved prefixes (prefix_pool.hpp).

#include "prefix_pool.hpp"

#include <c10/util/Exception.h>

#include <algorithm>

namespace statickv::reference::serving_detail {

std::vector<uint64_t> block_hashes(const std::vector<int64_t>& ids, int64_t n, int64_t block) {
  std::vector<uint64_t> out;
  uint64_t h = 1469598103934665603ull;  // FNV-1a over the ids, chained block to block
  for (int64_t b = 0; (b + 1) * block <= n; ++b) {
    for (int64_t i = b * block; i < (b + 1) * block; ++i) {
      h = (h ^ static_cast<uint64_t>(ids[static_cast<size_t>(i)])) * 1099511628211ull;
    }
    out.push_back(h);
  }
  return out;
}

int64_t state_bytes(const RowState& state) {
  int64_t total = 0;
  for (size_t l = 0; l < state.keys.size(); ++l) {
    total += static_cast<int64_t>(state.keys[l].nbytes() + state.values[l].nbytes() +
                                  state.positions[l].nbytes());
  }
  return total;
}

PrefixPool::PrefixPool(int64_t budget_bytes, int64_t block, int64_t max_rollback)
    : budget_(budget_bytes), block_(block), max_rollback_(max_rollback) {
  TORCH_CHECK(budget_ > 0, "prefix_cache_bytes: expected > 0 but got ", budget_);
  TORCH_CHECK(block_ >= 1, "prefix_block: expected >= 1 but got ", block_);
}

int64_t PrefixPool::usable(const Entry& entry, const std::vector<int64_t>& prompt,
                           const std::vector<uint64_t>& hashes) const {
  size_t blocks = 0;
  while (blocks < hashes.size() && blocks < entry.hashes.size() &&
         hashes[blocks] == entry.hashes[blocks])
    ++blocks;
  if (blocks == 0) return 0;
  // The hashes find the candidate; the tokens decide (a collision matches nothing).
  const int64_t limit = std::min<int64_t>(static_cast<int64_t>(prompt.size()) - 1,
                                          static_cast<int64_t>(entry.tokens.size()));
  int64_t same = 0;
  while (same < limit &&
         prompt[static_cast<size_t>(same)] == entry.tokens[static_cast<size_t>(same)])
    ++same;
  if (same < block_) return 0;
  // Rolling the restored row back past what its rings take back exactly is no match.
  return static_cast<int64_t>(entry.tokens.size()) - same <= max_rollback_ ? same : 0;
}

PrefixMatch PrefixPool::find(const std::vector<int64_t>& prompt) {
  const auto n = static_cast<int64_t>(prompt.size());
  const std::vector<uint64_t> hashes = block_hashes(prompt, n, block_);
  auto best = entries_.end();
  int64_t best_len = 0;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const int64_t len = usable(*it, prompt, hashes);
    if (len > best_len) {
      best = it;
      best_len = len;
    }
  }
  if (best == entries_.end()) return {};
  entries_.splice(entries_.begin(), entries_, best);  // most recently used
  return {&entries_.front().state, best_len};
}

void PrefixPool::insert(std::vector<int64_t> tokens, RowState state) {
  const auto n = static_cast<int64_t>(tokens.size());
  TORCH_CHECK(n == state.length, "PrefixPool::insert: expected ", state.length,
              " tokens (the state's length) but got ", n);
  if (n < block_) return;
  for (auto it = entries_.begin(); it != entries_.end(); ++it) {
    const bool covers = static_cast<int64_t>(it->tokens.size()) >= n &&
                        std::equal(tokens.begin(), tokens.end(), it->tokens.begin()) &&
                        static_cast<int64_t>(it->tokens.size()) - n <= max_rollback_;
    if (covers) {
      entries_.splice(entries_.begin(), entries_, it);
      return;
    }
  }
  const int64_t bytes = state_bytes(state);
  if (bytes > budget_) return;
  // Entries the new one covers (their tokens a prefix of its tokens, within
  // what a restore rolls back) give nothing it does not: dropped.
  for (auto it = entries_.begin(); it != entries_.end();) {
    const bool covered = static_cast<int64_t>(it->tokens.size()) <= n &&
                         std::equal(it->tokens.begin(), it->tokens.end(), tokens.begin()) &&
                         n - static_cast<int64_t>(it->tokens.size()) <= max_rollback_;
    if (!covered) {
      ++it;
      continue;
    }
    bytes_ -= it->bytes;
    it = entries_.erase(it);
  }
  while (bytes_ + bytes > budget_) {
    bytes_ -= entries_.back().bytes;
    entries_.pop_back();
    ++evictions_;
  }
  std::vector<uint64_t> hashes = block_hashes(tokens, n, block_);
  entries_.push_front(Entry{std::move(tokens), std::move(hashes), std::move(state), bytes});
  bytes_ += bytes;
}

}  // namespace statickv::reference::serving_detail
