#pragma once
// statickv-serve's loop: lines in (requests, cancellations, replay times),
// engine steps, one reply line per finished request. Reading runs on its own
// thread (LineReader); everything else, the engine included, on this one.
// Time is the input's (Turn::now_s), so --tp ranks agree on what is due.

#include "input.hpp"
#include "protocol.hpp"
#include "serve/text_tools.hpp"

#include <statickv/engine/scheduler.hpp>

#include <map>
#include <memory>
#include <ostream>
#include <string>
#include <vector>

namespace statickv::serve {

class Server {
 public:
  /// `text`: "text" in and out; null without a tokenizer.
  Server(reference::Scheduler& scheduler, std::shared_ptr<TextTools> text, std::ostream& out)
      : scheduler_(scheduler), text_(std::move(text)), out_(out) {}

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

  reference::Scheduler& scheduler_;
  std::shared_ptr<TextTools> text_;
  std::ostream& out_;
  reference::ServeClock::time_point start_;    // the input's origin (Input::origin)
  std::multimap<double, Message> held_;        // arrival_s -> not yet due
  std::map<std::string, nlohmann::json> ids_;  // engine id -> the client's id
};

}  // namespace statickv::serve
