// statickv-serve's loop (server.hpp).

#include "server.hpp"

#include <c10/util/Exception.h>

#include <cstdio>

namespace statickv::serve {

using reference::ServeClock;

void Server::run(LineReader& in) {
  start_ = ServeClock::now();
  while (true) {
    while (auto line = in.poll()) handle(*line);
    submit_due();
    if (!engine_.idle()) {
      engine_.step();
      write_finished();
      continue;
    }
    if (in.done() && held_.empty()) break;
    // Idle: sleep until a line arrives or the next replayed arrival is due.
    const auto until = held_.empty()
                           ? ServeClock::now() + std::chrono::hours(24)
                           : start_ + std::chrono::duration_cast<ServeClock::duration>(
                                          std::chrono::duration<double>(held_.begin()->first));
    if (auto line = in.wait_until(until)) handle(*line);
  }
}

void Server::handle(const std::string& line) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;  // blank lines
  Message message;
  try {
    message = parse_message(line);
  } catch (const ProtocolError& e) {
    out_ << error_line(e.id, e.what()) << std::endl;
    return;
  }
  if (message.cancel) {
    cancel(message);
  } else if (message.arrival_s) {
    const double at = *message.arrival_s;
    held_.emplace(at, std::move(message));
  } else {
    submit(std::move(message), ServeClock::now());
  }
}

void Server::submit(Message message, ServeClock::time_point arrival) {
  try {
    if (message.text) {
      TORCH_CHECK(static_cast<bool>(codec_.encode),
                  "text: expected prompt (token ids): this server has no tokenizer (--tokenizer)");
      message.request.prompt = codec_.encode(*message.text);
    }
    message.request.arrival = arrival;
    const std::string key = message.request.id;
    engine_.submit(std::move(message.request));
    ids_[key] = message.id;
  } catch (const c10::Error& e) {
    out_ << error_line(message.id, e.what_without_backtrace()) << std::endl;
  } catch (const std::exception& e) {  // the tokenizer's errors
    out_ << error_line(message.id, std::string("text: ") + e.what()) << std::endl;
  }
}

void Server::cancel(const Message& message) {
  for (auto it = held_.begin(); it != held_.end(); ++it) {
    if (it->second.request.id != message.request.id) continue;
    reference::Completion c;
    c.finish = reference::Finish::kCancelled;
    out_ << reply_line(it->second.id, c) << std::endl;
    held_.erase(it);
    return;
  }
  if (!engine_.cancel(message.request.id)) {
    std::fprintf(stderr, "statickv-serve: cancel %s: no such request waiting or running\n",
                 message.id.dump().c_str());
  }
  write_finished();
}

void Server::submit_due() {
  const double now = std::chrono::duration<double>(ServeClock::now() - start_).count();
  while (!held_.empty() && held_.begin()->first <= now) {
    auto node = held_.extract(held_.begin());
    const auto arrival = start_ + std::chrono::duration_cast<ServeClock::duration>(
                                      std::chrono::duration<double>(node.key()));
    submit(std::move(node.mapped()), arrival);
  }
}

void Server::write_finished() {
  for (const reference::Completion& c : engine_.take_finished()) {
    auto it = ids_.find(c.id);
    const nlohmann::json id = it != ids_.end() ? it->second : nlohmann::json(c.id);
    if (it != ids_.end()) ids_.erase(it);
    std::optional<std::string> text;
    if (codec_.decode) text = codec_.decode(c.tokens);
    out_ << reply_line(id, c, text) << std::endl;
  }
}

}  // namespace statickv::serve
