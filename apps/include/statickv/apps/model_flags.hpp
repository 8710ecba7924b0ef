#pragma once
// The model flags statickv-demo and statickv-serve share: --checkpoint DIR
// or --shape NAME (a named shape with seeded random weights), the
// speculative-decoding flags (--speculate N, --draft-checkpoint DIR,
// --draft-shape NAME) and tensor parallelism (--tp N, --vocab-parallel,
// --tp-check; docs/tensor_parallel.md). One home, so both programs list the
// same shapes, refuse the same combinations and start ranks the same way.

#include <statickv/flags/flags.hpp>
#include <statickv/model/checkpoint.hpp>
#include <statickv/model/model.hpp>
#ifdef STATICKV_APPS_TP
#include <statickv/tp/transport.hpp>
#endif

#include <cstdio>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace statickv::apps {

inline void add_model_flags(flags::Flags& flags, std::string* checkpoint, std::string* shape) {
  flags.add("--checkpoint DIR", checkpoint,
            "Hugging Face checkpoint (config.json + *.safetensors); default: --shape with seeded "
            "random weights");
  std::string names;
  for (const std::string& name : reference::named_config_names()) {
    names += (names.empty() ? "" : ", ") + name + (name == *shape ? " (default)" : "");
  }
  flags.add_choice("--shape NAME", shape, reference::named_config_names(),
                   "named shape when no checkpoint: " + names);
}

/// Speculative decoding (docs/speculative.md): N drafts per row per step,
/// by prompt lookup, or by a draft model named by checkpoint or shape.
struct SpeculationFlags {
  int64_t speculate = 0;
  std::string draft_checkpoint, draft_shape;
  bool draft_model() const { return !draft_checkpoint.empty() || !draft_shape.empty(); }
};

inline void add_speculation_flags(flags::Flags& flags, SpeculationFlags* s) {
  flags.add("--speculate N", &s->speculate,
            "speculative decoding: up to N draft tokens per row, verified in one step of N + 1 "
            "query tokens (default 0 = off); drafts by prompt lookup (n-grams of the row's own "
            "ids) unless a draft model is given",
            /*min=*/0);
  flags.add("--draft-checkpoint DIR", &s->draft_checkpoint,
            "draft model for --speculate: a smaller checkpoint with the target's vocabulary");
  flags.add_choice("--draft-shape NAME", &s->draft_shape, reference::named_config_names(),
                   "draft model for --speculate: a named shape with seeded random weights "
                   "(--seed); with the target's vocabulary");
}

/// The combinations the speculation flags refuse, each naming both flags.
/// `cache`: the --cache value ("" = the program's default).
inline void check_speculation_flags(const SpeculationFlags& s, const std::string& cache) {
  if (!s.draft_checkpoint.empty() && !s.draft_shape.empty()) {
    throw flags::FlagError(
        "--draft-shape: expected no --draft-shape with --draft-checkpoint (one draft "
        "model)");
  }
  if (s.draft_model() && s.speculate == 0) {
    throw flags::FlagError(
        std::string(s.draft_shape.empty() ? "--draft-checkpoint" : "--draft-shape") +
        ": expected --speculate N >= 1 with a draft model but got --speculate 0");
  }
  if (s.speculate > 0 && cache == "dynamic") {
    throw flags::FlagError(
        "--speculate: expected --cache static or hybrid (rejected drafts are rolled back) but got "
        "--cache dynamic");
  }
}

/// The draft model the flags name, on `device` in `dtype` (nullptr: none).
inline std::unique_ptr<reference::LlamaModel> load_draft_model(const SpeculationFlags& s,
                                                               at::ScalarType dtype,
                                                               at::Device device, uint64_t seed) {
  if (!s.draft_checkpoint.empty()) {
    reference::Checkpoint ckpt = reference::load_checkpoint(s.draft_checkpoint, dtype, device);
    return std::make_unique<reference::LlamaModel>(ckpt.config, std::move(ckpt.weights));
  }
  if (s.draft_shape.empty()) return nullptr;
  const reference::ModelConfig config = reference::named_config(s.draft_shape);
  return std::make_unique<reference::LlamaModel>(
      config, reference::random_weights(config, seed, dtype, device));
}

/// "prompt lookup" or "draft model <source>".
inline std::string drafting_name(const SpeculationFlags& s) {
  if (!s.draft_checkpoint.empty()) return "draft model " + s.draft_checkpoint;
  if (!s.draft_shape.empty()) return "draft model " + s.draft_shape + " (random weights)";
  return "prompt lookup";
}

/// --tp N and its companions.
struct TpFlags {
  int64_t tp = 1;
  bool vocab_parallel = false;
  bool check = false;
};

