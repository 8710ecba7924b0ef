// statickv-serve --http: whole and streamed answers (answer.hpp).

#include "answer.hpp"

namespace statickv::serve {

using nlohmann::json;

namespace {

std::string sse(const json& event) { return "data: " + json_text(event) + "\n\n"; }

/// One choice as its pieces arrive.
struct Collected {
  std::string text;
  std::vector<int64_t> ids;
  std::vector<reference::TokenLogprob> logprobs;
  std::optional<Stream::End> end;
};

/// The log-probability object of a whole choice (null when not asked).
json choice_logprobs(const Plan& plan, Endpoint endpoint, int64_t index, const Collected& c,
                     const TokenText& text) {
  if (!plan.logprobs) return nullptr;
  std::vector<LogprobEntry> entries;
  if (plan.echo) entries = prompt_entries(plan.prompt_of(index).ids, c.end->prompt_logprobs);
  if (!plan.score_only) {
    for (LogprobEntry& e : generated_entries(c.logprobs)) entries.push_back(std::move(e));
  }
  return endpoint == Endpoint::kChat ? chat_logprobs(entries, text)
                                     : completion_logprobs(entries, text);
}

}  // namespace

json whole_answer(const Plan& plan, const ResponseHead& head, const TokenText& text) {
  Stream& stream = *plan.submission.stream;
  std::vector<Collected> choices(static_cast<size_t>(plan.choices()));
  for (int64_t ended = 0; ended < plan.choices();) {
    Stream::Batch batch = stream.next(std::chrono::seconds(1));
    for (Stream::Piece& p : batch.pieces) {
      Collected& c = choices[static_cast<size_t>(p.index)];
      c.text += p.text;
      c.ids.insert(c.ids.end(), p.ids.begin(), p.ids.end());
      for (auto& lp : p.logprobs) c.logprobs.push_back(std::move(lp));
    }
    for (Stream::End& e : batch.ends) {
      choices[static_cast<size_t>(e.index)].end = std::move(e);
      ++ended;
    }
  }
  std::vector<ChoiceOut> out;
  Usage usage{plan.prompt_tokens(), 0};
  for (int64_t i = 0; i < plan.choices(); ++i) {
    const Collected& c = choices[static_cast<size_t>(i)];
    if (c.end->finish == "error") throw ApiError(500, c.end->error, "", "server_error");
    ChoiceOut choice;
    choice.index = i;
    choice.prompt_ids = plan.prompt_of(i).ids;
    choice.text = (plan.echo ? plan.prompt_of(i).text : std::string()) +
                  (plan.score_only ? std::string() : c.text);
    if (!plan.score_only) choice.token_ids = c.ids;
    choice.finish = plan.score_only ? "length" : c.end->finish;
    choice.logprobs = choice_logprobs(plan, head.endpoint, i, c, text);
    usage.completion_tokens += plan.score_only ? 0 : c.end->completion_tokens;
    out.push_back(std::move(choice));
  }
  return response_body(head, out, usage);
}

StreamAnswer::StreamAnswer(const Plan& plan, ResponseHead head, TokenText text, bool include_usage,
                           bool continuous_usage)
    : plan_(plan),
      head_(std::move(head)),
      text_(std::move(text)),
      include_usage_(include_usage),
      continuous_usage_(continuous_usage),
      offsets_(static_cast<size_t>(plan.choices()), 0) {}

json StreamAnswer::with_usage(json chunk) const {
  if (continuous_usage_) chunk["usage"] = usage_json({plan_.prompt_tokens(), completion_tokens_});
  return chunk;
}

std::string StreamAnswer::opening() {
  std::string out;
  for (int64_t i = 0; i < plan_.choices(); ++i) {
    if (head_.endpoint == Endpoint::kChat) {
      out += sse(with_usage(stream_chunk(head_, i, "", {}, true, std::nullopt)));
    } else if (plan_.echo) {
      const std::string& prompt = plan_.prompt_of(i).text;
      offsets_[static_cast<size_t>(i)] = static_cast<int64_t>(prompt.size());
      out += sse(with_usage(stream_chunk(head_, i, prompt, {}, false, std::nullopt)));
    }
  }
  return out;
}

std::string StreamAnswer::piece_event(const Stream::Piece& p) {
  completion_tokens_ += static_cast<int64_t>(p.ids.size());
  json logprobs = nullptr;
  if (plan_.logprobs) {
    const std::vector<LogprobEntry> entries = generated_entries(p.logprobs);
    int64_t& offset = offsets_[static_cast<size_t>(p.index)];
    logprobs = head_.endpoint == Endpoint::kChat ? chat_logprobs(entries, text_)
                                                 : completion_logprobs(entries, text_, offset);
  }
  offsets_[static_cast<size_t>(p.index)] += static_cast<int64_t>(p.text.size());
  return sse(
      with_usage(stream_chunk(head_, p.index, p.text, p.ids, false, std::nullopt, logprobs)));
}

std::string StreamAnswer::events(const Stream::Batch& batch) {
  std::string out;
  if (!plan_.score_only) {
    for (const Stream::Piece& p : batch.pieces) out += piece_event(p);
  }
  for (const Stream::End& e : batch.ends) {
    ++ended_;
    if (e.finish == "error") {
      out += sse(json::parse(error_body(ApiError(500, e.error, "", "server_error"))));
      ended_ = plan_.choices();  // the answer ends here
      failed_ = true;
      break;
    }
    final_tokens_ += plan_.score_only ? 0 : e.completion_tokens;
    const std::string finish = plan_.score_only ? "length" : e.finish;
    out += sse(with_usage(stream_chunk(head_, e.index, "", {}, false, finish)));
  }
  if (!done()) return out;
  if (include_usage_) out += sse(usage_chunk(head_, {plan_.prompt_tokens(), final_tokens_}));
  return out + "data: [DONE]\n\n";
}

}  // namespace statickv::serve
