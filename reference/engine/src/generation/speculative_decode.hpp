#pragma once
// Speculative decoding inside a generate() call (docs/speculative.md): each
// step drafts up to k tokens per row (prompt lookup or a draft model on its
// own cache), verifies them all in one target pass of k + 1 query tokens,
// emits what the acceptance rule keeps and rolls both caches back past the
// rejected drafts (Cache::rollback, Note [ring rollback]). Not installed.

#include "call.hpp"

#include <statickv/cache.hpp>
#include <statickv/engine/speculative.hpp>

#include <vector>

namespace statickv::reference::detail {

/// What speculation needs beyond the Call: k, the target cache, and for
/// draft-model drafting the draft model with its cache (already prefilled
/// with the prompts) and backend.
struct Speculator {
  int64_t k = 0;
  int64_t ngram = 3;
  Cache* cache = nullptr;
  const LlamaModel* draft_model = nullptr;
  Cache* draft_cache = nullptr;
  AttentionBackend* draft_backend = nullptr;
};

/// Decodes until every row is done, k drafts per row per step (fewer near
/// a row's token limit, or when prompt lookup finds fewer). `lens`: the
/// prompt lengths; both caches hold each row's prompt on entry.
SpeculationStats speculate_n_tokens(Call& call, Rows& rows,
                                    const std::vector<std::vector<int64_t>>& prompts,
                                    const std::vector<int64_t>& lens, const Speculator& spec);

}  // namespace statickv::reference::detail