inline void add_tp_flags(flags::Flags& flags, TpFlags* tp) {
  flags.add("--tp N", &tp->tp,
            "tensor-parallel ranks: starts N copies of this program on this machine (Gloo on "
            "the CPU over 127.0.0.1, NCCL on GPUs); a launcher's RANK, WORLD_SIZE, MASTER_ADDR, "
            "MASTER_PORT, LOCAL_RANK take precedence",
            /*min=*/1, /*max=*/64);
  flags.add_switch("--vocab-parallel", &tp->vocab_parallel,
                   "with --tp: each rank holds vocab_size / N rows of the LM head (default: "
                   "replicated)");
  flags.add_switch("--tp-check", &tp->check,
                   "with --tp: compare every forward pass's number and shape across ranks (one "
                   "small all-reduce per pass; on by default in debug builds)");
}

/// Where this process stands. `launcher_status`: this process started the
/// --tp ranks and they have finished (main returns it). Otherwise it is a
/// single process (tp.world == 1) or one rank; ranks other than 0 neither
/// read stdin nor write stdout (rank 0 does both for the group).
struct TpRole {
  std::optional<int> launcher_status;
  at::Device device = at::kCPU;  ///< the rank's: cuda:LOCAL_RANK on GPUs
  reference::TensorParallel tp;
  reference::TpShard shard;
};

/// Refuses --vocab-parallel and --tp-check where they would change nothing.
inline void check_tp_flags(const TpFlags& flags) {
  if (flags.tp > 1 || std::getenv("WORLD_SIZE") != nullptr) return;
  if (flags.vocab_parallel) {
    throw flags::FlagError(
        "--vocab-parallel: expected --tp N > 1 (a single process holds the whole LM "
        "head)");
  }
  if (flags.check)
    throw flags::FlagError("--tp-check: expected --tp N > 1 (one process cannot diverge)");
}

inline TpRole start_tp(const TpFlags& flags, int argc, char** argv, at::Device device) {
  check_tp_flags(flags);
  TpRole role;
  role.device = device;
#ifdef STATICKV_APPS_TP
  const std::optional<reference::Rendezvous> where = reference::rendezvous_from_env();
  if (!where && flags.tp > 1) {
    role.launcher_status =
        reference::spawn_ranks(flags.tp, std::vector<std::string>(argv, argv + argc));
    return role;
  }
  if (!where) return role;
  if (flags.tp > 1 && flags.tp != where->world) {
    throw flags::FlagError("--tp: expected " + std::to_string(where->world) +
                           " (the launcher's WORLD_SIZE) or no --tp but got " +
                           std::to_string(flags.tp));
  }
  if (device.is_cuda()) {
    role.device = at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(where->local_rank));
  }
  role.shard.comm = reference::connect(*where, role.device);
  // Rank 0 reads stdin and writes stdout for the group; the others neither.
  if (where->rank != 0 && (std::freopen("/dev/null", "w", stdout) == nullptr ||
                           std::freopen("/dev/null", "r", stdin) == nullptr)) {
    throw std::runtime_error("--tp: could not detach stdin/stdout of rank " +
                             std::to_string(where->rank));
  }
#else
  (void)argc, (void)argv, (void)device;
  if (flags.tp > 1 || std::getenv("WORLD_SIZE") != nullptr) {
    throw flags::FlagError(
        "--tp: expected 1 in this build (built without statickv::tp: no Gloo "
        "headers, Debian's libgloo-dev) but got " +
        std::to_string(flags.tp));
  }
#endif
  role.tp = {role.shard.comm ? role.shard.comm->rank() : 0,
             role.shard.comm ? role.shard.comm->world() : 1, flags.vocab_parallel};
  role.shard.vocab_parallel = flags.vocab_parallel;
  role.shard.check_divergence = role.shard.check_divergence || flags.check;
  return role;
}

/// Speculative decoding and tensor parallelism are not combined (untested:
/// every rank would have to draft, verify and roll back alike).
inline void check_tp_with_speculation(const TpFlags& tp, const SpeculationFlags& s) {
  if (s.speculate > 0 && (tp.tp > 1 || std::getenv("WORLD_SIZE") != nullptr)) {
    throw flags::FlagError(
        "--speculate: expected --speculate 0 with --tp " + std::to_string(tp.tp) +
        " (speculative decoding across tensor-parallel ranks is not supported) but "
        "got --speculate " +
        std::to_string(s.speculate));
  }
}

/// The model the flags name, as this rank holds it: the checkpoint's slices
/// (LoadOptions::tp), or the named shape's seeded random weights cut to them.
inline reference::Checkpoint load_model_weights(const std::string& checkpoint,
                                                const std::string& shape, int64_t seed,
                                                const TpRole& role, at::Device device,
                                                at::ScalarType dtype) {
  if (!checkpoint.empty()) {
    reference::LoadOptions load;
    load.tp = role.tp;
    return reference::load_checkpoint(checkpoint, dtype, device, load);
  }
  reference::Checkpoint out;
  out.config = reference::named_config(shape);
  out.weights = reference::shard_weights(
      out.config, reference::plan_tensor_parallel(out.config, role.tp),
      reference::random_weights(out.config, static_cast<uint64_t>(seed), dtype, device));
  return out;
}

}  // namespace statickv::apps
