// The fused CPU pick of the sampling head (sampling_fused.hpp). Each taking
// row: the penalized logits x (bias, min_tokens mask, repetition, presence
// and frequency, in the composition's order); the greedy argmax; for a
// sampled row, scaled = x / temperature, the floor of its filters (top-k's
// kth value by selection, top-p's boundary by a quickselect on mass,
// min-p's max + log(min_p)) and the argmax of scaled + Gumbel noise over
// the tokens at or above the floor, the noise from the same integer hash as
// sampling_noise(); then its log-probabilities, draw index, marks and
// result row. Rows run in parallel.

#include "sampling_fused.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace statickv::reference::detail {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

float gumbel(uint32_t h) {
  const float u = (static_cast<float>(h >> 8) + 0.5f) * (1.0f / 16777216.0f);
  return -std::log(-std::log(u));
}

/// A candidate token's scaled logit and unnormalized probability.
struct Candidate {
  float value, weight;
};

/// top-p's floor: the smallest value kept when, in ascending order, a token
/// goes while the mass up to and including it is <= `drop_mass`; the
/// largest always stays. A quickselect on mass over `work`: expected O(n).
float top_p_floor(std::vector<Candidate>& work, double drop_mass) {
  auto begin = work.begin(), end = work.end();
  double budget = drop_mass;  // what the values left of `begin` have not used
  while (end - begin > 1) {
    const float pivot = (begin + (end - begin) / 2)->value;
    auto mid = std::partition(begin, end, [&](const Candidate& c) { return c.value < pivot; });
    double low = 0;
    for (auto it = begin; it != mid; ++it) low += it->weight;
    if (mid != begin && low > budget) {
      end = mid;  // the boundary lies among the values below the pivot
      continue;
    }
    budget -= low;  // every value below the pivot goes; now the pivot's ties
    begin = mid;
    auto ties = std::partition(begin, end, [&](const Candidate& c) { return c.value == pivot; });
    for (auto it = begin; it != ties; ++it) {
      if ((ties == end && it + 1 == ties) || it->weight > budget) return pivot;
      budget -= it->weight;
    }
    begin = ties;
  }
  return begin == end ? kMinusInf : begin->value;
}

float row_floor(const std::vector<float>& s, float top, float one_minus_top_p, float log_min_p,
                int64_t kth_position, std::vector<Candidate>& work) {
  float floor = top + log_min_p;  // -inf when min_p is off
  float kth = kMinusInf;
  if (kth_position > 0) {
    std::vector<float> values = s;
    std::nth_element(values.begin(), values.begin() + kth_position, values.end());
    kth = values[static_cast<size_t>(kth_position)];
    floor = std::max(floor, kth);
  }
  if (one_minus_top_p > 0.0f) {
    work.clear();
    double total = 0;
    for (float v : s) {
      if (v < kth || v == kMinusInf) continue;
      const float w = std::exp(v - top);
      work.push_back({v, w});
      total += w;
    }
    floor = std::max(floor, top_p_floor(work, static_cast<double>(one_minus_top_p) * total));
  }
  return floor;
}

}  // namespace

