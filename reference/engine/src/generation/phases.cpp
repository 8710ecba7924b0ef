// One generate() call's phases (call.hpp): its prompts checked, prefill in
// chunks, and plain decode one token at a time.

#include "call.hpp"

#include <algorithm>

namespace statickv::reference::detail {

namespace {

/// One prefill pass's inputs [b, q] (host) over prompt tokens
/// [begin, begin + q), padded with position -1 past each prompt, and the
/// rows whose prompt ends in this pass.
struct PrefillChunk {
  StepInputs in;
  std::vector<int64_t> ending;
};

PrefillChunk pack_prefill_chunk(const std::vector<std::vector<int64_t>>& prompts,
                                const std::vector<int64_t>& lens, int64_t begin, int64_t q) {
  const int64_t b = static_cast<int64_t>(prompts.size());
  StepPacker pack(b, q);
  PrefillChunk chunk;
  for (int64_t r = 0; r < b; ++r) {
    pack.put_run(r, prompts[r], begin, std::max<int64_t>(0, std::min(q, lens[r] - begin)));
    if (lens[r] > begin && lens[r] <= begin + q) chunk.ending.push_back(r);
  }
  chunk.in = pack.take();
  return chunk;
}

}  // namespace

std::vector<int64_t> check_prompts(const std::vector<std::vector<int64_t>>& prompts,
                                   int64_t vocab_size, int64_t max_batch, int64_t max_len,
                                   int64_t new_tokens) {
  const int64_t b = static_cast<int64_t>(prompts.size());
  TORCH_CHECK(b >= 1, "prompts: expected at least one prompt but got none");
  TORCH_CHECK(b <= max_batch, "prompts: expected at most max_batch=", max_batch,
              " prompts but got ", b);
  std::vector<int64_t> lens;
  for (int64_t r = 0; r < b; ++r) {
    const auto& prompt = prompts[static_cast<size_t>(r)];
    TORCH_CHECK(!prompt.empty(), "prompts[", r, "]: expected at least one token but got none");
    for (size_t t = 0; t < prompt.size(); ++t) {
      TORCH_CHECK(prompt[t] >= 0 && prompt[t] < vocab_size, "prompts[", r, "][", t,
                  "]: expected a token id in [0, vocab_size=", vocab_size, ") but got ", prompt[t]);
    }
    lens.push_back(static_cast<int64_t>(prompt.size()));
  }
  const int64_t longest = *std::max_element(lens.begin(), lens.end());
  // Compared as new_tokens <= max_len - longest: the sum may not fit in int64.
  TORCH_CHECK(new_tokens <= max_len - longest, "max_len: expected at least ", longest, " + ",
              new_tokens, " (longest prompt + max_new_tokens) but got ", max_len);
  return lens;
}

at::Tensor prefill(const Call& call, const std::vector<std::vector<int64_t>>& prompts,
                   const std::vector<int64_t>& lens, int64_t chunk, int64_t start) {
  const int64_t longest = *std::max_element(lens.begin(), lens.end());
  at::Tensor last;
  for (int64_t begin = start; begin < longest; begin += chunk) {
    const int64_t q = std::min(chunk, longest - begin);
    const PrefillChunk in = pack_prefill_chunk(prompts, lens, begin, q);
    // A chunk no prompt ends in only fills the cache: no LM head (eager
    // passes; a bucketed runner computes its fixed output anyway).
    if (in.ending.empty()) {
      call.forward(Pass::kPrefill, in.in, Logits::kNone);
      continue;
    }
    const at::Tensor out = call.forward(Pass::kPrefill, in.in, Logits::kLast);
    if (!last.defined()) {
      last = out.clone();
    } else {
      const at::Tensor rows =
          at::tensor(in.ending, at::TensorOptions().dtype(at::kLong)).to(out.device());
      last.index_copy_(0, rows, out.index_select(0, rows));
    }
  }
  return last;
}

at::Tensor decode_one_token(const Call& call, const Rows& rows, const std::vector<int64_t>& lens) {
  const int64_t b = static_cast<int64_t>(lens.size());
  StepPacker pack(b, 1);
  for (int64_t r = 0; r < b; ++r) {
    if (rows.done[r]) continue;
    pack.put(r, 0, rows.tokens[r].back(),
             lens[r] + static_cast<int64_t>(rows.tokens[r].size()) - 1);
  }
  return call.forward_and_pick(Pass::kDecode, pack.take(), rows.live());
}

int64_t decode_n_tokens(Call& call, Rows& rows, const std::vector<int64_t>& lens) {
  const int64_t planned = call.new_tokens - 1;
  int64_t steps = 0;
  for (; steps < planned && !rows.all_done(); ++steps) {
    call.emit_picked(rows, decode_one_token(call, rows, lens));
    if (call.options.on_step) call.options.on_step(steps + 1, planned);
  }
  return steps;
}

}  // namespace statickv::reference::detail
