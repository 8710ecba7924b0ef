#pragma once
// Tensor parallelism for the reference decoder (docs/tensor_parallel.md):
// the sharding plan of one rank and the collectives the decoder needs.
//
// Column-parallel q/k/v and gate/up (each rank computes its heads and its
// slice of the MLP's columns), row-parallel o_proj and down_proj (each rank
// multiplies its slice of the inputs; an all-reduce sums the partial
// outputs). Embedding and norms are replicated; the LM head is replicated or
// vocabulary-parallel (each rank computes its slice of the vocabulary, an
// all-gather joins them).

#include <statickv/model/model_config.hpp>
#include <statickv/sharding.hpp>

#include <ATen/ATen.h>

#include <cstdint>
#include <map>
#include <string>
#include <vector>

namespace statickv::reference {

/// Which rank of how many, and how the LM head is held.
struct TensorParallel {
  int64_t rank = 0;
  int64_t world = 1;
  /// Each rank holds vocab_size / world rows of the LM head (needs the
  /// vocabulary to divide by world); otherwise every rank holds all of it.
  bool vocab_parallel = false;
};

/// What one rank holds. Rules (plan_tensor_parallel checks them, naming the
/// field): query heads divide by world; kv heads divide by world or world by
/// them (shard_kv_heads); intermediate_size divides by world; with
/// vocab_parallel, vocab_size divides by world.
struct TpPlan {
  TensorParallel tp;
  int64_t q_first = 0, q_heads = 0;    ///< this rank's query heads
  KvHeadShard kv;                      ///< this rank's kv heads
  int64_t inter_first = 0, inter = 0;  ///< this rank's MLP columns
  int64_t vocab_first = 0, vocab = 0;  ///< this rank's LM head rows
};

TpPlan plan_tensor_parallel(const ModelConfig& config, const TensorParallel& tp);

/// The slice of one parameter a rank holds: `length` entries of dimension
/// `dim` from `start`. Parameters not in shard_slices() are replicated.
struct Slice {
  int64_t dim = 0;
  int64_t start = 0;
  int64_t length = 0;
};
std::map<std::string, Slice> shard_slices(const ModelConfig& config, const TpPlan& plan);

/// `full` with every parameter in shard_slices() cut to its slice (views:
/// nothing is copied; the caller makes them contiguous or converts them).
std::map<std::string, at::Tensor> shard_weights(const ModelConfig& config, const TpPlan& plan,
                                                std::map<std::string, at::Tensor> full);

/// expected_parameters(config) with each shape cut to the rank's slice.
std::vector<std::pair<std::string, std::vector<int64_t>>> expected_parameters(
    const ModelConfig& config, const TpPlan& plan);

/// The collectives a tensor-parallel decoder needs (one implementation per
/// transport: reference/tp/ builds c10d's Gloo or NCCL backend). Every rank
/// calls the same collectives in the same order (Note [ranks issue
/// identical steps], docs/design.md); a failure or timeout raises c10::Error.
class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int64_t rank() const = 0;
  virtual int64_t world() const = 0;
  /// In place: `t` (contiguous) becomes the elementwise sum over ranks.
  virtual void all_reduce_sum(at::Tensor& t) = 0;
  /// Every rank's `local` ([..., n], all the same shape) joined along the
  /// last dimension in rank order: [..., world * n].
  virtual at::Tensor all_gather_last(const at::Tensor& local) = 0;
  virtual void barrier() = 0;
  /// Rank 0's `bytes` on every rank (others pass anything; it is replaced).
  virtual void broadcast_bytes(std::string& bytes) = 0;
  /// The divergence check: throws c10::Error on every rank, naming `what`
  /// and the smallest and largest value, when ranks passed different values.
  virtual void check_same(const char* what, int64_t value) = 0;
};

}  // namespace statickv::reference
