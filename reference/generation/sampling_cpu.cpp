// The fused CPU draw of the sampling head (sampling_cpu.hpp). Each sampled
// row: scaled = x / temperature; the floor of its filters (top-k's kth
// value by selection, top-p's boundary by a quickselect on mass, min-p's
// max + log(min_p)); then the argmax of scaled + Gumbel noise over the
// tokens at or above the floor, the noise from the same integer hash as
// sampling_noise(). Rows run in parallel.

#include "sampling_cpu.hpp"

#include <ATen/Parallel.h>
#include <ATen/record_function.h>

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

void draw_sampled_cpu(const at::Tensor& x, const at::Tensor& params, const at::Tensor& keys,
                      const at::Tensor& hashed_ids, const DrawColumns& c, at::Tensor& chosen) {
  RECORD_FUNCTION("statickv::sample_draw", std::vector<c10::IValue>({x, params, keys}));
  const int64_t b = x.size(0), vocab = x.size(1);
  const at::Tensor xs = x.contiguous(), p = params.contiguous(), k = keys.contiguous();
  const float* xp = xs.data_ptr<float>();
  const float* pp = p.data_ptr<float>();
  const int64_t* kp = k.data_ptr<int64_t>();
  const int64_t* hp = hashed_ids.data_ptr<int64_t>();
  int64_t* out = chosen.data_ptr<int64_t>();
  const int64_t np = p.size(1), nk = k.size(1);
  at::parallel_for(0, b, 1, [&](int64_t first, int64_t last) {
    std::vector<float> s(static_cast<size_t>(vocab));
    std::vector<Candidate> work;
    for (int64_t r = first; r < last; ++r) {
      const int64_t* key = kp + r * nk;
      if (key[c.sampled] == 0) continue;
      const float* param = pp + r * np;
      const float t = param[c.temperature];
      float top = kMinusInf;
      for (int64_t i = 0; i < vocab; ++i) {
        s[static_cast<size_t>(i)] = xp[r * vocab + i] / t;
        top = std::max(top, s[static_cast<size_t>(i)]);
      }
      const float floor = row_floor(s, top, param[c.one_minus_top_p], param[c.log_min_p],
                                    key[c.kth_position], work);
      const auto draw = static_cast<uint32_t>((key[c.seed_key] + key[c.draw_index] * 0x9e3779b1LL) &
                                              0xffffffffLL);
      float best = kMinusInf;
      int64_t pick = 0;
      for (int64_t i = 0; i < vocab; ++i) {
        const float v = s[static_cast<size_t>(i)];
        if (v < floor || v == kMinusInf) continue;
        const float score = v + gumbel(mix32(static_cast<uint32_t>(hp[i]) ^ draw));
        if (score > best) best = score, pick = i;
      }
      out[r] = pick;
    }
  });
}

}  // namespace statickv::reference::detail
