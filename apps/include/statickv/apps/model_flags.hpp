#pragma once
// The model flags statickv-demo and statickv-serve share: --checkpoint DIR
// or --shape NAME (a named shape with seeded random weights), and the
// speculative-decoding flags (--speculate N, --draft-checkpoint DIR,
// --draft-shape NAME). One home, so both programs list the same shapes and
// refuse the same combinations.

#include <statickv/apps/flags.hpp>
#include <statickv/reference/checkpoint.hpp>
#include <statickv/reference/model.hpp>

#include <memory>
#include <string>

namespace statickv::apps {

inline void add_model_flags(Flags& flags, std::string* checkpoint, std::string* shape) {
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

inline void add_speculation_flags(Flags& flags, SpeculationFlags* s) {
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
    throw FlagError(
        "--draft-shape: expected no --draft-shape with --draft-checkpoint (one draft "
        "model)");
  }
  if (s.draft_model() && s.speculate == 0) {
    throw FlagError(std::string(s.draft_shape.empty() ? "--draft-checkpoint" : "--draft-shape") +
                    ": expected --speculate N >= 1 with a draft model but got --speculate 0");
  }
  if (s.speculate > 0 && cache == "dynamic") {
    throw FlagError(
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

}  // namespace statickv::apps
