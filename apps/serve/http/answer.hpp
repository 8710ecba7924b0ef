#pragma once
// statickv-serve --http: a planned request's answer from its Stream, whole
// (every choice collected, then one body) or as server-sent events (each
// choice's pieces as they come, interleaved, each chunk naming its index).
// Text and JSON only; server.cpp writes the bytes.

#include "logprobs.hpp"
#include "plan.hpp"
#include "response.hpp"
#include "scheduler_thread.hpp"

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace statickv::serve {

/// Reads `plan`'s stream until every choice has ended and returns the
/// response body, or throws ApiError 500 for a choice the engine failed.
nlohmann::json whole_answer(const Plan& plan, const ResponseHead& head, const TokenText& text);

/// One streamed answer's state between writes.
class StreamAnswer {
 public:
  StreamAnswer(const Plan& plan, ResponseHead head, TokenText text, bool include_usage,
               bool continuous_usage);

  /// The events a client sees before any token: chat's role chunk per
  /// choice; completions' echoed prompt per choice.
  std::string opening();
  /// The events of a batch: each piece as a chunk of its choice, each end
  /// as its finish chunk; after the last end, the usage chunk (when asked)
  /// and [DONE].
  std::string events(const Stream::Batch& batch);
  /// Every choice has ended, or one failed (events() wrote [DONE]).
  bool done() const { return ended_ == static_cast<int64_t>(offsets_.size()); }
  /// A choice ended with the engine's error: the answer stopped there, and
  /// the other choices may still be running.
  bool failed() const { return failed_; }

 private:
  std::string piece_event(const Stream::Piece& p);
  nlohmann::json with_usage(nlohmann::json chunk) const;

  const Plan& plan_;
  ResponseHead head_;
  TokenText text_;
  bool include_usage_, continuous_usage_;
  std::vector<int64_t> offsets_;  ///< each choice's text bytes so far (text_offset)
  int64_t ended_ = 0;
  bool failed_ = false;
  int64_t completion_tokens_ = 0;  ///< streamed so far (continuous usage)
  int64_t final_tokens_ = 0;       ///< the ended choices' completion tokens
};

}  // namespace statickv::serve
