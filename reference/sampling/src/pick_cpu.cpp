// The fused CPU pick of the sampling head (pick_fused.hpp). Each taking
// row: the penalized logits x (bias, min_tokens mask, repetition, presence
// and frequency, in the composition's order); the greedy argmax; for a
// sampled row, scaled = x / temperature and the argmax of scaled + Gumbel
// noise over the tokens at or above the floor of its filters (top-k's kth
// value, top-p's boundary, min-p's max + log(min_p)), the noise from the
// same integer hash as sampling_noise(); then its log-probabilities, draw
// index, marks and result row.
//
// The draw is the same argmax computed cheaply (Note [sampling head]):
// - exp(scaled + g) = w / E with w = exp(scaled - max) and E = -log(u), so
//   the exponential race argmax(w / E) orders the tokens as scaled + g
//   does, with one log instead of two; and as E >= 1 - u, a token with
//   w < best * (1 - u) cannot win, so only a few dozen tokens of a row take
//   the log at all.
// - The race runs first over the top-k and min-p survivors. Its winner is
//   the draw whenever top-p keeps it (the winner of a set wins every subset
//   holding it), which one sum of the mass above it decides; only otherwise
//   is top-p's boundary found (a quickselect on mass) and the race rerun
//   above it. Top-p drops at most 1 - top_p of the mass, so that is rare.
// - The row passes run four lanes at a time (GCC/Clang vector types): the
//   penalties, the max, the scaling, the weights (a degree-5 polynomial
//   exp, within 1e-7 of exp's value), the hashes and the race's bound;
//   only the lanes the bound cannot rule out go on to the scalar log.
// Taking rows are dealt to the threads round-robin, sampled rows first.

#include "pick_fused.hpp"

#include <ATen/Parallel.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

