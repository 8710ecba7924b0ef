#pragma once
// One generate() call's state and phases, shared by generator.cpp (the
// session and its run), phases.cpp (prefill, plain decode) and
// speculative_decode.cpp (draft, verify, roll back). Not installed.

#include <statickv/engine/engine.hpp>
#include <statickv/engine/generator.hpp>

#include <statickv/sampling/head.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <vector>

namespace statickv::reference::detail {

/// What one generate() call keeps per row: the tokens so far, whether the
/// row is done, and (record_logits) each token's logits.
struct Rows {
  std::vector<std::vector<int64_t>> tokens;
  std::vector<std::vector<at::Tensor>> logits;
  std::vector<bool> done;

  explicit Rows(size_t b) : tokens(b), logits(b), done(b, false) {}
  bool all_done() const {
    return std::all_of(done.begin(), done.end(), [](bool d) { return d; });
  }
  /// One flag per row: not done (the rows a pick takes).
  std::vector<bool> live() const {
    std::vector<bool> out(done.size());
    for (size_t r = 0; r < out.size(); ++r) out[r] = !done[r];
    return out;
  }
};

/// One generate() call: the model, the engine (or, for the dynamic cache
/// and the draft model, the backend) its passes go through, and the
/// sampling state. prefill / decode_one_token / decode_n_tokens
/// (phases.cpp) and speculate_n_tokens (speculative_decode.cpp) are its
/// phases.
struct Call {
  const LlamaModel& model;
  const GenerateOptions& options;
  Engine* engine;             // static/hybrid caches: every pass (runners when bucketed)
  AttentionBackend* backend;  // no engine: eager passes through this backend
  int64_t new_tokens;
  const TokenCallback& on_token;
  SamplingHead* head = nullptr;  // every row's pick (Note [sampling head]); set by Generator::run

  at::Tensor forward(Pass pass, const StepInputs& in, Logits which) const {
    if (engine) return engine->run(pass, in, which);
    return run_pass(model, nullptr, *backend, in, which);
  }

  /// The verification pass and the head's acceptance rule over `drafts`
  /// (Engine::run_and_verify); every token's logits [b, k + 1, vocab].
  at::Tensor verify(const StepInputs& in, const DraftSet& drafts,
                    const std::vector<bool>& takes) const {
    if (engine) return engine->run_and_verify(in, drafts, takes);
    head->check_verify(in.ids.size(1) - 1, drafts, takes);  // before the pass writes the cache
    at::Tensor logits = forward(Pass::kVerify, in, Logits::kAll);
    head->verify(logits.to(at::kFloat), drafts, takes);
    return logits;
  }

  bool is_eos(int64_t id) const {
    const auto& eos = model.config().eos_token_ids;
    return std::find(eos.begin(), eos.end(), id) != eos.end();
  }

  /// Appends `token` to live row r (with its logits [vocab] when
  /// record_logits), marks the row done at its token limit or an eos id
  /// (stop_at_eos), and streams the token.
  void emit(Rows& rows, size_t r, int64_t token, const at::Tensor& logits) {
    rows.tokens[r].push_back(token);
    if (options.record_logits) rows.logits[r].push_back(logits.cpu().clone());
    if (static_cast<int64_t>(rows.tokens[r].size()) >= new_tokens ||
        (options.stop_at_eos && is_eos(token))) {
      rows.done[r] = true;
    }
    if (on_token) on_token(static_cast<int64_t>(r), token, rows.done[r]);
  }

  /// A pass whose rows in `takes` the head picks from (Engine::run_and_pick,
  /// or the eager pass then the pick); each row's newest logits [b, vocab].
  at::Tensor forward_and_pick(Pass pass, const StepInputs& in,
                              const std::vector<bool>& takes) const {
    if (engine) return engine->run_and_pick(pass, in, takes);
    const at::Tensor logits = forward(pass, in, Logits::kLast);
    head->pick(logits, takes);
    return logits;
  }

  /// Records each live row's next token from logits [b, vocab]: the
  /// sampling head picks on the device, then emit_picked.
  void accept(Rows& rows, const at::Tensor& row_logits) {
    head->pick(row_logits, rows.live());
    emit_picked(rows, row_logits);
  }

  /// Emits each live row's pick (one copy brings every id back), with its
  /// logits [vocab] from `row_logits` [b, vocab] when record_logits.
  void emit_picked(Rows& rows, const at::Tensor& row_logits) {
    const std::vector<Picked> next = head->fetch(static_cast<int64_t>(rows.done.size()));
    const at::Tensor kept = options.record_logits ? row_logits.cpu() : at::Tensor();
    for (size_t r = 0; r < rows.done.size(); ++r) {
      if (!rows.done[r])
        emit(rows, r, next[r].token, kept.defined() ? kept[static_cast<int64_t>(r)] : kept);
    }
  }
};

/// Checks a call's prompts against the session and returns their lengths.
std::vector<int64_t> check_prompts(const std::vector<std::vector<int64_t>>& prompts,
                                   int64_t vocab_size, int64_t max_batch, int64_t max_len,
                                   int64_t new_tokens);

/// Every row at its own positions, in passes of `chunk` prompt tokens from
/// `start`. Each pass returns each row's newest token's logits; a row's last
/// prompt token is in the pass that reaches its length. Returns [b, vocab]
/// on the device.
at::Tensor prefill(const Call& call, const std::vector<std::vector<int64_t>>& prompts,
                   const std::vector<int64_t>& lens, int64_t chunk, int64_t start = 0);

/// One token for every live row, picked by the head (inside the decode
/// runner's step where the engine puts it); finished rows ride along as
/// padding. Returns logits [b, vocab].
at::Tensor decode_one_token(const Call& call, const Rows& rows, const std::vector<int64_t>& lens);

/// Decodes until every row is done or has new_tokens tokens; returns the
/// number of steps taken.
int64_t decode_n_tokens(Call& call, Rows& rows, const std::vector<int64_t>& lens);

}  // namespace statickv::reference::detail
