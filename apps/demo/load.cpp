// statickv-demo's model and prompts (load.hpp).

#include "load.hpp"

#include "prompts.hpp"

#include <statickv/flags/flags.hpp>
#include <statickv/model/checkpoint.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <utility>

namespace statickv::demo {

using namespace statickv::reference;
using flags::FlagError;

namespace {

// What the model cannot take: a static cache for sliding layers, token ids
// past the vocabulary, positions past max_position_embeddings.
void check_against_model(const Options& o, const ModelConfig& config,
                         const std::vector<std::vector<int64_t>>& prompts) {
  if (o.cache == "static" && config.has_sliding()) {
    throw flags::FlagError(
        "--cache: expected hybrid or dynamic for a model with sliding-window layers but got "
        "static");
  }
  // --prompt-ids' prompts, or (none yet) the longest random one.
  size_t longest = prompts.empty() ? static_cast<size_t>(o.prompt_len) : 0;
  for (size_t r = 0; r < prompts.size(); ++r) {
    longest = std::max(longest, prompts[r].size());
    for (const int64_t id : prompts[r]) {
      if (id >= config.vocab_size) {
        throw flags::FlagError(fmt::format(
            "--prompt-ids: expected token ids in [0, vocab_size={}) but prompt {} has {}",
            config.vocab_size, r, id));
      }
    }
  }
  const int64_t positions = config.max_position_embeddings;
  const std::string prompt_flag = o.text.given()         ? "--prompt"
                                  : o.prompt_ids.empty() ? "--prompt-len"
                                                         : "--prompt-ids";
  if (static_cast<int64_t>(longest) >= positions) {
    throw flags::FlagError(fmt::format(
        "{}: expected prompts shorter than the model's max_position_embeddings={} (room for a new "
        "token) but the longest has {} tokens",
        prompt_flag, positions, longest));
  }
  if (o.max_new_tokens > positions - static_cast<int64_t>(longest)) {
    throw flags::FlagError(fmt::format(
        "--max-new-tokens: expected at most {} (max_position_embeddings={} minus the longest "
        "prompt, {} tokens) but got {}",
        positions - static_cast<int64_t>(longest), positions, longest, o.max_new_tokens));
  }
}
}  // namespace

Loaded load(const Options& o, const apps::TpRole& role, at::ScalarType dtype) {
  Loaded out;
  if (!o.prompt_ids.empty()) out.prompts = parse_prompt_ids(o.prompt_ids);
  if (o.text.given()) {
    out.text = TextSession::open(o.checkpoint, o.text);
    out.prompts = out.text->prompt_ids();
  }
  // A named shape's prompts are checked before any weights are made; a
  // checkpoint's once its config (and generation_config) is read.
  if (o.checkpoint.empty()) check_against_model(o, named_config(o.shape), out.prompts);
  Checkpoint ckpt =
      apps::load_model_weights(o.checkpoint, o.shape, o.seed, role, role.device, dtype);
  if (!o.checkpoint.empty()) check_against_model(o, ckpt.config, out.prompts);
  if (out.prompts.empty()) out.prompts = random_prompts(o, ckpt.config.vocab_size);
  out.model = std::make_unique<LlamaModel>(ckpt.config, std::move(ckpt.weights), role.shard);
  out.source = o.checkpoint.empty()
                   ? o.shape + " (random weights, seed " + std::to_string(o.seed) + ")"
                   : o.checkpoint;
  if (role.tp.world > 1) {
    out.source += fmt::format(" | tensor-parallel rank {} of {}{}", role.tp.rank, role.tp.world,
                              role.tp.vocab_parallel ? ", vocab-parallel LM head" : "");
  }
  return out;
}

}  // namespace statickv::demo
