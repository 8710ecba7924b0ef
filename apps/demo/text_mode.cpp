// statickv-demo's text prompts and streamed answers (text_mode.hpp).

#include "text_mode.hpp"

#include <statickv/flags/flags.hpp>

#include <fmt/format.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <optional>

#if STATICKV_DEMO_TOKENIZER
#include <statickv/text/chat_template.hpp>
#include <statickv/text/tokenizer.hpp>
#endif

namespace statickv::demo {

using flags::FlagError;
using Clock = std::chrono::steady_clock;

std::vector<std::string> read_prompts_file(const std::string& path) {
  std::ifstream in(path);
  if (!in)
    throw flags::FlagError("--prompts-file: expected a readable file but got '" + path + "'");
  std::vector<std::string> prompts;
  std::string line;
  while (std::getline(in, line)) {
    if (!line.empty() && line.back() == '\r') line.pop_back();
    if (line.find_first_not_of(" \t") != std::string::npos) prompts.push_back(line);
  }
  if (prompts.empty()) {
    throw flags::FlagError("--prompts-file: expected at least one non-empty line but '" + path +
                           "' has none");
  }
  return prompts;
}

#if STATICKV_DEMO_TOKENIZER

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

/// One row's answer as it streams: text held back until its turn, and when
/// its first and last tokens arrived.
struct Answer {
  std::string held;
  int64_t tokens = 0;
  bool done = false, stopped = false;
  Clock::time_point first, last;
};

/// Prints the answers of one generate call in prompt order (text_mode.hpp).
class OrderedPrinter {
 public:
  OrderedPrinter(const tokenizer::Tokenizer& tok, const std::vector<std::string>& questions,
                 Clock::time_point start, std::vector<int64_t> stop_ids)
      : tok_(&tok),
        questions_(&questions),
        start_(start),
        stop_ids_(std::move(stop_ids)),
        answers_(questions.size()) {
    for (size_t r = 0; r < questions.size(); ++r) streams_.push_back(tok.stream());
    print_question(0);
  }

  void on_token(int64_t row, int64_t id, bool last) {
    const size_t r = static_cast<size_t>(row);
    Answer& a = answers_[r];
    a.last = Clock::now();
    if (a.tokens++ == 0) a.first = a.last;
    // "Stopped" by the generator's own rule (its stop ids), not the
    // tokenizer's: the two can differ (generation_config.json's eos ids).
    a.stopped = last && std::find(stop_ids_.begin(), stop_ids_.end(), id) != stop_ids_.end();
    if (!a.stopped && !tok_->is_eos(id)) a.held += streams_[r].push(id);
    if (last) {
      a.held += streams_[r].finish();
      a.done = true;
    }
    flush();
  }

 private:
  void print_question(size_t r) {
    if (r < questions_->size()) fmt::print("> {}\n", (*questions_)[r]);
    std::fflush(stdout);
  }

  // Prints what the current row holds; each finished row is closed with
  // its statistics and the next row's question and held text follow.
  void flush() {
    while (current_ < answers_.size()) {
      Answer& a = answers_[current_];
      std::fputs(a.held.c_str(), stdout);
      a.held.clear();
      if (!a.done) break;
      print_stats(a);
      print_question(++current_);
    }
    std::fflush(stdout);
  }

  void print_stats(const Answer& a) const {
    const double ttft = seconds_between(start_, a.first);
    const double decode = seconds_between(a.first, a.last);
    const std::string rate =
        a.tokens > 1 && decode > 0 ? fmt::format("{:.1f}", (a.tokens - 1) / decode) : "-";
    fmt::print("\n  [{} tokens, {} | time to first token {:.0f} ms | decode {} tokens/s]\n\n",
               a.tokens, a.stopped ? "stopped at eos" : "token limit", ttft * 1e3, rate);
  }

  const tokenizer::Tokenizer* tok_;
  const std::vector<std::string>* questions_;
  Clock::time_point start_;
  std::vector<int64_t> stop_ids_;
  std::vector<Answer> answers_;
  std::vector<tokenizer::StreamDecoder> streams_;
  size_t current_ = 0;
};

class TokenizerSession final : public TextSession {
 public:
  TokenizerSession(tokenizer::Tokenizer tok, const TextFlags& flags) : tok_(std::move(tok)) {
    questions_ = flags.prompts;
    std::optional<tokenizer::ChatTemplate> chat;
    if (flags.chat) {
      if (!tokenizer::ChatTemplate::available(tok_.dir())) {
        throw flags::FlagError(
            "--chat: expected a chat template (" + tok_.dir() +
            "/chat_template.jinja or tokenizer_config.json's chat_template) but the "
            "checkpoint has none");
      }
      chat = tokenizer::ChatTemplate::load(tok_.dir());
    }
    for (size_t r = 0; r < questions_.size(); ++r) {
      ids_.push_back(chat ? tokenizer::apply_chat(tok_, *chat, tokenizer::user_turn(questions_[r]))
                          : tok_.encode_prompt(questions_[r]));
      if (ids_.back().empty()) {
        throw flags::FlagError(
            fmt::format("--prompt: expected text with at least one token but prompt "
                        "{} encodes to none",
                        r));
      }
    }
  }

  const std::vector<std::vector<int64_t>>& prompt_ids() const override { return ids_; }

  reference::TokenCallback printer(Clock::time_point start,
                                   std::vector<int64_t> stop_ids) override {
    printer_ = std::make_unique<OrderedPrinter>(tok_, questions_, start, std::move(stop_ids));
    OrderedPrinter* p = printer_.get();
    return [p](int64_t row, int64_t id, bool last) { p->on_token(row, id, last); };
  }

 private:
  tokenizer::Tokenizer tok_;
  std::vector<std::string> questions_;
  std::vector<std::vector<int64_t>> ids_;
  std::unique_ptr<OrderedPrinter> printer_;
};

}  // namespace

std::unique_ptr<TextSession> TextSession::open(const std::string& checkpoint,
                                               const TextFlags& flags) {
  if (checkpoint.empty()) {
    throw flags::FlagError(
        std::string(flags.prompts_file.empty() ? "--prompt" : "--prompts-file") +
        ": expected --checkpoint DIR (text needs its tokenizer.json) but got none");
  }
  std::optional<tokenizer::Tokenizer> tok;
  try {
    tok.emplace(tokenizer::Tokenizer::load(checkpoint));
  } catch (const std::runtime_error& e) {
    throw flags::FlagError(std::string("--checkpoint: expected a tokenizer there but ") + e.what());
  }
  return std::make_unique<TokenizerSession>(std::move(*tok), flags);
}

#else  // !STATICKV_DEMO_TOKENIZER

std::unique_ptr<TextSession> TextSession::open(const std::string&, const TextFlags&) {
  throw flags::FlagError(
      "--prompt: expected a statickv-demo built with statickv::tokenizer, but this one was "
      "configured without it (pytorch-tokenizers or re2 missing; docs/tokenizer.md)");
}

#endif

}  // namespace statickv::demo