namespace {

/// Row r's penalized logits into s, as SamplingHead::penalized computes them.
void penalize_row(const FusedPick& p, int64_t r, std::vector<float>& s) {
  const int64_t vocab = p.logits.size(1);
  const float* x = p.logits.data_ptr<float>() + r * vocab;
  std::copy(x, x + vocab, s.begin());
  const int64_t nb = p.bias_ids.size(1), ns = p.stop_ids.size(1);
  const int64_t* bias_ids = p.bias_ids.data_ptr<int64_t>() + r * nb;
  const float* bias_vals = p.bias_vals.data_ptr<float>() + r * nb;
  for (int64_t j = 0; j < nb; ++j) s[static_cast<size_t>(bias_ids[j])] += bias_vals[j];
  const int64_t* key = p.keys.data_ptr<int64_t>() + r * kKeys;
  if (key[kDrawIndex] < key[kMinTokens]) {
    const int64_t* stops = p.stop_ids.data_ptr<int64_t>() + r * ns;
    for (int64_t j = 0; j < ns; ++j) s[static_cast<size_t>(stops[j])] = kMinusInf;
  }
  const float* param = p.params.data_ptr<float>() + r * kParams;
  const float rep = param[kRepetition];
  const bool* seen = p.seen.data_ptr<bool>() + r * vocab;
  const float* penalty = p.penalty.data_ptr<float>() + r * vocab;
  for (int64_t i = 0; i < vocab; ++i) {
    float v = s[static_cast<size_t>(i)];
    if (rep != 1.0f && seen[i]) v = v < 0 ? v * rep : v / rep;
    s[static_cast<size_t>(i)] = v - penalty[i];
  }
}

/// The sampled draw over penalized logits s (scaled in place).
int64_t draw_row(const FusedPick& p, int64_t r, std::vector<float>& s, float top,
                 std::vector<Candidate>& work) {
  const float* param = p.params.data_ptr<float>() + r * kParams;
  const int64_t* key = p.keys.data_ptr<int64_t>() + r * kKeys;
  const int64_t* hp = p.hashed_ids.data_ptr<int64_t>();
  const float t = param[kTemperature];
  for (float& v : s) v /= t;
  const float floor =
      row_floor(s, top / t, param[kOneMinusTopP], param[kLogMinP], key[kKthPosition], work);
  const auto draw =
      static_cast<uint32_t>((key[kSeedKey] + key[kDrawIndex] * 0x9e3779b1LL) & 0xffffffffLL);
  float best = kMinusInf;
  int64_t pick = 0;
  for (size_t i = 0; i < s.size(); ++i) {
    const float v = s[i];
    if (v < floor || v == kMinusInf) continue;
    const float score = v + gumbel(mix32(static_cast<uint32_t>(hp[i]) ^ draw));
    if (score > best) best = score, pick = static_cast<int64_t>(i);
  }
  return pick;
}

/// Row r's result: the token, 0 accepted, and where asked the chosen
/// token's and the alternatives' log-probabilities (log_softmax of the raw logits).
void write_row(const FusedPick& p, int64_t r, int64_t pick) {
  const int64_t vocab = p.logits.size(1), width = p.out.size(1);
  float* out = p.out.data_ptr<float>() + r * width;
  out[0] = static_cast<float>(pick);
  out[1] = 0.0f;
  if (!p.logprobs) return;
  const float* x = p.logits.data_ptr<float>() + r * vocab;
  const float top = *std::max_element(x, x + vocab);
  double sum = 0;
  for (int64_t i = 0; i < vocab; ++i) sum += std::exp(static_cast<double>(x[i] - top));
  const auto logsum = static_cast<float>(std::log(sum));
  out[2] = (x[pick] - top) - logsum;
  const int64_t n = p.top_ids.size(1);
  const int64_t* ids = p.top_ids.data_ptr<int64_t>() + r * n;
  const float* values = p.top_logits.data_ptr<float>() + r * n;
  for (int64_t j = 0; j < n; ++j) {
    out[3 + 2 * j] = static_cast<float>(ids[j]);
    out[4 + 2 * j] = (values[j] - top) - logsum;
  }
}

/// The draw index and token marks: SamplingHead::mark for one taking row.
void advance_row(const FusedPick& p, int64_t r, int64_t pick) {
  const int64_t vocab = p.logits.size(1);
  p.keys.data_ptr<int64_t>()[r * kKeys + kDrawIndex] += 1;
  const float* param = p.params.data_ptr<float>() + r * kParams;
  bool& generated = p.generated.data_ptr<bool>()[r * vocab + pick];
  p.penalty.data_ptr<float>()[r * vocab + pick] +=
      param[kFrequency] + (generated ? 0.0f : 1.0f) * param[kPresence];
  generated = true;
  p.seen.data_ptr<bool>()[r * vocab + pick] = true;
}

}  // namespace

void fused_pick_cpu(const FusedPick& p) {
  const int64_t b = p.logits.size(0), vocab = p.logits.size(1);
  const int64_t* take = p.take.data_ptr<int64_t>();
  const int64_t* keys = p.keys.data_ptr<int64_t>();
  at::parallel_for(0, b, 1, [&](int64_t first, int64_t last) {
    std::vector<float> s(static_cast<size_t>(vocab));
    std::vector<Candidate> work;
    for (int64_t r = first; r < last; ++r) {
      if (take[r] == 0) continue;
      penalize_row(p, r, s);
      const auto top_at = std::max_element(s.begin(), s.end());
      const float top = *top_at;
      int64_t pick = top_at - s.begin();
      if (keys[r * kKeys + kSampled] != 0) pick = draw_row(p, r, s, top, work);
      write_row(p, r, pick);
      advance_row(p, r, pick);
    }
  });
}

}  // namespace statickv::reference::detail
