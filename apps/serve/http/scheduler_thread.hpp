#pragma once
// statickv-serve --http's scheduler side: the one thread that owns the
// Scheduler. HTTP handler threads hand it submissions and cancellations
// (SchedulerThread::submit, cancel); it steps the scheduler, decodes each row's
// tokens, matches stop strings, and passes every piece to the request's
// Stream, which its handler thread drains into the socket.

#include "metrics.hpp"
#include "request.hpp"
#include "serve/text_tools.hpp"

#include <statickv/engine/scheduler.hpp>
#include <statickv/text/stop_text.hpp>

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

namespace statickv::serve {

/// One HTTP request's channel, shared by its choices: written by the
/// scheduler thread, read by its handler thread.
class Stream {
 public:
  struct Piece {
    int64_t index = 0;  ///< the choice
    std::string text;
    std::vector<int64_t> ids;
    std::vector<reference::TokenLogprob> logprobs;  ///< one per id, when asked
    reference::ServeClock::time_point produced;     ///< when the scheduler emitted the last id
  };
  struct End {
    int64_t index = 0;   ///< the choice
    std::string finish;  ///< "stop" | "length" | "error"
    std::string error;   ///< finish "error" only
    int64_t completion_tokens = 0;
    std::vector<reference::TokenLogprob> prompt_logprobs;  ///< echo with logprobs
  };
  /// What next() hands over.
  struct Batch {
    std::vector<Piece> pieces;
    std::vector<End> ends;
  };

  // The scheduler thread.
  void accept();
  void reject(const ApiError& error);
  void push(Piece piece);
  void end(End end);

  // The handler thread.
  /// Waits for the scheduler's verdict; throws the ApiError of a rejection.
  void wait_accepted();
  /// Waits up to `timeout` for pieces or ends; returns those since the
  /// last call.
  Batch next(std::chrono::milliseconds timeout);

 private:
  std::mutex mutex_;
  std::condition_variable changed_;
  bool decided_ = false;
  std::optional<ApiError> rejected_;
  Batch pending_;
};

/// A request ready for the scheduler: one Scheduler request per choice
/// (prompt ids, limits, sampling; choice i's id is the i-th), its stop
/// strings and its channel.
struct Submission {
  std::vector<reference::Request> choices;
  std::vector<std::string> stop;
  std::shared_ptr<Stream> stream;
};

class SchedulerThread {
 public:
  /// `text` may be null (no tokenizer: pieces carry ids and empty text).
  /// `gather`: how long an idle server's first arrival may wait for others
  /// (gather(); 0: none).
  SchedulerThread(reference::Scheduler& scheduler, std::shared_ptr<TextTools> text,
                  Metrics& metrics, int64_t max_queue, std::chrono::milliseconds gather);

  /// Any thread: queues a submission (ApiError 503 past --max-queue).
  void submit(Submission submission);
  /// Any thread: ends a request whose client went away.
  void cancel(const std::string& id);
  /// Any thread: asks run() to return once `drained()` is true and nothing
  /// waits or runs.
  void stop(std::function<bool()> drained);

  /// The scheduler thread: steps until stopped and drained.
  void run();

 private:
  struct Live {
    int64_t index = 0;  ///< the choice of its HTTP request
    std::shared_ptr<Stream> stream;
    std::optional<TextStream> decoder;
    std::optional<reference::StopText> stop;
    Stream::Piece pending;  ///< this step's tokens and text, sent after the step
    int64_t tokens = 0;     ///< generated ids sent (up to a stop string's end)
    bool stop_matched = false;
    bool cancel_sent = false;
    /// What of a decoded piece may be sent now (stop strings held back or
    /// matched); `last`: the row has ended, so nothing stays held.
    std::string sendable(const std::string& piece, bool last);
  };

  void gather();
  void take_inbox();
  void admit(Submission submission);
  void on_token(const std::string& id, int64_t token);
  void on_logprob(const std::string& id, const reference::TokenLogprob& logprob);
  void after_step();
  void finish(const reference::Completion& c);
  void publish_gauges();
  bool should_exit();

  reference::Scheduler& scheduler_;
  std::shared_ptr<TextTools> text_;
  Metrics& metrics_;
  int64_t max_queue_;
  std::chrono::milliseconds gather_;

  std::mutex mutex_;  // the inbox and the stop request
  std::condition_variable wake_;
  std::vector<Submission> inbox_;
  std::vector<std::string> cancels_;
  std::function<bool()> drained_;
  std::atomic<int64_t> waiting_{0};  // the scheduler's queue, as of the last step

  std::map<std::string, Live> live_;  // the scheduler thread's own
};

}  // namespace statickv::serve
