// Fuzz target: random sequences of prepare / update / reset_rows / copy_row
// / reorder / reset on random small configs (host offload on or off), valid and invalid arguments
// mixed, checked against a plain model that keeps every token
// (cache_model.hpp).
//
// What it checks, on every input:
// - a valid step's attention output equals the model's for every token of a
//   row the model can vouch for, in every layer; seq_lengths equals the
//   model's; buffer addresses never change;
// - an invalid call raises c10::Error naming its argument, and leaves every
//   buffer and all bookkeeping bit-identical (a Snapshot, tests/support);
// - positions the device routes (check_position_values = false, as on CUDA):
//   any int64 values at all never raise, never crash, never index outside a
//   buffer (LibTorch's CPU index kernels would raise) and never change a row
//   they were not given to. The rows they were given to ("poisoned": a ring
//   that saw positions go backwards no longer holds every token of its
//   window) are only checked for finite outputs until reset or overwritten.
//
// Bytes: the config (small_config below), a seed for keys and values, then
// up to 24 operations, each a byte choosing it and the bytes it reads. Seeds
// (corpus/cache): random bytes, 47 to 511 of them.

#include "cache_model.hpp"
#include "fuzz_support.hpp"
#include "support/snapshot.hpp"

#include <statickv/statickv.hpp>

#include <ATen/ATen.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <optional>
#include <random>
#include <string>
#include <vector>

namespace {

using namespace statickv;
using namespace statickv::fuzz;
using statickv::test::addresses;
using statickv::test::Snapshot;

// What the target exercised, for replay_main's summary.
struct Stats {
  int64_t sessions = 0, steps = 0, chaos_steps = 0, refused_steps = 0, compared_tokens = 0,
          bad_calls = 0, row_ops = 0;
} stats;

class Session {
 public:
  Session(const CacheConfig& config, Input& in)
      : in_(in), cache_(config), model_(config), rng_(in.bits(32)), addresses_(addresses(cache_)) {
    group_ = in.range(1, 2);
  }

  void run() {
    for (int op = 0; op < 24 && !in_.done(); ++op) {
      switch (in_.range(0, 11)) {
        case 0:
          reset_rows();
          break;
        case 1:
          copy_row();
          break;
        case 2:
          reorder();
          break;
        case 3:
          cache_.reset();
          for (int64_t r = 0; r < max_batch(); ++r) model_.reset_row(r);
          stale_ = true;
          break;
        case 4:
        case 5:
          bad_call();
          break;
        case 6:
          step(/*chaos=*/true);
          break;
        default:
          step(/*chaos=*/false);
      }
      check_bookkeeping();
    }
  }

 private:
  int64_t max_batch() const { return cache_.config().max_batch; }
  int64_t max_len() const { return cache_.config().max_len; }
  bool host_checked() const { return cache_.config().check_position_values; }

  at::Tensor random_tensor(std::vector<int64_t> shape, std::vector<float>* out = nullptr) {
    int64_t n = 1;
    for (int64_t s : shape) n *= s;
    std::vector<float> values(static_cast<size_t>(n));
    std::uniform_real_distribution<float> dist(-2.f, 2.f);
    for (float& v : values) v = dist(rng_);
    if (out) *out = values;
    return at::tensor(values, at::kFloat).view(shape);
  }

  at::Tensor rows_tensor(const std::vector<int64_t>& rows) { return at::tensor(rows, at::kLong); }

  void reset_rows() {
    ++stats.row_ops;
    std::vector<int64_t> rows;
    for (int64_t r = 0; r < max_batch(); ++r) {
      if (in_.flip()) rows.push_back(r);
    }
    if (rows.empty()) rows.push_back(in_.range(0, max_batch() - 1));
    std::shuffle(rows.begin(), rows.end(), rng_);
    cache_.reset_rows(rows_tensor(rows));
    for (int64_t r : rows) model_.reset_row(r);
    stale_ = true;
  }

