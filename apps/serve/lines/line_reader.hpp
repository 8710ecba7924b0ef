#pragma once
// Lines from an input stream, read on their own thread, so the server keeps
// stepping while a client is still writing (or waiting for a reply).

#include <chrono>
#include <condition_variable>
#include <deque>
#include <istream>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

namespace statickv::serve {

class LineReader {
 public:
  /// Starts reading `in` (which must outlive the reader's thread: std::cin).
  explicit LineReader(std::istream& in) : shared_(std::make_shared<Shared>()) {
    // Untied: reading std::cin would otherwise flush std::cout from the
    // reader's thread while the server writes to it (replies flush anyway).
    in.tie(nullptr);
    // Detached: at exit the thread may still block in getline on an open pipe.
    std::thread([in = &in, shared = shared_] {
      std::string line;
      while (std::getline(*in, line)) {
        std::lock_guard<std::mutex> lock(shared->mutex);
        shared->lines.push_back(std::move(line));
        shared->ready.notify_one();
      }
      std::lock_guard<std::mutex> lock(shared->mutex);
      shared->ended = true;
      shared->ready.notify_one();
    }).detach();
  }

  /// The next line if one is there now.
  std::optional<std::string> poll() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return pop();
  }

  /// Waits until a line arrives, the input ends or `until` passes.
  std::optional<std::string> wait_until(std::chrono::steady_clock::time_point until) {
    std::unique_lock<std::mutex> lock(shared_->mutex);
    shared_->ready.wait_until(lock, until,
                              [&] { return !shared_->lines.empty() || shared_->ended; });
    return pop();
  }

  /// True once the input has ended and every line was taken.
  bool done() {
    std::lock_guard<std::mutex> lock(shared_->mutex);
    return shared_->ended && shared_->lines.empty();
  }

 private:
  struct Shared {
    std::mutex mutex;
    std::condition_variable ready;
    std::deque<std::string> lines;
    bool ended = false;
  };

  std::optional<std::string> pop() {  // mutex held
    if (shared_->lines.empty()) return std::nullopt;
    std::string line = std::move(shared_->lines.front());
    shared_->lines.pop_front();
    return line;
  }

  std::shared_ptr<Shared> shared_;
};

}  // namespace statickv::serve
