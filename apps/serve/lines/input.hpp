#pragma once
// What statickv-serve's loop reads, one turn at a time: the lines there are,
// whether the input has ended, and the time of the turn. A single process
// reads its own (LocalInput); with --tp every rank takes rank 0's turns
// (SharedInput), so every rank submits, cancels and steps identically
// (Note [ranks issue identical steps], docs/design.md).

#include "line_reader.hpp"

#include <statickv/engine/scheduler.hpp>
#include <statickv/model/tensor_parallel.hpp>

#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <memory>
#include <string>
#include <vector>

namespace statickv::serve {

struct Turn {
  std::vector<std::string> lines;
  bool ended = false;  ///< the input has ended and every line was taken
  double now_s = 0;    ///< seconds since the input was opened
};

class Input {
 public:
  virtual ~Input() = default;
  /// Every line there now.
  virtual Turn poll() = 0;
  /// At most one line: the first to arrive before `until_s`, or none.
  virtual Turn wait_until(double until_s) = 0;
  /// This process's time at a turn's now_s = 0: the one clock arrivals are
  /// read against (a second origin taken later would put them ahead of
  /// their admission).
  virtual reference::ServeClock::time_point origin() const = 0;
};

class LocalInput final : public Input {
 public:
  explicit LocalInput(LineReader& reader) : reader_(reader), start_(reference::ServeClock::now()) {}
  Turn poll() override {
    Turn turn;
    while (auto line = reader_.poll()) turn.lines.push_back(std::move(*line));
    return finish(std::move(turn));
  }
  double now_s() const {
    return std::chrono::duration<double>(reference::ServeClock::now() - start_).count();
  }
  Turn wait_until(double until_s) override {
    Turn turn;
    const auto until = start_ + std::chrono::duration_cast<reference::ServeClock::duration>(
                                    std::chrono::duration<double>(until_s));
    if (auto line = reader_.wait_until(until)) turn.lines.push_back(std::move(*line));
    return finish(std::move(turn));
  }
  reference::ServeClock::time_point origin() const override { return start_; }

 private:
  Turn finish(Turn turn) {
    turn.ended = turn.lines.empty() && reader_.done();
    turn.now_s = now_s();
    return turn;
  }
  LineReader& reader_;
  reference::ServeClock::time_point start_;
};

/// Rank 0 reads (its `local` input) and broadcasts each turn; the other
/// ranks take the broadcast. An idle wait is cut to `max_wait_s` so the
/// other ranks, blocked in the broadcast, never reach the collectives'
/// timeout.
class SharedInput final : public Input {
 public:
  SharedInput(std::unique_ptr<LocalInput> local, std::shared_ptr<reference::Communicator> comm,
              double max_wait_s)
      : local_(std::move(local)), comm_(std::move(comm)), max_wait_s_(max_wait_s) {}
  Turn poll() override { return share(comm_->rank() == 0 ? local_->poll() : Turn{}); }
  Turn wait_until(double until_s) override {
    if (comm_->rank() != 0) return share({});
    return share(local_->wait_until(std::min(until_s, local_->now_s() + max_wait_s_)));
  }
  /// Each rank's own clock, started at construction like rank 0's.
  reference::ServeClock::time_point origin() const override { return local_->origin(); }

 private:
  Turn share(Turn turn) {
    std::string bytes;
    if (comm_->rank() == 0) {
      bytes =
          nlohmann::json{{"lines", turn.lines}, {"ended", turn.ended}, {"now", turn.now_s}}.dump();
    }
    comm_->broadcast_bytes(bytes);
    const nlohmann::json json = nlohmann::json::parse(bytes);
    return {json.at("lines").get<std::vector<std::string>>(), json.at("ended").get<bool>(),
            json.at("now").get<double>()};
  }
  std::unique_ptr<LocalInput> local_;
  std::shared_ptr<reference::Communicator> comm_;
  double max_wait_s_;
};

}  // namespace statickv::serve