  void copy_row() {
    ++stats.row_ops;
    const int64_t src = in_.range(0, max_batch() - 1);
    const int64_t dst = in_.range(0, max_batch() - 1);
    cache_.copy_row(src, dst);
    model_.rows[static_cast<size_t>(dst)] = model_.rows[static_cast<size_t>(src)];
    stale_ = true;
  }

  void reorder() {
    ++stats.row_ops;
    const int64_t n = in_.range(1, max_batch());
    std::vector<int64_t> order;
    for (int64_t i = 0; i < n; ++i) order.push_back(in_.range(0, max_batch() - 1));
    cache_.reorder(rows_tensor(order));
    const std::vector<RowModel> old = model_.rows;
    for (int64_t i = 0; i < n; ++i) {
      model_.rows[static_cast<size_t>(i)] = old[static_cast<size_t>(order[static_cast<size_t>(i)])];
    }
    stale_ = true;
  }

  // One invalid call, chosen by the input; it must be refused, by name,
  // with nothing changed.
  void bad_call() {
    ++stats.bad_calls;
    const Snapshot before(cache_);
    const int64_t kind = in_.range(0, 15);
    const std::string what = "bad call " + std::to_string(kind);
    if (kind <= 6) {
      bad_prepare(kind, what);
    } else {
      bad_update_or_row_op(kind, what);
    }
    FUZZ_CHECK(before.same_as(cache_), what + " changed the cache");
  }

  // bad_call()'s kinds 0 to 6: a bad prepare().
  void bad_prepare(int64_t kind, const std::string& what) {
    const int64_t b = max_batch();
    const int64_t chunk = cache_.config().effective_max_chunk();
    const at::Tensor pos = at::zeros({1}, at::kLong);
    switch (kind) {
      case 0:
        expect_error([&] { cache_.prepare(pos, in_.flip() ? 0 : b + 1 + in_.range(0, 3)); },
                     "live_batch", what);
        break;
      case 1:
        expect_error([&] { cache_.prepare(pos.to(at::kInt), 1); }, "cache_position", what);
        break;
      case 2:
        expect_error(
            [&] {
              cache_.prepare(at::zeros({1, 1, 1}, at::kLong), 1);
            },
            "cache_position", what);
        break;
      case 3:
        expect_error(
            [&] {
              cache_.prepare(at::zeros({b + 1, 1}, at::kLong), b);
            },
            "cache_position", what);
        break;
      case 4:
        expect_error([&] { cache_.prepare(at::zeros({chunk + 1}, at::kLong), 1); },
                     "cache_position", what);
        break;
      case 5:
        expect_error([&] { cache_.prepare(pos, 1, in_.flip() ? 0 : max_len() + 1); }, "attend_len",
                     what);
        break;
      case 6:
        if (host_checked()) {
          const int64_t p = in_.flip() ? max_len() : kMax - in_.range(0, 3);
          expect_error([&] { cache_.prepare(at::full({1}, p, at::kLong), 1); }, "cache_position[",
                       what);
        }
        break;
    }
  }

