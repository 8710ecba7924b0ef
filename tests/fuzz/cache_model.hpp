#pragma once
// The fuzz_cache target's specification of a cache: every token of every
// row, per layer (std::map per row, attention in double, no tensors).

#include <statickv/config.hpp>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <utility>
#include <vector>

namespace statickv::fuzz {

struct Kv {
  std::vector<float> k, v;  // [kv_heads * head_dim]
};

struct RowModel {
  std::vector<std::map<int64_t, Kv>> layers;  // position -> key/value, per layer
  int64_t seq_length = 0;                     // one past the highest position stored
  int64_t newest = -1;                        // highest position stored
  bool poisoned = false;
};

struct Model {
  CacheConfig config;
  std::vector<RowModel> rows;

  explicit Model(const CacheConfig& c) : config(c) {
    rows.assign(static_cast<size_t>(c.max_batch), RowModel{});
    for (auto& row : rows) row.layers.resize(static_cast<size_t>(c.num_layers));
  }
  void reset_row(int64_t r) {
    RowModel& row = rows[static_cast<size_t>(r)];
    row = RowModel{};
    row.layers.resize(static_cast<size_t>(config.num_layers));
  }

  // Stores one step's keys and values [b, kv_heads, q, head_dim] of `layer`
  // at positions pos ([1, q] when shared, else [b, q]).
  void write(int64_t layer, const std::vector<int64_t>& pos, bool shared, int64_t b, int64_t q,
             const std::vector<float>& k, const std::vector<float>& v) {
    const int64_t h = config.num_kv_heads, d = config.head_dim;
    for (int64_t i = 0; i < b; ++i) {
      for (int64_t t = 0; t < q; ++t) {  // in column order: the later duplicate wins
        const int64_t p = pos[static_cast<size_t>((shared ? 0 : i) * q + t)];
        if (p < 0 || p >= config.max_len) continue;
        Kv entry;
        for (int64_t head = 0; head < h; ++head) {
          for (int64_t e = 0; e < d; ++e) {
            const size_t at = static_cast<size_t>(((i * h + head) * q + t) * d + e);
            entry.k.push_back(k[at]);
            entry.v.push_back(v[at]);
          }
        }
        rows[static_cast<size_t>(i)].layers[static_cast<size_t>(layer)][p] = entry;
      }
    }
  }

  // After a step's writes: each row's length and newest position.
  void advance(const std::vector<int64_t>& pos, bool shared, int64_t b, int64_t q) {
    for (int64_t i = 0; i < b; ++i) {
      RowModel& row = rows[static_cast<size_t>(i)];
      for (int64_t t = 0; t < q; ++t) {
        const int64_t p = pos[static_cast<size_t>((shared ? 0 : i) * q + t)];
        if (p >= 0 && p < config.max_len) {
          row.seq_length = std::max(row.seq_length, p + 1);
          row.newest = std::max(row.newest, p);
        }
      }
    }
  }

  // Attention [head_dim] of one query head `qv` at position p of row `i` in
  // `layer`, over its kv head's keys at positions <= p below `visible` (and
  // within `window` of p when window > 0). Zeros for a position outside
  // [0, max_len): a padding query sees nothing.
  std::vector<double> attend(int64_t i, int64_t layer, int64_t p, const float* qv, int64_t kv_head,
                             int64_t visible, int64_t window) const {
    const int64_t d = config.head_dim;
    std::vector<double> expected(static_cast<size_t>(d), 0.0);
    if (p < 0 || p >= config.max_len) return expected;
    std::vector<std::pair<double, const Kv*>> scores;
    double top = -std::numeric_limits<double>::infinity();
    for (const auto& [k_pos, entry] :
         rows[static_cast<size_t>(i)].layers[static_cast<size_t>(layer)]) {
      if (k_pos > p || k_pos >= visible) continue;
      if (window > 0 && p - k_pos >= window) continue;
      double dot = 0;
      for (int64_t e = 0; e < d; ++e) {
        dot += static_cast<double>(qv[e]) * entry.k[static_cast<size_t>(kv_head * d + e)];
      }
      dot /= std::sqrt(static_cast<double>(d));
      top = std::max(top, dot);
      scores.emplace_back(dot, &entry);
    }
    double total = 0;
    for (auto& [score, entry] : scores) total += std::exp(score - top);
    for (auto& [score, entry] : scores) {
      const double weight = std::exp(score - top) / total;
      for (int64_t e = 0; e < d; ++e) {
        expected[static_cast<size_t>(e)] += weight * entry->v[static_cast<size_t>(kv_head * d + e)];
      }
    }
    return expected;
  }
};

}  // namespace statickv::fuzz
