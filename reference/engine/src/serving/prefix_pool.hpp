#pragma once
// PrefixPool: the Scheduler's saved prefixes (Note [prefix cache],
// docs/serving.md): row snapshots (Cache::save_row) of token sequences
// whose keys and values were computed, under a byte budget with LRU
// eviction, found by chained hashes of fixed-size token blocks.
//
// An entry holds the row at its full length L (every layer's live slots:
// a full layer's [0, L), a ring's whole capacity). A prompt that shares u
// tokens with it restores the row and rolls it back to u: exact for full
// layers at any u, and for sliding rings when L - u <= max_chunk (Note
// [ring rollback]); deeper is not a match.

#include <statickv/cache.hpp>
#include <statickv/row_state.hpp>

#include <cstdint>
#include <list>
#include <vector>

namespace statickv::reference::serving_detail {

/// Chained hashes of the complete `block`-token blocks of `ids[0, n)`:
/// out[i] covers blocks 0..i.
std::vector<uint64_t> block_hashes(const std::vector<int64_t>& ids, int64_t n, int64_t block);

struct PrefixMatch {
  const RowState* state = nullptr;  ///< null: no usable entry
  int64_t reused = 0;               ///< tokens the row keeps after the restore
};

class PrefixPool {
 public:
  /// budget_bytes > 0; block >= 1; max_rollback: how far back a restored
  /// entry may be taken (max_len for a cache of full layers only, else the
  /// cache's max_chunk).
  PrefixPool(int64_t budget_bytes, int64_t block, int64_t max_rollback);

  /// The entry sharing the longest prefix with `prompt` (at least one whole
  /// block; the blocks' hashes find it), reusing at most
  /// prompt.size() - 1 tokens (one is left to prefill, for its logits);
  /// marks it most recently used.
  PrefixMatch find(const std::vector<int64_t>& prompt);
  /// Saves `tokens` (what `state` holds, tokens.size() == state.length)
  /// unless an entry already covers them or they are shorter than a block;
  /// drops the entries it covers, then evicts least recently used entries
  /// until the budget holds it. An entry larger than the whole budget is
  /// not kept. (Entry A covers B when B's tokens are a prefix of A's and A
  /// is at most max_rollback longer.)
  void insert(std::vector<int64_t> tokens, RowState state);

  int64_t bytes() const { return bytes_; }
  int64_t budget() const { return budget_; }
  int64_t entries() const { return static_cast<int64_t>(entries_.size()); }
  int64_t evictions() const { return evictions_; }

 private:
  struct Entry {
    std::vector<int64_t> tokens;
    std::vector<uint64_t> hashes;  // block_hashes of tokens
    RowState state;
    int64_t bytes = 0;
  };
  /// Tokens of `prompt` that `entry` can give, 0 when none.
  int64_t usable(const Entry& entry, const std::vector<int64_t>& prompt,
                 const std::vector<uint64_t>& hashes) const;

  int64_t budget_, block_, max_rollback_;
  int64_t bytes_ = 0, evictions_ = 0;
  std::list<Entry> entries_;  // most recently used first
};

/// Bytes a snapshot holds (keys, values, slot positions).
int64_t state_bytes(const RowState& state);

}  // namespace statickv::reference::serving_detail