  // bad_call()'s kinds 7 to 15: a bad update() or row operation.
  void bad_update_or_row_op(int64_t kind, const std::string& what) {
    const int64_t b = max_batch();
    const int64_t layers = cache_.num_layers();
    const at::Tensor kv = at::zeros({b, cache_.config().num_kv_heads, 1, cache_.config().head_dim});
    switch (kind) {
      case 7:
        if (last_step_) {
          expect_error(
              [&] {
                cache_.update(in_.flip() ? -1 - in_.range(0, 3) : layers + in_.range(0, 3), kv, kv,
                              *last_step_);
              },
              "layer", what);
        }
        break;
      case 8:
        if (last_step_) {
          expect_error([&] { cache_.update(0, kv.narrow(3, 0, 0), kv, *last_step_); },
                       stale_ ? "step" : "key", what);
        }
        break;
      case 9:
        if (last_step_) {
          expect_error([&] { cache_.update(0, kv, kv.to(at::kDouble), *last_step_); },
                       stale_ ? "step" : "value", what);
        }
        break;
      case 10:
        expect_error([&] { cache_.reset_rows(rows_tensor({in_.flip() ? -1 : b})); }, "rows[0]",
                     what);
        break;
      case 11:
        if (b >= 2) {
          const int64_t r = in_.range(0, b - 1);
          expect_error([&] { cache_.reset_rows(rows_tensor({r, r})); }, "distinct", what);
        } else {
          expect_error([&] { cache_.reset_rows(rows_tensor({0, 0})); }, "rows", what);
        }
        break;
      case 12:
        expect_error([&] { cache_.reset_rows(at::zeros({0}, at::kLong)); }, "rows", what);
        break;
      case 13:
        expect_error([&] { cache_.copy_row(in_.flip() ? b : in_.extreme() | kMin, 0); }, "src",
                     what);
        break;
      case 14:
        expect_error(
            [&] {
              std::vector<int64_t> order(static_cast<size_t>(b), 0);
              order.back() = in_.flip() ? b + in_.range(0, 5) : -1 - in_.range(0, 5);
              cache_.reorder(rows_tensor(order));
            },
            "indices[", what);
        break;
      case 15:
        if (last_step_ && !stale_ && last_step_->live_batch() == b &&
            last_step_->query_len() == 1) {
          // A source that is a view of the buffer it would be written into.
          expect_error([&] { cache_.update(0, cache_.keys(0).narrow(2, 0, 1), kv, *last_step_); },
                       "key", what);
        }
        break;
    }
  }

  // The positions of one step of b rows (one shared row when `shared`) of
  // q columns; `rewinds` is set when a chaos position is one a row already
  // stored.
  std::vector<int64_t> step_positions(bool chaos, int64_t b, int64_t q, bool shared,
                                      bool* rewinds) {
    const int64_t rows = shared ? 1 : b;
    std::vector<int64_t> pos(static_cast<size_t>(rows * q), -1);
    for (int64_t r = 0; r < rows; ++r) {
      int64_t newest = -1;
      for (int64_t i = 0; i < b; ++i) {
        if (shared || i == r) newest = std::max(newest, model_.rows[static_cast<size_t>(i)].newest);
      }
      if (chaos) {
        for (int64_t t = 0; t < q; ++t) {
          const int64_t p = in_.flip() ? in_.range(-2, max_len() + 2) : in_.extreme();
          pos[static_cast<size_t>(r * q + t)] = p;
          if (p >= 0 && p < max_len() && p <= newest) *rewinds = true;
        }
        continue;
      }
      // n new consecutive positions (a gap allowed before them), at shuffled
      // columns; one may repeat (the later column wins); the rest padding.
      const int64_t start = newest + 1 + in_.range(0, 2);
      const int64_t n = in_.range(0, q);
      std::vector<int64_t> cols(static_cast<size_t>(q));
      for (int64_t t = 0; t < q; ++t) cols[static_cast<size_t>(t)] = t;
      std::shuffle(cols.begin(), cols.end(), rng_);
      for (int64_t t = 0; t < n; ++t)
        pos[static_cast<size_t>(r * q + cols[static_cast<size_t>(t)])] = start + t;
      if (n >= 1 && n < q && in_.flip()) {
        pos[static_cast<size_t>(r * q + cols[static_cast<size_t>(n)])] =
            start + in_.range(0, n - 1);
      }
      if (!host_checked() && in_.range(0, 7) == 0) {
        // Device-routed: a position past max_len is simply not stored.
        pos[static_cast<size_t>(r * q + cols[static_cast<size_t>(q - 1)])] =
            max_len() + in_.range(0, 3);
      }
      if (in_.range(0, 7) == 0) pos[static_cast<size_t>(r * q + cols[0])] = kMin + in_.range(0, 3);
    }
    return pos;
  }

