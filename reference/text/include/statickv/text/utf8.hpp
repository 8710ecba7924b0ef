#pragma once
// UTF-8 for streamed tokens. Byte-level BPE tokens are bytes, not characters:
// "é" may come as two tokens, an emoji as up to four. Utf8Stream takes bytes
// as they come and gives back only whole characters; to_valid_utf8 repairs a
// finished byte string. Both replace ill-formed bytes with U+FFFD exactly as
// Hugging Face's decode does (Rust's String::from_utf8_lossy: one U+FFFD per
// maximal subpart of an ill-formed sequence, Unicode 15 section 3.9), so
// streaming a sequence and decoding it at once give the same text.
//
// Header-only, no dependencies.

#include <cstddef>
#include <string>
#include <string_view>

namespace statickv::tokenizer {

namespace utf8_detail {

inline constexpr std::string_view kReplacement = "\xEF\xBF\xBD";  // U+FFFD

/// What the bytes at the start of `s` are.
struct Scan {
  enum Kind { kComplete, kIllFormed, kIncomplete } kind;
  /// kComplete: the character's length. kIllFormed: the length of the
  /// maximal subpart to replace with one U+FFFD (at least 1). kIncomplete:
  /// `s.size()` (a well-formed prefix of a character that needs more bytes).
  size_t length;
};

inline Scan scan(std::string_view s) {
  const auto b = [&](size_t i) { return static_cast<unsigned char>(s[i]); };
  const unsigned char lead = b(0);
  if (lead < 0x80) return {Scan::kComplete, 1};
  size_t need = 0;                     // continuation bytes after the lead
  unsigned char lo = 0x80, hi = 0xBF;  // range of the first continuation byte
  if (lead >= 0xC2 && lead <= 0xDF) {
    need = 1;
  } else if (lead >= 0xE0 && lead <= 0xEF) {
    need = 2;
    if (lead == 0xE0) lo = 0xA0;  // no overlongs
    if (lead == 0xED) hi = 0x9F;  // no surrogates
  } else if (lead >= 0xF0 && lead <= 0xF4) {
    need = 3;
    if (lead == 0xF0) lo = 0x90;  // no overlongs
    if (lead == 0xF4) hi = 0x8F;  // nothing above U+10FFFF
  } else {
    return {Scan::kIllFormed, 1};  // 80..C1, F5..FF never start a character
  }
  for (size_t i = 1; i <= need; ++i) {
    if (i == s.size()) return {Scan::kIncomplete, s.size()};
    const unsigned char c = b(i);
    const bool fits = i == 1 ? (c >= lo && c <= hi) : (c >= 0x80 && c <= 0xBF);
    if (!fits) return {Scan::kIllFormed, i};
  }
  return {Scan::kComplete, need + 1};
}

}  // namespace utf8_detail

/// True if `s` is well-formed UTF-8 (no partial, overlong or surrogate
/// sequences, nothing above U+10FFFF).
inline bool is_valid_utf8(std::string_view s) {
  while (!s.empty()) {
    const auto r = utf8_detail::scan(s);
    if (r.kind != utf8_detail::Scan::kComplete) return false;
    s.remove_prefix(r.length);
  }
  return true;
}

/// `bytes` with every ill-formed part (a truncated sequence at the end too)
/// replaced by U+FFFD, as Hugging Face's decode does.
inline std::string to_valid_utf8(std::string_view bytes) {
  std::string out;
  out.reserve(bytes.size());
  while (!bytes.empty()) {
    const auto r = utf8_detail::scan(bytes);
    if (r.kind == utf8_detail::Scan::kComplete) {
      out.append(bytes.substr(0, r.length));
    } else {
      out.append(utf8_detail::kReplacement);
    }
    bytes.remove_prefix(r.length);
  }
  return out;
}

/// Bytes in, whole UTF-8 characters out. push() returns the characters that
/// the bytes so far complete (possibly none) and keeps a trailing partial
/// character, at most 3 bytes, for the next push. finish() ends the stream:
/// a partial character still held becomes U+FFFD. The concatenation of every
/// push() and the finish() equals to_valid_utf8 of all the bytes, and each
/// returned piece is itself valid UTF-8.
class Utf8Stream {
 public:
  std::string push(std::string_view bytes) {
    pending_.append(bytes);
    std::string out;
    std::string_view rest = pending_;
    while (!rest.empty()) {
      const auto r = utf8_detail::scan(rest);
      if (r.kind == utf8_detail::Scan::kIncomplete) break;
      if (r.kind == utf8_detail::Scan::kComplete) {
        out.append(rest.substr(0, r.length));
      } else {
        out.append(utf8_detail::kReplacement);
      }
      rest.remove_prefix(r.length);
    }
    pending_.erase(0, pending_.size() - rest.size());
    return out;
  }

  std::string finish() {
    std::string out = pending_.empty() ? std::string() : std::string(utf8_detail::kReplacement);
    pending_.clear();
    return out;
  }

  /// Bytes held back: the start of a character not complete yet (0 to 3).
  size_t pending_bytes() const { return pending_.size(); }

 private:
  std::string pending_;
};

}  // namespace statickv::tokenizer
