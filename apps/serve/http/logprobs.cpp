// OpenAI's log-probability shapes (logprobs.hpp).

#include "logprobs.hpp"

namespace statickv::serve {

using nlohmann::json;

json completion_logprobs(const std::vector<LogprobEntry>& entries, const TokenText& text,
                         int64_t offset) {
  json tokens = json::array(), values = json::array(), tops = json::array(),
       offsets = json::array();
  for (const LogprobEntry& e : entries) {
    const std::string piece = text(e.token);
    tokens.push_back(piece);
    offsets.push_back(offset);
    offset += static_cast<int64_t>(piece.size());
    if (!e.logprob) {
      values.push_back(nullptr);
      tops.push_back(nullptr);
      continue;
    }
    values.push_back(e.logprob->logprob);
    json top = json::object();
    for (const auto& [id, lp] : e.logprob->top) {
      const std::string key = text(id);
      if (!top.contains(key)) top[key] = lp;  // the likelier of two ids with one text
    }
    tops.push_back(std::move(top));
  }
  return {{"tokens", std::move(tokens)},
          {"token_logprobs", std::move(values)},
          {"top_logprobs", std::move(tops)},
          {"text_offset", std::move(offsets)}};
}

namespace {

json chat_entry(const std::string& piece, float logprob) {
  json bytes = json::array();
  for (const char c : piece) bytes.push_back(static_cast<int>(static_cast<unsigned char>(c)));
  return {{"token", piece}, {"logprob", logprob}, {"bytes", std::move(bytes)}};
}

}  // namespace

json chat_logprobs(const std::vector<LogprobEntry>& entries, const TokenText& text) {
  json content = json::array();
  for (const LogprobEntry& e : entries) {
    if (!e.logprob) continue;
    json entry = chat_entry(text(e.token), e.logprob->logprob);
    json top = json::array();
    for (const auto& [id, lp] : e.logprob->top) top.push_back(chat_entry(text(id), lp));
    entry["top_logprobs"] = std::move(top);
    content.push_back(std::move(entry));
  }
  return {{"content", std::move(content)}};
}

std::vector<LogprobEntry> generated_entries(const std::vector<reference::TokenLogprob>& picked) {
  std::vector<LogprobEntry> out;
  for (const reference::TokenLogprob& p : picked) out.push_back({p.token, p});
  return out;
}

std::vector<LogprobEntry> prompt_entries(const std::vector<int64_t>& prompt,
                                         const std::vector<reference::TokenLogprob>& scored) {
  std::vector<LogprobEntry> out;
  for (size_t t = 0; t < prompt.size(); ++t) {
    LogprobEntry e{prompt[t], std::nullopt};
    if (t > 0 && t - 1 < scored.size()) e.logprob = scored[t - 1];
    out.push_back(std::move(e));
  }
  return out;
}

}  // namespace statickv::serve