  // After an accepted step: poisons the rows the model can no longer vouch for.
  void poison_rows(const std::vector<int64_t>& pos, bool chaos, bool rewinds, bool shared,
                   int64_t b, int64_t q) {
    const CacheConfig& c = cache_.config();
    const int64_t rows = shared ? 1 : b;
    // Which rows the model can still vouch for after this step.
    for (int64_t i = 0; i < b; ++i) {
      if (chaos && rewinds) model_.rows[static_cast<size_t>(i)].poisoned = true;
    }
    if (chaos && !rewinds && has_ring()) {
      // Positions within one step spanning more than max_chunk may evict
      // each other in a ring (newest wins): not what keep-every-token says.
      for (int64_t r = 0; r < rows; ++r) {
        int64_t lo = kMax, hi = -1;
        for (int64_t t = 0; t < q; ++t) {
          const int64_t p = pos[static_cast<size_t>(r * q + t)];
          if (p >= 0 && p < max_len()) {
            lo = std::min(lo, p);
            hi = std::max(hi, p);
          }
        }
        if (hi >= 0 && hi - lo >= c.effective_max_chunk()) {
          for (int64_t i = 0; i < b; ++i) {
            if (shared || i == r) model_.rows[static_cast<size_t>(i)].poisoned = true;
          }
        }
      }
    }
  }

  // Writes random keys and values to every layer and compares each layer's
  // attention with the model's.
  void write_and_compare(const StepPlan& s, const std::vector<int64_t>& pos, bool shared, int64_t b,
                         int64_t q, int64_t attend) {
    const CacheConfig& c = cache_.config();
    const int64_t hq = c.num_kv_heads * group_;
    const int64_t d = c.head_dim;
    std::vector<float> query_values;
    const at::Tensor query = random_tensor({b, hq, q, d}, &query_values);
    for (int64_t l = 0; l < c.num_layers; ++l) {
      std::vector<float> kv_k, kv_v;
      const at::Tensor key = random_tensor({b, c.num_kv_heads, q, d}, &kv_k);
      const at::Tensor value = random_tensor({b, c.num_kv_heads, q, d}, &kv_v);
      const KV views = cache_.update(l, key, value, s);
      model_.write(l, pos, shared, b, q, kv_k, kv_v);
      const at::Tensor out =
          reference_attention(query, views.keys, views.values, s.mask(l)).contiguous();
      compare(l, out, query_values, pos, shared, b, q, attend);
    }
  }

  // Positions of one step. Valid steps keep each row's positions past the
  // newest it stored, which is what the model (keep every token) describes
  // for ring layers too; chaos steps draw any int64 at all.
  void step(bool chaos) {
    const CacheConfig& c = cache_.config();
    const int64_t b = in_.range(1, max_batch());
    const int64_t q = in_.range(1, std::min<int64_t>(c.effective_max_chunk(), 6));
    const bool shared = in_.flip();
    const int64_t rows = shared ? 1 : b;
    bool rewinds = false;
    const std::vector<int64_t> pos = step_positions(chaos, b, q, shared, &rewinds);
    // Full layers attend a prefix: on the host it must hold every position.
    int64_t highest = 0;
    for (int64_t p : pos) {
      if (p >= 0 && p < max_len()) highest = std::max(highest, p + 1);
    }
    int64_t attend = -1;
    if (in_.flip()) {
      attend = host_checked() && !chaos ? in_.range(std::max<int64_t>(highest, 1), max_len())
                                        : in_.range(1, max_len());
    }
    const at::Tensor positions =
        shared ? at::tensor(pos, at::kLong) : at::tensor(pos, at::kLong).view({b, q});

    const Snapshot before(cache_);
    std::optional<StepPlan> planned;
    try {
      planned.emplace(cache_.prepare(positions, b, attend));
    } catch (const c10::Error& e) {
      // Only host-checked values may be refused, and only when the model
      // agrees they cannot be stored or seen.
      FUZZ_CHECK(host_checked(),
                 std::string("device-routed step refused: ") + e.what_without_backtrace());
      FUZZ_CHECK(chaos || !valid_on_host(pos, rows, q, attend),
                 std::string("valid step refused: ") + e.what_without_backtrace());
      FUZZ_CHECK(mentions(e, "cache_position["), e.what_without_backtrace());
      FUZZ_CHECK(before.same_as(cache_), "a refused prepare changed the cache");
      ++stats.refused_steps;
      return;
    }
    FUZZ_CHECK(!host_checked() || valid_on_host(pos, rows, q, attend),
               "host-checked prepare accepted a position it must refuse");
    const StepPlan& s = *planned;
    for (int64_t l = 0; l < c.num_layers; ++l) check_write_slots(l, s, pos, rows, q);

    poison_rows(pos, chaos, rewinds, shared, b, q);
    write_and_compare(s, pos, shared, b, q, attend);
    model_.advance(pos, shared, b, q);
    last_step_ = planned;
    stale_ = false;
    ++(chaos ? stats.chaos_steps : stats.steps);
  }

