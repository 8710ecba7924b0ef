// statickv-serve --http's scheduler thread and request channels (scheduler_thread.hpp).

#include "scheduler_thread.hpp"

#include <statickv/support/field_error.hpp>

#include <c10/util/Exception.h>

#include <algorithm>
#include <utility>

namespace statickv::serve {

using reference::Completion;
using reference::Finish;
using reference::ServeClock;

void Stream::accept() {
  std::lock_guard<std::mutex> lock(mutex_);
  decided_ = true;
  changed_.notify_all();
}

void Stream::reject(const ApiError& error) {
  std::lock_guard<std::mutex> lock(mutex_);
  decided_ = true;
  rejected_ = error;
  changed_.notify_all();
}

void Stream::push(Piece piece) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.pieces.push_back(std::move(piece));
  changed_.notify_all();
}

void Stream::end(End end) {
  std::lock_guard<std::mutex> lock(mutex_);
  pending_.ends.push_back(std::move(end));
  changed_.notify_all();
}

void Stream::wait_accepted() {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait(lock, [&] { return decided_; });
  if (rejected_) throw *rejected_;
}

Stream::Batch Stream::next(std::chrono::milliseconds timeout) {
  std::unique_lock<std::mutex> lock(mutex_);
  changed_.wait_for(lock, timeout,
                    [&] { return !pending_.pieces.empty() || !pending_.ends.empty(); });
  return std::exchange(pending_, Batch());
}

SchedulerThread::SchedulerThread(reference::Scheduler& scheduler, std::shared_ptr<TextTools> text,
                                 Metrics& metrics, int64_t max_queue,
                                 std::chrono::milliseconds gather)
    : scheduler_(scheduler),
      text_(std::move(text)),
      metrics_(metrics),
      max_queue_(max_queue),
      gather_(gather) {
  for (const char* outcome : {"stop", "length", "cancelled", "error"}) {
    metrics_.count("statickv_requests_total", "outcome", outcome, 0);
  }
  metrics_.count("statickv_prompt_tokens_total", 0);
  metrics_.count("statickv_generation_tokens_total", 0);
  metrics_.set_gauge("statickv_rows_total", static_cast<double>(scheduler_.options().max_batch));
  publish_gauges();
}

void SchedulerThread::submit(Submission submission) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    const auto queued = static_cast<int64_t>(inbox_.size()) + waiting_.load();
    if (queued >= max_queue_) {
      throw ApiError(503,
                     "server busy: " + std::to_string(queued) +
                         " requests are waiting for a row (--max-queue " +
                         std::to_string(max_queue_) + "); retry later",
                     "", "server_error", "queue_full");
    }
    inbox_.push_back(std::move(submission));
  }
  wake_.notify_one();
}

void SchedulerThread::cancel(const std::string& id) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    cancels_.push_back(id);
  }
  wake_.notify_one();
}

void SchedulerThread::stop(std::function<bool()> drained) {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    drained_ = std::move(drained);
  }
  wake_.notify_one();
}

void SchedulerThread::run() {
  while (true) {
    gather();
    take_inbox();
    if (!scheduler_.idle()) {
      scheduler_.step();
      // the scheduler's own timer: the exit report's mean step is the same
      // figure, over the same steps (0: no row ran, no step counted).
      if (const double took = scheduler_.last_step_seconds(); took > 0)
        metrics_.observe("statickv_step_seconds", took);
      after_step();
    }
    for (const Completion& c : scheduler_.take_finished()) finish(c);
    publish_gauges();
    if (!scheduler_.idle()) continue;
    if (should_exit()) return;
    std::unique_lock<std::mutex> lock(mutex_);
    wake_.wait_for(lock, std::chrono::milliseconds(50),
                   [&] { return !inbox_.empty() || !cancels_.empty(); });
  }
}

// docs/serving.md, "Gathering a burst": an idle server starts its first step
// with the requests that arrive together, not with the first of them alone,
// so they prefill in one step and decode in step (the scheduler's burst
// budget) instead of the rest prefilling beside the first one's decoding.
void SchedulerThread::gather() {
  using Clock = std::chrono::steady_clock;
  if (gather_.count() == 0 || !scheduler_.idle()) return;
  // No arrival for a fifth of the window (2 ms by default): the burst is in.
  const auto quiet = std::max(std::chrono::milliseconds(2), gather_ / 5);
  const auto deadline = Clock::now() + gather_;
  // Every row taken, or as many waiting as submit() takes before its 503.
  const int64_t enough = std::min(scheduler_.options().max_batch, max_queue_);
  std::unique_lock<std::mutex> lock(mutex_);
  const auto choices = [&] {
    int64_t n = 0;
    for (const Submission& s : inbox_) n += static_cast<int64_t>(s.choices.size());
    return n;
  };
  for (int64_t seen = choices(); seen > 0 && seen < enough && !drained_;) {
    const auto now = Clock::now();
    if (now >= deadline) return;
    const auto wait = std::min<Clock::duration>(quiet, deadline - now);
    if (!wake_.wait_for(lock, wait, [&] { return choices() != seen || drained_; })) return;
    seen = choices();
  }
}

