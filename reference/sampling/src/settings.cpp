// check_sampling: a request's sampling settings, refused by name before any
// row takes them (docs/sampling.md). Each refusal is a FieldError naming
// the field as data.

#include <statickv/sampling/sampling.hpp>
#include <statickv/support/field_error.hpp>

#include <cmath>
#include <set>

namespace statickv::reference {

namespace {

void check_filters(const Sampling& s) {
  const double t = s.temperature;
  STATICKV_CHECK_FIELD(std::isfinite(t) && t >= 0.0, "temperature",
                       "expected a finite number >= 0 (0 = greedy) but got ", t);
  STATICKV_CHECK_FIELD(s.top_k >= 0, "top_k", "expected >= 0 (0 = no filter) but got ", s.top_k);
  STATICKV_CHECK_FIELD(s.top_k == 0 || t > 0.0, "top_k",
                       "expected 0 without sampling (temperature 0 is greedy) but got ", s.top_k);
  STATICKV_CHECK_FIELD(std::isfinite(s.top_p) && s.top_p > 0.0 && s.top_p <= 1.0, "top_p",
                       "expected a number in (0, 1] (1 = no filter) but got ", s.top_p);
  STATICKV_CHECK_FIELD(s.top_p == 1.0 || t > 0.0, "top_p",
                       "expected 1 without sampling (temperature 0 is greedy) but got ", s.top_p);
  STATICKV_CHECK_FIELD(std::isfinite(s.min_p) && s.min_p >= 0.0 && s.min_p <= 1.0, "min_p",
                       "expected a number in [0, 1] (0 = no filter) but got ", s.min_p);
  STATICKV_CHECK_FIELD(s.min_p == 0.0 || t > 0.0, "min_p",
                       "expected 0 without sampling (temperature 0 is greedy) but got ", s.min_p);
}

void check_penalties(const Sampling& s, int64_t vocab_size, int64_t max_bias) {
  STATICKV_CHECK_FIELD(std::isfinite(s.repetition_penalty) && s.repetition_penalty > 0.0,
                       "repetition_penalty", "expected a finite number > 0 (1 = off) but got ",
                       s.repetition_penalty);
  STATICKV_CHECK_FIELD(std::isfinite(s.presence_penalty), "presence_penalty",
                       "expected a finite number but got ", s.presence_penalty);
  STATICKV_CHECK_FIELD(std::isfinite(s.frequency_penalty), "frequency_penalty",
                       "expected a finite number but got ", s.frequency_penalty);
  STATICKV_CHECK_FIELD(static_cast<int64_t>(s.logit_bias.size()) <= max_bias, "logit_bias",
                       "expected at most ", max_bias, " token ids but got ", s.logit_bias.size());
  std::set<int64_t> ids;
  for (const auto& [id, bias] : s.logit_bias) {
    STATICKV_CHECK_FIELD(id >= 0 && id < vocab_size, "logit_bias",
                         "expected token ids in [0, vocab_size=", vocab_size, ") but got ", id);
    STATICKV_CHECK_FIELD_AT(std::isfinite(bias), "logit_bias", id,
                            "expected a finite number but got ", bias);
    STATICKV_CHECK_FIELD(ids.insert(id).second, "logit_bias",
                         "expected distinct token ids but got ", id, " twice");
  }
}

}  // namespace

void check_sampling(const Sampling& s, int64_t vocab_size, int64_t max_bias, int64_t max_logprobs) {
  check_filters(s);
  check_penalties(s, vocab_size, max_bias);
  STATICKV_CHECK_FIELD(s.min_tokens >= 0, "min_tokens", "expected >= 0 but got ", s.min_tokens);
  STATICKV_CHECK_FIELD(s.logprobs >= -1 && s.logprobs <= max_logprobs, "logprobs",
                       "expected -1 (none) or 0..", max_logprobs, " alternatives but got ",
                       s.logprobs);
}

}  // namespace statickv::reference