  // Every slot a step writes is inside the buffer (scratch included), and no
  // slot but the scratch one is written twice in a row (Note [newest wins]:
  // duplicate indices would race on a GPU); the token that keeps a slot has
  // the newest position, ties going to the later column.
  void check_write_slots(int64_t layer, const StepPlan& s, const std::vector<int64_t>& pos,
                         int64_t rows, int64_t q) {
    const int64_t scratch = cache_.capacity(layer);
    const auto& policy = cache_.layer(layer);
    const at::Tensor w = s.write_slots(layer).contiguous();
    const int64_t* slots = w.data_ptr<int64_t>();
    for (int64_t r = 0; r < rows; ++r) {
      std::map<int64_t, int64_t> owner;  // slot -> column
      for (int64_t t = 0; t < q; ++t) {
        const int64_t slot = slots[r * q + t];
        FUZZ_CHECK(slot >= 0 && slot <= scratch, "a write slot outside the buffer");
        const int64_t p = pos[static_cast<size_t>(r * q + t)];
        FUZZ_CHECK(slot == scratch || policy.slot_of(p) == slot, "a slot the policy did not give");
        if (slot == scratch) continue;
        FUZZ_CHECK(owner.count(slot) == 0, "slot " + std::to_string(slot) + " written twice");
        owner[slot] = t;
      }
      for (int64_t t = 0; t < q; ++t) {
        const int64_t p = pos[static_cast<size_t>(r * q + t)];
        const int64_t home = policy.slot_of(p);
        if (home == scratch) continue;
        const auto it = owner.find(home);
        FUZZ_CHECK(it != owner.end(), "a storable position lost its slot to nothing");
        const int64_t kept = pos[static_cast<size_t>(r * q + it->second)];
        FUZZ_CHECK(kept > p || (kept == p && it->second >= t), "an older token kept the slot");
      }
    }
  }

  bool has_ring() const { return cache_.config().has_type(LayerType::kSliding); }

  // What prepare() checks for host positions.
  bool valid_on_host(const std::vector<int64_t>& pos, int64_t rows, int64_t q,
                     int64_t attend) const {
    const CacheConfig& c = cache_.config();
    const int64_t limit =
        c.has_type(LayerType::kFull) ? (attend < 0 ? c.max_len : attend) : c.max_len;
    for (int64_t r = 0; r < rows; ++r) {
      int64_t lo = kMax, hi = -1;
      for (int64_t t = 0; t < q; ++t) {
        const int64_t p = pos[static_cast<size_t>(r * q + t)];
        if (p < 0) continue;
        if (p >= limit) return false;
        lo = std::min(lo, p);
        hi = std::max(hi, p);
      }
      if (has_ring() && hi >= 0 && hi - lo >= c.effective_max_chunk()) return false;
    }
    return true;
  }

