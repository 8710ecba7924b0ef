#pragma once
// statickv-demo's prompts as token ids: --prompt-ids' list, or --batch
// seeded random prompts. Text prompts (--prompt, --prompts-file) are
// text_mode.hpp's.

#include "options.hpp"

#include <cstdint>
#include <string>
#include <vector>

namespace statickv::demo {

/// --prompt-ids' prompts: comma-separated ids, ';' between prompts. Throws
/// FlagError naming the flag for a bad id or an empty prompt.
std::vector<std::vector<int64_t>> parse_prompt_ids(const std::string& text);

/// --batch prompts of seeded random ids, the longest --prompt-len tokens.
std::vector<std::vector<int64_t>> random_prompts(const Options& o, int64_t vocab_size);

}  // namespace statickv::demo
