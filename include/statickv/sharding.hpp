#pragma once
// Tensor-parallel sharding of a cache: rank r of w holds its slice of the kv
// heads (docs/tensor_parallel.md, Note [kv head sharding] in docs/design.md).
//
// Either the kv heads divide by w (rank r holds heads [r*kv/w, (r+1)*kv/w)),
// or w divides by the kv heads: each rank holds one head, head r / (w/kv),
// and w/kv ranks hold a replica of it (as vLLM does). Nothing else shards.

#include <statickv/config.hpp>

#include <cstdint>

namespace statickv {

/// The kv heads one rank holds: [first, first + count), each head held by
/// `replicas` ranks.
struct KvHeadShard {
  int64_t first = 0;
  int64_t count = 0;
  int64_t replicas = 1;
};

namespace detail {

inline void check_rank_of_world(int64_t rank, int64_t world) {
  TORCH_CHECK(world >= 1, "world: expected a tensor-parallel world size >= 1 but got ", world);
  TORCH_CHECK(rank >= 0 && rank < world, "rank: expected a rank in [0, ", world, ") but got ",
              rank);
}

}  // namespace detail

/// Rank `rank` of `world`'s kv heads; throws c10::Error naming num_kv_heads
/// when neither it divides by world nor world by it.
inline KvHeadShard shard_kv_heads(int64_t num_kv_heads, int64_t rank, int64_t world) {
  detail::check_rank_of_world(rank, world);
  TORCH_CHECK(num_kv_heads >= 1, "num_kv_heads: expected >= 1 but got ", num_kv_heads);
  KvHeadShard shard;
  if (num_kv_heads % world == 0) {
    shard.count = num_kv_heads / world;
    shard.first = rank * shard.count;
    return shard;
  }
  TORCH_CHECK(world % num_kv_heads == 0, "num_kv_heads: expected a multiple or a divisor of the ",
              "tensor-parallel world size ", world, " (heads split or replicated) but got ",
              num_kv_heads);
  shard.replicas = world / num_kv_heads;
  shard.count = 1;
  shard.first = rank / shard.replicas;
  return shard;
}

/// `config` as rank `rank` of `world` allocates it: its kv heads only, every
/// other field unchanged (each rank's cache holds the same rows and
/// positions; Note [ranks issue identical steps] in docs/design.md).
inline CacheConfig shard_cache_config(CacheConfig config, int64_t rank, int64_t world) {
  config.num_kv_heads = shard_kv_heads(config.num_kv_heads, rank, world).count;
  return config;
}

}  // namespace statickv
