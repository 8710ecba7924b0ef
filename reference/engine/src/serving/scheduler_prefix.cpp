// Scheduler::State's side of Note [prefix cache] (scheduler_state.hpp):
// admission, which keeps a prefilling row's twin waiting; a new row's start
// from the longest saved prefix; and saving a row's tokens to the pool.

#include "scheduler_state.hpp"

#include <statickv/cache.hpp>

#include <algorithm>

namespace statickv::reference {

using serving_detail::Active;
using serving_detail::RowTable;

void Scheduler::State::reuse_prefix(size_t r) {
  if (!prefix) return;
  Active& row = table->rows()[r];
  if (row.request.prompt_logprobs >= 0) return;  // every prompt token is scored
  const serving_detail::PrefixMatch match = prefix->find(row.request.prompt);
  if (match.state == nullptr) return;
  Cache& cache = engine->cache();
  const auto i = static_cast<int64_t>(r);
  cache.restore_row(*match.state, i);
  if (match.reused < match.state->length) {
    // Every row keeps its length but row i, built on the device: a hit
    // reads nothing back (the pool offers only what the rings take back).
    at::Tensor lengths = cache.seq_lengths().narrow(0, 0, i + 1).clone();
    lengths.narrow(0, i, 1).fill_(match.reused);
    cache.rollback(lengths);
  }
  row.prompt_done = row.cached = match.reused;
  ++stats.prefix_hits;
  stats.prefix_tokens_reused += match.reused;
}

bool Scheduler::State::waits_for_twin(const Active& a) const {
  const std::vector<int64_t>& prompt = a.request.prompt;
  if (!prefix || a.request.prompt_logprobs >= 0 ||
      static_cast<int64_t>(prompt.size()) <= options.prefix_block)
    return false;
  const auto& rows = table->rows();
  const auto end = rows.begin() + static_cast<std::ptrdiff_t>(table->prefilling());
  return std::any_of(rows.begin(), end, [&](const Active& row) {
    return row.request.prompt_logprobs < 0 && row.request.prompt == prompt;
  });
}

void Scheduler::State::admit() {
  RowTable& t = *table;
  const auto admitted = ServeClock::now();
  for (auto it = waiting.begin();
       it != waiting.end() && static_cast<int64_t>(t.live()) < options.max_batch;) {
    if (waits_for_twin(*it)) {
      ++it;
      continue;
    }
    Active a = std::move(*it);
    it = waiting.erase(it);
    a.admitted = admitted;
    t.admit(std::move(a));
    reuse_prefix(t.prefilling() - 1);
  }
}

void Scheduler::State::save_prefix(size_t r) {
  if (!prefix) return;
  const Active& row = table->rows()[r];
  std::vector<int64_t> tokens = row.request.prompt;
  tokens.insert(tokens.end(), row.tokens.begin(), row.tokens.end());
  if (row.cached > static_cast<int64_t>(tokens.size())) return;  // drafts past a stop
  // Rejected drafts overwrote ring slots past the row's length, so a ring
  // no longer takes back the pool's allowance from it (Note [ring
  // rollback]): such a row is not saved.
  if (row.written > row.cached && model.config().has_sliding()) return;
  tokens.resize(static_cast<size_t>(row.cached));
  const Cache& cache = engine->cache();
  // On the cache's device, at the host's length: no sync (Note [a
  // restored row is the saved row]).
  prefix->insert(std::move(tokens),
                 cache.save_row(static_cast<int64_t>(r), row.cached, cache.config().device));
}

}  // namespace statickv::reference