namespace statickv::reference::detail {

namespace {

constexpr float kMinusInf = -std::numeric_limits<float>::infinity();

// Four lanes: one SSE register; the same code on any GCC or Clang target.
constexpr int64_t kLanes = 4;
using Floats = float __attribute__((vector_size(16)));
using Ints = int32_t __attribute__((vector_size(16)));
using Words = uint32_t __attribute__((vector_size(16)));
using Flags = uint8_t __attribute__((vector_size(4)));

Floats load(const float* p) {
  Floats v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
void store(float* p, Floats v) { std::memcpy(p, &v, sizeof v); }
Floats splat(float x) { return Floats{} + x; }
bool any(Ints mask) { return (mask[0] | mask[1] | mask[2] | mask[3]) != 0; }

/// exp(x) for x <= 0, lanewise: 2^n times Cephes' degree-5 polynomial of the
/// remainder; 0 below -88 (exp(-88) < 1e-38) and for -inf.
Floats exp_nonpositive(Floats x) {
  x = x < -88.0f ? splat(-88.0f) : x;
  const Ints n = __builtin_convertvector(x * 1.44269504f - 0.5f, Ints);  // round(x / ln 2)
  const Floats fn = __builtin_convertvector(n, Floats);
  const Floats r = (x - fn * 0.693359375f) + fn * 2.12194440e-4f;  // x - n ln 2
  Floats q = splat(1.9875691500e-4f);
  q = q * r + 1.3981999507e-3f;
  q = q * r + 8.3334519073e-3f;
  q = q * r + 4.1665795894e-2f;
  q = q * r + 1.6666665459e-1f;
  q = q * r + 5.0000001201e-1f;
  const Ints bits = (n + 127) << 23;  // 2^n, 0 at n = -127
  Floats scale;
  std::memcpy(&scale, &bits, sizeof scale);
  return (q * (r * r) + r + 1.0f) * scale;
}

/// The hashes of ids first..first + 3 under a draw key (docs/sampling.md).
Words hashes(int64_t first, uint32_t draw) {
  const Words ids = Words{0, 1, 2, 3} + static_cast<uint32_t>(first);
  return mix32((ids * 0x9e3779b1U) ^ draw);
}

/// The draws' uniform numbers in (0, 1) (docs/sampling.md): the top 23
/// bits of each hash, centred, exact in float.
Floats unit(Words h) {
  return (__builtin_convertvector(__builtin_convertvector(h >> 9, Ints), Floats) + 0.5f) *
         (1.0f / 8388608.0f);
}

/// Sums of four lanes, folded into a double every 64 blocks.
struct Sum {
  double total = 0;
  Floats lanes{};
  int64_t blocks = 0;

  void add(Floats v) {
    lanes += v;
    if (++blocks % 64 == 0) fold();
  }
  double value() {
    fold();
    return total;
  }
  void fold() {
    total += static_cast<double>(lanes[0]) + lanes[1] + lanes[2] + lanes[3];
    lanes = Floats{};
  }
};

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

/// A thread's buffers, reused across its rows. `s` and `weight` hold a
/// row padded to whole blocks: -inf and 0 past the vocabulary.
struct Scratch {
  std::vector<float> s, weight, kth;
  std::vector<Candidate> work;
  int64_t vocab = 0;

  void fit(int64_t n) {
    if (n == vocab) return;  // the padding stays -inf and 0: no pass writes it otherwise
    vocab = n;
    const auto padded = static_cast<size_t>((n + kLanes - 1) / kLanes * kLanes);
    s.assign(padded, kMinusInf);
    weight.assign(padded, 0.0f);
  }
};

/// The exponential race: argmax(weight / -log(u)) in vocabulary order, the
/// first of equal keys winning, as argmax(scaled + g) picks.
struct Race {
  float best = -1.0f;
  int64_t pick = -1;

  void offer(int64_t i, float weight, float u) {
    // -log(u) >= 1 - u, so weight / (1 - u) bounds the key; the margin
    // covers log's rounding.
    if (static_cast<double>(weight) <
        static_cast<double>(best) * (1.0 - static_cast<double>(u)) * (1.0 - 1e-6)) {
      return;
    }
    const float key = weight / -std::log(u);
    if (key > best) best = key, pick = i;
  }

  /// Offers the block at `first` (scaled values v, weights w) where it is
  /// at or above `floor`; the bound, looser than offer's, skips most blocks.
  void offer_block(int64_t first, Floats v, Floats w, float floor, uint32_t draw) {
    const Floats u = unit(hashes(first, draw));
    const Ints open = (v >= floor) & (v != kMinusInf) & (w >= best * (1.0f - u) * 0.9999f);
    if (!any(open)) return;
    for (int j = 0; j < kLanes; ++j) {
      if (open[j] != 0) offer(first + j, w[j], u[j]);
    }
  }
};

/// The kth position's value of the row (ascending), -inf when top-k is off.
float kth_value(Scratch& w, int64_t position) {
  if (position <= 0) return kMinusInf;
  w.kth.assign(w.s.begin(), w.s.begin() + w.vocab);
  std::nth_element(w.kth.begin(), w.kth.begin() + position, w.kth.end());
  return w.kth[static_cast<size_t>(position)];
}

/// The largest of s's values.
float max_value(const std::vector<float>& s) {
  Floats top = splat(kMinusInf);
  for (size_t i = 0; i < s.size(); i += kLanes) {
    const Floats v = load(&s[i]);
    top = v > top ? v : top;
  }
  return std::max(std::max(top[0], top[1]), std::max(top[2], top[3]));
}

/// The repetition penalty on seen tokens (transformers' rule), then the
/// presence and frequency penalties: s[i] = f(s[i]) - penalty[i].
float penalized(float v, bool seen, float rep, float penalty) {
  if (rep != 1.0f && seen) v = v < 0 ? v * rep : v / rep;
  return v - penalty;
}
void apply_penalties(float* s, const bool* seen, const float* penalty, float rep, int64_t n) {
  int64_t i = 0;
  for (; i + kLanes <= n; i += kLanes) {
    Floats v = load(s + i);
    if (rep != 1.0f) {
      Flags marks;
      std::memcpy(&marks, seen + i, sizeof marks);
      const Ints on = __builtin_convertvector(marks, Ints) != 0;
      v = on ? (v < 0.0f ? v * rep : v / rep) : v;
    }
    store(s + i, v - load(penalty + i));
  }
  for (; i < n; ++i) s[i] = penalized(s[i], seen[i], rep, penalty[i]);
}

/// Row r's penalized logits into w.s, as SamplingHead::penalized computes them.
void penalize_row(const FusedPick& p, int64_t r, Scratch& w) {
  const int64_t vocab = w.vocab;
  std::vector<float>& s = w.s;
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
  apply_penalties(s.data(), p.seen.data_ptr<bool>() + r * vocab,
                  p.penalty.data_ptr<float>() + r * vocab,
                  p.params.data_ptr<float>()[r * kParams + kRepetition], vocab);
}

/// The race over the row's tokens at or above `floor`, weights as stored.
int64_t race_above(const Scratch& w, float floor, uint32_t draw) {
  Race race;
  for (size_t i = 0; i < w.s.size(); i += kLanes) {
    race.offer_block(static_cast<int64_t>(i), load(&w.s[i]), load(&w.weight[i]), floor, draw);
  }
  return std::max<int64_t>(race.pick, 0);
}

/// Scales the row by 1 / t, stores its weights exp(scaled - top) (0 below
/// `kth`) and races the tokens at or above `floor`, in one pass; returns
/// the winner and the weights' total (top-p's whole mass).
int64_t scale_and_race(Scratch& w, float t, float top, float kth, float floor, uint32_t draw,
                       double& total) {
  Race race;
  Sum sum;
  for (size_t i = 0; i < w.s.size(); i += kLanes) {
    const Floats v = load(&w.s[i]) / t;
    const Floats weight = v < kth ? Floats{} : exp_nonpositive(v - top);
    store(&w.s[i], v);
    store(&w.weight[i], weight);
    sum.add(weight);
    race.offer_block(static_cast<int64_t>(i), v, weight, floor, draw);
  }
  total = sum.value();
  return std::max<int64_t>(race.pick, 0);
}

/// Whether top-p keeps `value`: it is the largest, or the mass at or below
/// it exceeds `drop_mass` (top_p_floor's rule, decided by one sum).
bool top_p_keeps(const Scratch& w, float value, float top, double total, double drop_mass) {
  if (value == top) return true;
  Sum above;
  for (size_t i = 0; i < w.s.size(); i += kLanes) {
    above.add(load(&w.s[i]) > value ? load(&w.weight[i]) : Floats{});
  }
  return total - above.value() > drop_mass;
}

/// The sampled draw over the penalized logits in w.s (scaled in place),
/// whose largest value is `top`.
int64_t draw_row(const FusedPick& p, int64_t r, float top, Scratch& w) {
  const float* param = p.params.data_ptr<float>() + r * kParams;
  const int64_t* key = p.keys.data_ptr<int64_t>() + r * kKeys;
  const float t = param[kTemperature];
  if (top == kMinusInf) return 0;  // every token masked
  // Dividing by t > 0 keeps the order: top-k's kth value, scaled, is the
  // kth scaled value.
  const float kth = kth_value(w, key[kKthPosition]) / t;
  top /= t;
  const float floor = std::max(top + param[kLogMinP], kth);
  const auto draw =
      static_cast<uint32_t>((key[kSeedKey] + key[kDrawIndex] * 0x9e3779b1LL) & 0xffffffffLL);
  double total = 0;
  const int64_t pick = scale_and_race(w, t, top, kth, floor, draw, total);
  const double drop_mass = static_cast<double>(param[kOneMinusTopP]) * total;
  if (param[kOneMinusTopP] <= 0.0f ||
      top_p_keeps(w, w.s[static_cast<size_t>(pick)], top, total, drop_mass)) {
    return pick;
  }
  w.work.clear();
  for (int64_t i = 0; i < w.vocab; ++i) {
    const float v = w.s[static_cast<size_t>(i)];
    if (v >= kth && v != kMinusInf) w.work.push_back({v, w.weight[static_cast<size_t>(i)]});
  }
  return race_above(w, std::max(floor, top_p_floor(w.work, drop_mass)), draw);
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

/// One taking row's pick, start to finish.
void pick_row(const FusedPick& p, int64_t r, Scratch& w) {
  penalize_row(p, r, w);
  const float top = max_value(w.s);
  const auto top_at = std::find(w.s.begin(), w.s.end(), top);
  int64_t pick = top_at == w.s.end() ? 0 : top_at - w.s.begin();
  if (p.keys.data_ptr<int64_t>()[r * kKeys + kSampled] != 0) pick = draw_row(p, r, top, w);
  write_row(p, r, pick);
  advance_row(p, r, pick);
}

}  // namespace

void fused_pick_cpu(const FusedPick& p) {
  const int64_t b = p.logits.size(0), vocab = p.logits.size(1);
  const int64_t* take = p.take.data_ptr<int64_t>();
  const int64_t* keys = p.keys.data_ptr<int64_t>();
  std::vector<int64_t> rows;  // the taking rows, sampled (the costly ones) first
  for (const bool sampled : {true, false}) {
    for (int64_t r = 0; r < b; ++r) {
      if (take[r] != 0 && (keys[r * kKeys + kSampled] != 0) == sampled) rows.push_back(r);
    }
  }
  const auto n = static_cast<int64_t>(rows.size());
  const int64_t threads = std::min<int64_t>(at::get_num_threads(), n);
  if (threads == 0) return;
  at::parallel_for(0, threads, 1, [&](int64_t first, int64_t last) {
    thread_local Scratch w;
    w.fit(vocab);
    for (int64_t t = first; t < last; ++t) {
      for (int64_t j = t; j < n; j += threads) pick_row(p, rows[static_cast<size_t>(j)], w);
    }
  });
}

}  // namespace statickv::reference::detail
