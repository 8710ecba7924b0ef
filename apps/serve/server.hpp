#pragma once
// statickv-serve's loop: lines in (requests, cancellations, replay times),
// engine steps, one reply line per finished request. Reading runs on its own
// thread (LineReader); everything else, the engine included, on this one.
// Time is the input's (Turn::now_s), so --tp ranks agree on what is due.

#include "input.hpp"
#include "protocol.hpp"

#include <statickv/reference/scheduler.hpp>

#include <functional>
#include <map>
#include <ostream>
#include <string>
#include <vector>

namespace statickv::serve {

/// Text in and out (empty functions: no tokenizer).
struct TextCodec {
  std::function<std::vector<int64_t>(const std::string&)> encode;
  std::function<std::string(const std::vector<int64_t>&)> decode;
};

class Server {
 public:
  Server(reference::Scheduler& engine, TextCodec codec, std::ostream& out)
      : engine_(engine), codec_(std::move(codec)), out_(out) {}

  /// Serves until the input ends and every request has finished.
  void run(Input& in);

 private:
  void handle(const std::string& line, double now_s);
  void submit(Message message, reference::ServeClock::time_point arrival);
  void cancel(const Message& message);
  void submit_due(double now_s);
  void write_finished();
  /// The time `seconds` after the start.
  reference::ServeClock::time_point at(double seconds) const;

  reference::Scheduler& engine_;
  TextCodec codec_;
  std::ostream& out_;
  reference::ServeClock::time_point start_;
  std::multimap<double, Message> held_;        // arrival_s -> not yet due
  std::map<std::string, nlohmann::json> ids_;  // engine id -> the client's id
};

}  // namespace statickv::serve