  // The model's attention for every token of the step in `layer`, against
  // the cache's output [b, hq, q, d].
  void compare(int64_t layer, const at::Tensor& out, const std::vector<float>& query,
               const std::vector<int64_t>& pos, bool shared, int64_t b, int64_t q, int64_t attend) {
    const CacheConfig& c = cache_.config();
    const bool sliding = c.layer_type(layer) == LayerType::kSliding;
    const int64_t window = sliding ? c.sliding_window : 0;
    const int64_t visible =
        sliding ? c.max_len : std::min(attend < 0 ? c.max_len : attend, c.max_len);
    const int64_t h = c.num_kv_heads, hq = h * group_, d = c.head_dim;
    const float* got = out.data_ptr<float>();
    for (int64_t i = 0; i < b; ++i) {
      const RowModel& row = model_.rows[static_cast<size_t>(i)];
      for (int64_t t = 0; t < q; ++t) {
        const int64_t p = pos[static_cast<size_t>((shared ? 0 : i) * q + t)];
        for (int64_t head = 0; head < hq; ++head) {
          const float* o = got + ((i * hq + head) * q + t) * d;
          for (int64_t e = 0; e < d; ++e) FUZZ_CHECK(std::isfinite(o[e]), "a non-finite output");
          if (row.poisoned) continue;
          if (head == 0) ++stats.compared_tokens;
          const std::vector<double> expected =
              model_.attend(i, layer, p, query.data() + ((i * hq + head) * q + t) * d,
                            head / group_, visible, window);
          for (int64_t e = 0; e < d; ++e) {
            const double diff = std::abs(o[e] - expected[static_cast<size_t>(e)]);
            FUZZ_CHECK(diff <= 1e-4 + 1e-4 * std::abs(expected[static_cast<size_t>(e)]),
                       "layer " + std::to_string(layer) + " row " + std::to_string(i) + " token " +
                           std::to_string(t) + " position " + std::to_string(p) + " got " +
                           std::to_string(o[e]) + " expected " +
                           std::to_string(expected[static_cast<size_t>(e)]));
          }
        }
      }
    }
  }

  void check_bookkeeping() {
    const at::Tensor seq = cache_.seq_lengths().contiguous();
    const int64_t* data = seq.data_ptr<int64_t>();
    for (int64_t r = 0; r < max_batch(); ++r) {
      FUZZ_CHECK(data[r] == model_.rows[static_cast<size_t>(r)].seq_length,
                 "seq_lengths row " + std::to_string(r) + ": " + std::to_string(data[r]) +
                     " != " + std::to_string(model_.rows[static_cast<size_t>(r)].seq_length));
    }
    FUZZ_CHECK(addresses(cache_) == addresses_, "a buffer moved");
  }

  Input& in_;
  HybridCache cache_;
  Model model_;
  std::mt19937 rng_;
  std::vector<const void*> addresses_;  // every buffer's, at construction
  int64_t group_ = 1;                   // query heads per kv head
  std::optional<StepPlan> last_step_;   // the latest step made
  bool stale_ = true;                   // a row operation came after it
};

CacheConfig small_config(Input& in) {
  CacheConfig c;
  c.num_layers = in.range(1, 3);
  c.num_kv_heads = in.range(1, 2);
  c.head_dim = in.range(1, 4);
  c.max_batch = in.range(1, 4);
  c.max_len = in.range(1, 24);
  c.sliding_window = in.range(1, 10);
  c.max_chunk = in.range(0, c.max_len);
  c.check_position_values = in.flip();
  if (in.flip()) {
    for (int64_t l = 0; l < c.num_layers; ++l) {
      c.layer_types.push_back(in.flip() ? LayerType::kSliding : LayerType::kFull);
    }
  }
  c.host_offload = in.flip();  // Note [host offload]: the same checks through the staging ring
  return c;
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  return run_input(data, size, [](Input& in) {
    ++stats.sessions;
    Session session(small_config(in), in);
    session.run();
  });
}

/// A one-line summary of what the target ran (replay_main prints it).
std::string statickv_fuzz_summary() {
  return "sessions " + std::to_string(stats.sessions) + ", steps " + std::to_string(stats.steps) +
         " (+" + std::to_string(stats.chaos_steps) + " device-routed chaos, " +
         std::to_string(stats.refused_steps) + " refused on the host), tokens compared " +
         std::to_string(stats.compared_tokens) + ", bad calls " + std::to_string(stats.bad_calls) +
         ", row ops " + std::to_string(stats.row_ops);
}
