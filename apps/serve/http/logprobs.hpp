#pragma once
// statickv-serve --http's log-probability objects in OpenAI's two shapes
// (docs/serving.md, "Log-probabilities"): completions' parallel lists
// (tokens, token_logprobs, top_logprobs, text_offset) and chat's content
// entries (token, logprob, bytes, top_logprobs). The values come from the
// sampling head (reference::TokenLogprob); no I/O here.

#include <statickv/sampling/sampling.hpp>

#include <nlohmann/json.hpp>

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace statickv::serve {

/// One position of a sequence: its token and, where known, the token's
/// log-probability with the alternatives (none for a prompt's first token).
struct LogprobEntry {
  int64_t token = 0;
  std::optional<reference::TokenLogprob> logprob;
};

/// A token's text as log-probabilities name it: its bytes, special tokens
/// included ("token_id:<id>" on a server without a tokenizer).
using TokenText = std::function<std::string(int64_t)>;

/// Completions: {"tokens", "token_logprobs", "top_logprobs", "text_offset"},
/// a null log-probability and top entry where an entry has none; offsets
/// count bytes from `offset` (where the first token's text starts).
nlohmann::json completion_logprobs(const std::vector<LogprobEntry>& entries, const TokenText& text,
                                   int64_t offset = 0);

/// Chat: {"content": [{"token", "logprob", "bytes", "top_logprobs"}, ...]}.
nlohmann::json chat_logprobs(const std::vector<LogprobEntry>& entries, const TokenText& text);

/// The entries of generated tokens whose log-probabilities the head gave.
std::vector<LogprobEntry> generated_entries(const std::vector<reference::TokenLogprob>& picked);

/// The entries of a prompt scored by the Scheduler (Request::prompt_logprobs):
/// the first token has none, token t > 0 has scored[t - 1].
std::vector<LogprobEntry> prompt_entries(const std::vector<int64_t>& prompt,
                                         const std::vector<reference::TokenLogprob>& scored);

}  // namespace statickv::serve
