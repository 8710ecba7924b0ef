// statickv-serve's loop (server.hpp).

#include "server.hpp"

#include <statickv/support/field_error.hpp>

#include <c10/util/Exception.h>

#include <cstdio>

namespace statickv::serve {

using reference::ServeClock;

void Server::run(Input& in) {
  start_ = in.origin();
  while (true) {
    Turn turn = in.poll();
    for (const std::string& line : turn.lines) handle(line, turn.now_s);
    submit_due(turn.now_s);
    if (!scheduler_.idle()) {
      scheduler_.step();
      write_finished();
      continue;
    }
    if (turn.ended && held_.empty()) break;
    // Idle: sleep until a line arrives or the next replayed arrival is due.
    const double until = held_.empty() ? 24 * 3600.0 : held_.begin()->first;
    turn = in.wait_until(until);
    for (const std::string& line : turn.lines) handle(line, turn.now_s);
  }
}

void Server::handle(const std::string& line, double now_s) {
  if (line.find_first_not_of(" \t\r") == std::string::npos) return;  // blank lines
  Message message;
  try {
    message = parse_message(line);
  } catch (const ProtocolError& e) {
    out_ << error_line(e.id, e.what(), e.field) << std::endl;
    return;
  }
  if (message.cancel) {
    cancel(message);
  } else if (message.arrival_s) {
    const double at = *message.arrival_s;
    held_.emplace(at, std::move(message));
  } else {
    submit(std::move(message), at(now_s));
  }
}

void Server::submit(Message message, ServeClock::time_point arrival) {
  try {
    if (message.text) {
      STATICKV_CHECK_FIELD(text_ != nullptr, "text",
                           "expected prompt (token ids): this server has no tokenizer "
                           "(--tokenizer)");
      message.request.prompt = text_->encode_prompt(*message.text);
    }
    message.request.arrival = arrival;
    const std::string key = message.request.id;
    scheduler_.submit(std::move(message.request));
    ids_[key] = message.id;
  } catch (const c10::Error& e) {
    out_ << error_line(message.id, e.what_without_backtrace(), reference::refused_field(e))
         << std::endl;
  } catch (const std::exception& e) {  // the tokenizer's errors
    out_ << error_line(message.id, std::string("text: ") + e.what(), "text") << std::endl;
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
  if (!scheduler_.cancel(message.request.id)) {
    std::fprintf(stderr, "statickv-serve: cancel %s: no such request waiting or running\n",
                 message.id.dump().c_str());
  }
  write_finished();
}

void Server::submit_due(double now_s) {
  while (!held_.empty() && held_.begin()->first <= now_s) {
    auto node = held_.extract(held_.begin());
    submit(std::move(node.mapped()), at(node.key()));
  }
}

ServeClock::time_point Server::at(double seconds) const {
  return start_ +
         std::chrono::duration_cast<ServeClock::duration>(std::chrono::duration<double>(seconds));
}

void Server::write_finished() {
  for (const reference::Completion& c : scheduler_.take_finished()) {
    auto it = ids_.find(c.id);
    const nlohmann::json id = it != ids_.end() ? it->second : nlohmann::json(c.id);
    if (it != ids_.end()) ids_.erase(it);
    std::optional<std::string> text;
    if (text_) text = text_->decode(c.tokens);
    out_ << reply_line(id, c, text) << std::endl;
  }
}

}  // namespace statickv::serve
