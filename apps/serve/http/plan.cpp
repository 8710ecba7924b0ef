// statickv-serve --http: a request's choices and limits (plan.hpp).

#include "plan.hpp"

#include <algorithm>
#include <stdexcept>

namespace statickv::serve {

int64_t Plan::prompt_tokens() const {
  int64_t n_tokens = 0;
  for (const PlannedPrompt& p : prompts) n_tokens += static_cast<int64_t>(p.ids.size());
  return n_tokens;
}

namespace {

const char* prompt_field(const ApiRequest& api) {
  return api.endpoint == Endpoint::kChat ? "messages" : "prompt";
}

std::vector<int64_t> encoded(const ApiRequest& api, TextTools* text, const std::string& input,
                             const std::string& field) {
  if (!text) {
    throw ApiError(400,
                   field +
                       ": expected token ids: this server has no tokenizer (start it "
                       "with a checkpoint that has tokenizer.json, or --tokenizer)",
                   field);
  }
  try {
    return api.endpoint == Endpoint::kChat ? text->apply_chat(input) : text->encode_prompt(input);
  } catch (const std::exception& e) {
    throw ApiError(400, std::string(field == "messages" ? "" : field + ": ") + e.what(), field);
  }
}

/// The text echo returns for a prompt of ids: the tokenizer's decoding,
/// "" without a tokenizer or for an id it does not know (the engine then
/// refuses an id past the model's vocabulary, naming it).
std::string echo_text(TextTools* text, const std::vector<int64_t>& ids) {
  if (!text) return "";
  try {
    return text->decode(ids);
  } catch (const std::out_of_range&) {
    return "";
  }
}

std::vector<PlannedPrompt> planned_prompts(const ApiRequest& api, TextTools* text) {
  if (api.endpoint == Endpoint::kChat) {
    return {{encoded(api, text, api.messages_json, "messages"), ""}};
  }
  std::vector<PlannedPrompt> out;
  for (size_t i = 0; i < api.prompts.size(); ++i) {
    const PromptIn& in = api.prompts[i];
    const std::string field =
        api.prompts.size() == 1 ? "prompt" : "prompt[" + std::to_string(i) + "]";
    if (in.text) {
      out.push_back({encoded(api, text, *in.text, field), *in.text});
    } else {
      out.push_back({in.ids, api.echo ? echo_text(text, in.ids) : std::string()});
    }
  }
  return out;
}

/// The prompt lengths against --max-len and max_tokens against the room
/// left; returns the tokens each choice generates.
int64_t checked_new_tokens(const ApiRequest& api, const std::vector<PlannedPrompt>& prompts,
                           const PlanContext& c) {
  int64_t longest = 0;
  for (const PlannedPrompt& p : prompts) longest = std::max<int64_t>(longest, p.ids.size());
  const int64_t room = c.max_len - longest;  // an empty prompt: the engine refuses it
  if (room < 1) {
    throw ApiError(400,
                   std::string(prompt_field(api)) + ": expected at most " +
                       std::to_string(c.max_len - 1) + " tokens (--max-len " +
                       std::to_string(c.max_len) + ") but got " + std::to_string(longest),
                   prompt_field(api));
  }
  const std::string& max_field = api.max_tokens_field;
  if (api.max_tokens && *api.max_tokens > room) {
    throw ApiError(400,
                   max_field + ": expected prompt tokens (" + std::to_string(longest) + ") + " +
                       max_field + " <= " + std::to_string(c.max_len) + " (--max-len) but got " +
                       std::to_string(*api.max_tokens),
                   max_field);
  }
  const int64_t fallback = api.endpoint == Endpoint::kChat ? room : 16;
  // max_tokens 0 (echo, scoring the prompt): one token is generated and dropped.
  if (api.max_tokens) return std::max<int64_t>(*api.max_tokens, 1);
  return std::min(room, c.options.defaults.max_new_tokens.value_or(fallback));
}

/// The head's settings of choice `c`: the request's fields, else the
/// checkpoint's defaults (the filters only when sampling).
reference::Sampling choice_sampling(const ApiRequest& api, const HttpOptions& o, uint64_t seed) {
  reference::Sampling s = api.head;  // min_p, penalties, logit_bias, min_tokens
  s.temperature = api.temperature.value_or(o.defaults.temperature);
  if (s.temperature > 0) {  // temperature 0 is greedy: the filters do not apply
    s.top_p = api.top_p.value_or(o.defaults.top_p);
    s.top_k = api.top_k.value_or(o.defaults.top_k);
  }
  s.seed = seed;
  s.logprobs = api.logprobs.value_or(-1);
  return s;
}

}  // namespace

Plan plan_request(const ApiRequest& api, const PlanContext& c, uint64_t seed,
                  const std::string& id_prefix, reference::ServeClock::time_point arrival) {
  Plan plan;
  plan.n = api.n;
  plan.echo = api.echo;
  plan.logprobs = api.logprobs;
  plan.score_only = api.echo && api.max_tokens == 0;
  const auto choices = api.n * static_cast<int64_t>(std::max<size_t>(api.prompts.size(), 1));
  if (choices > c.options.max_n) {
    throw ApiError(400,
                   "n: expected n times the prompts (" + std::to_string(choices) + ") <= --max-n " +
                       std::to_string(c.options.max_n) + " but got n=" + std::to_string(api.n),
                   "n");
  }
  plan.prompts = planned_prompts(api, c.text);
  const int64_t new_tokens = checked_new_tokens(api, plan.prompts, c);
  if (!api.stop.empty() && !c.text) {
    throw ApiError(400, "stop: expected no stop strings: this server has no tokenizer", "stop");
  }
  for (int64_t i = 0; i < choices; ++i) {
    reference::Request r;
    r.id = id_prefix + "-" + std::to_string(i);
    r.prompt = plan.prompt_of(i).ids;
    r.max_new_tokens = new_tokens;
    r.sampling = choice_sampling(api, c.options, seed + static_cast<uint64_t>(i));
    if (api.echo && api.logprobs) r.prompt_logprobs = *api.logprobs;
    if (api.ignore_eos) r.stop = std::vector<int64_t>{};
    r.arrival = arrival;
    plan.submission.choices.push_back(std::move(r));
  }
  plan.submission.stop = api.stop;
  plan.submission.stream = std::make_shared<Stream>();
  return plan;
}

}  // namespace statickv::serve
