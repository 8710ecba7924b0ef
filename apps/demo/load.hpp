#pragma once
// statickv-demo's model and prompts: the named shape with seeded random
// weights or the checkpoint, --tp's shard of it, and the prompts (text,
// --prompt-ids or random), checked against the model's config (its cache
// kind, vocabulary and positions) before any weights are made where it can.

#include "options.hpp"
#include "text_mode.hpp"

#include <statickv/apps/model_flags.hpp>
#include <statickv/model/model.hpp>

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace statickv::demo {

/// The model named by the flags, with its prompts: --prompt-ids or random
/// ones, checked against the model's config before any weights are made.
struct Loaded {
  std::unique_ptr<reference::LlamaModel> model;
  std::string source;
  std::vector<std::vector<int64_t>> prompts;
  std::unique_ptr<TextSession> text;  ///< text prompts: their tokenizer
};

/// Loads the model and its prompts in `dtype` on `role`'s device (its
/// shard with --tp). Throws FlagError for what the model cannot take.
Loaded load(const Options& o, const apps::TpRole& role, at::ScalarType dtype);

}  // namespace statickv::demo
