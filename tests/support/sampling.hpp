#pragma once
// Sampling settings the sampling head's tests share (tests/sampling,
// tests/reference, tests/cuda), and the check that a refusal carries its
// field as data (FieldError).

#include "../support.hpp"

#include <statickv/sampling/sampling.hpp>
#include <statickv/support/field_error.hpp>

#include <string>
#include <vector>

namespace statickv::test {

/// Seven rows' settings that together use every stage of the sampling
/// head: greedy and sampled, top-k, top-p and min-p alone and together,
/// repetition, presence and frequency penalties, logit bias, min_tokens
/// (stop ids 7 and 8) and log-probabilities, each row with its own seed.
inline std::vector<reference::Sampling> every_sampling_setting() {
  std::vector<reference::Sampling> rows(7);
  rows[0].temperature = 0.8, rows[0].top_p = 0.95, rows[0].presence_penalty = 0.5;
  rows[1].repetition_penalty = 1.4, rows[1].logprobs = 4;  // greedy
  rows[2].temperature = 1.2, rows[2].top_k = 50, rows[2].logit_bias = {{5, 3.0}, {0, -1.0}};
  rows[3].temperature = 0.7, rows[3].min_p = 0.05, rows[3].min_tokens = 3;
  rows[3].frequency_penalty = 0.4;
  rows[4].logit_bias = {{9, 2.0}}, rows[4].logprobs = 0;  // greedy
  rows[5].temperature = 1.5, rows[5].top_k = 200, rows[5].top_p = 0.6, rows[5].min_p = 0.01;
  rows[5].logprobs = 2, rows[5].repetition_penalty = 0.8;
  rows[6].temperature = 1.0;
  for (size_t r = 0; r < rows.size(); ++r) rows[r].seed = r * 77 + 1;
  return rows;
}

/// `fn` throws FieldError whose field() is `field` and whose text has
/// every fragment (require_error's rule): the refusal names the field both
/// in words and as data.
template <typename Fn>
void require_field_error(Fn&& fn, const std::string& field,
                         const std::vector<std::string>& fragments) {
  require_error(
      [&] {
        try {
          fn();
        } catch (const c10::Error& e) {
          CHECK(reference::refused_field(e) == field);  // empty unless a FieldError
          throw;
        }
      },
      fragments);
}

}  // namespace statickv::test