bool SchedulerThread::should_exit() {
  std::function<bool()> drained;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    if (!drained_ || !inbox_.empty() || !cancels_.empty()) return false;
    drained = drained_;
  }
  return scheduler_.idle() && drained();
}

void SchedulerThread::take_inbox() {
  std::vector<Submission> inbox;
  std::vector<std::string> cancels;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inbox.swap(inbox_);
    cancels.swap(cancels_);
  }
  for (Submission& s : inbox) admit(std::move(s));
  for (const std::string& id : cancels) {
    if (live_.count(id) != 0) scheduler_.cancel(id);
  }
}

void SchedulerThread::admit(Submission s) {
  // One verdict per request: a choice the scheduler refuses refuses them all,
  // and the choices admitted before it are cancelled and forgotten.
  std::vector<std::string> admitted;
  int64_t prompt_tokens = 0;
  for (size_t i = 0; i < s.choices.size(); ++i) {
    reference::Request& r = s.choices[i];
    Live live;
    live.index = static_cast<int64_t>(i);
    live.stream = s.stream;
    if (text_) live.decoder = text_->stream();
    if (!s.stop.empty()) live.stop.emplace(s.stop);
    const std::string id = r.id;
    prompt_tokens += static_cast<int64_t>(r.prompt.size());
    r.on_token = [this](const std::string& row, int64_t token) { on_token(row, token); };
    if (r.sampling.logprobs >= 0) {
      r.on_logprob = [this](const std::string& row, const reference::TokenLogprob& lp) {
        on_logprob(row, lp);
      };
    }
    try {
      scheduler_.submit(std::move(r));
    } catch (const c10::Error& e) {
      for (const std::string& done : admitted) {
        scheduler_.cancel(done);
        live_.erase(done);
      }
      s.stream->reject(ApiError(400, e.what_without_backtrace(), reference::refused_field(e)));
      return;
    }
    admitted.push_back(id);
    live_.emplace(id, std::move(live));
  }
  metrics_.count("statickv_prompt_tokens_total", prompt_tokens);
  s.stream->accept();
}

void SchedulerThread::on_token(const std::string& id, int64_t token) {
  const auto it = live_.find(id);
  if (it == live_.end() || it->second.stop_matched) return;
  Live& l = it->second;
  l.pending.ids.push_back(token);
  l.pending.produced = ServeClock::now();
  ++l.tokens;
  // A matched stop string ends the request after the step (after_step).
  if (l.decoder) l.pending.text += l.sendable(l.decoder->push(token), /*last=*/false);
}

void SchedulerThread::on_logprob(const std::string& id, const reference::TokenLogprob& logprob) {
  const auto it = live_.find(id);
  if (it == live_.end() || it->second.stop_matched) return;
  it->second.pending.logprobs.push_back(logprob);
}

std::string SchedulerThread::Live::sendable(const std::string& piece, bool last) {
  if (!stop) return piece;
  const reference::StopText::Out out = stop->push(piece);
  stop_matched = out.stopped;
  return out.text + (last && !out.stopped ? stop->finish() : std::string());
}

void SchedulerThread::after_step() {
  for (auto& [id, l] : live_) {
    if (l.stop_matched && !l.cancel_sent) {  // a stop string: no further token is needed
      scheduler_.cancel(id);
      l.cancel_sent = true;
    }
    if (l.pending.ids.empty()) continue;
    metrics_.count("statickv_generation_tokens_total", static_cast<int64_t>(l.pending.ids.size()));
    l.pending.index = l.index;
    l.stream->push(std::exchange(l.pending, Stream::Piece()));
  }
}

void SchedulerThread::finish(const Completion& c) {
  const auto it = live_.find(c.id);
  if (it == live_.end()) return;
  Live& l = it->second;
  if (l.decoder && !l.stop_matched) {  // the characters an unfinished byte sequence held
    const std::string rest = l.sendable(l.decoder->finish(), /*last=*/true);
    if (!rest.empty()) l.stream->push({l.index, rest, {}, {}, ServeClock::now()});
  }
  std::string finish = reference::to_string(c.finish);
  if (l.stop_matched) finish = "stop";
  metrics_.count("statickv_requests_total", "outcome", finish);
  if (c.stats.ttft_seconds > 0) {
    metrics_.observe("statickv_time_to_first_token_seconds", c.stats.ttft_seconds);
  }
  if (c.stats.decode_tokens_per_second > 0) {
    metrics_.observe("statickv_time_per_output_token_seconds",
                     1.0 / c.stats.decode_tokens_per_second);
  }
  l.stream->end({l.index, finish, c.error, l.tokens, c.prompt_logprobs});
  live_.erase(it);
}

void SchedulerThread::publish_gauges() {
  const int64_t waiting = scheduler_.waiting();
  waiting_ = waiting;
  std::size_t inbox = 0;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    inbox = inbox_.size();
  }
  metrics_.set_gauge("statickv_queue_depth", static_cast<double>(waiting) + inbox);
  metrics_.set_gauge("statickv_rows_in_use", static_cast<double>(scheduler_.live_rows()));
}

}  // namespace statickv::serve
