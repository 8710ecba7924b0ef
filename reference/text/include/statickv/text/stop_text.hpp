#pragma once
// StopText: stop strings matched on decoded text as it streams, across
// token boundaries (statickv-serve --http's "stop"; docs/serving.md).
//
//   StopText stop({"\n\n", "User:"});
//   for (each decoded piece of a row) {
//     StopText::Out out = stop.push(piece);
//     send(out.text);                 // never holds the start of a match
//     if (out.stopped) break;         // the stop text itself is not sent
//   }
//   send(stop.finish());              // the row ended without a match
//
// Text that could still begin a stop string is held back until the next
// piece decides it. The first stop string to be completed ends the text,
// just before it (the one ending first; of two ending together, the longer),
// so how the text is cut into pieces never changes the answer. Fed
// valid UTF-8 pieces (StreamDecoder's), it returns valid UTF-8: a held
// suffix starts where a stop string starts, at a character boundary.

#include <algorithm>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace statickv::reference {

class StopText {
 public:
  struct Out {
    std::string text;      ///< safe to send now
    bool stopped = false;  ///< a stop string ended the text (after `text`)
  };

  /// Throws std::invalid_argument for an empty stop string.
  explicit StopText(std::vector<std::string> stops) : stops_(std::move(stops)) {
    for (size_t i = 0; i < stops_.size(); ++i) {
      if (stops_[i].empty()) {
        throw std::invalid_argument("stop[" + std::to_string(i) +
                                    "]: expected a non-empty string but got \"\"");
      }
    }
  }

  /// Takes the next decoded piece. After a match every later piece is dropped.
  Out push(std::string_view piece) {
    Out out;
    if (stopped_) return out;
    held_.append(piece);
    size_t first = std::string::npos, first_end = std::string::npos;
    for (const std::string& s : stops_) {
      const size_t at = held_.find(s);
      if (at == std::string::npos) continue;
      if (at + s.size() < first_end || (at + s.size() == first_end && at < first)) {
        first = at, first_end = at + s.size();
      }
    }
    if (first != std::string::npos) {
      out.text = held_.substr(0, first);
      out.stopped = stopped_ = true;
      held_.clear();
      return out;
    }
    const size_t keep = partial_suffix();
    out.text = held_.substr(0, held_.size() - keep);
    held_.erase(0, held_.size() - keep);
    return out;
  }

  /// What is held back, once the text has ended without a match.
  std::string finish() { return std::exchange(held_, std::string()); }

  bool stopped() const { return stopped_; }

 private:
  /// The longest suffix of held_ that is a proper prefix of a stop string.
  size_t partial_suffix() const {
    size_t keep = 0;
    for (const std::string& s : stops_) {
      for (size_t k = std::min(s.size() - 1, held_.size()); k > keep; --k) {
        if (held_.compare(held_.size() - k, k, s, 0, k) == 0) {
          keep = k;
          break;
        }
      }
    }
    return keep;
  }

  std::vector<std::string> stops_;
  std::string held_;
  bool stopped_ = false;
};

}  // namespace statickv::reference
