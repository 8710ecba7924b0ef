// The reference decoder's rotary embedding: each family's frequencies
// (default, linear, Llama 3.1's), cos and sin computed per pass or gathered
// from a table (Note [rope table]).

#include <statickv/model/model.hpp>

#include <algorithm>
#include <cmath>
#include <tuple>

namespace statickv::reference {

namespace {

// Inverse frequencies [head_dim / 2] (float32), "default", "linear" or "llama3".
at::Tensor inverse_frequencies(const RopeConfig& rope, int64_t head_dim) {
  const auto f32 = at::TensorOptions().dtype(at::kFloat);
  at::Tensor inv = at::arange(0, head_dim, 2, at::TensorOptions().dtype(at::kLong))
                       .to(at::kFloat)
                       .div(static_cast<double>(head_dim));
  inv = at::pow(at::scalar_tensor(rope.theta, f32), inv).reciprocal();
  if (rope.type == "linear") return inv.div(rope.factor);  // positions divided by factor
  if (rope.type == "llama3") {
    // Llama 3.1's frequency-dependent scaling: long wavelengths are divided
    // by `factor`, short ones kept, the band between interpolated.
    const double old_len = static_cast<double>(rope.original_max_position_embeddings);
    const double low_wavelen = old_len / rope.low_freq_factor;
    const double high_wavelen = old_len / rope.high_freq_factor;
    const at::Tensor wavelen = inv.reciprocal().mul(2 * M_PI);
    at::Tensor scaled = at::where(wavelen.gt(low_wavelen), inv.div(rope.factor), inv);
    const at::Tensor smooth = wavelen.reciprocal()
                                  .mul(old_len)
                                  .sub(rope.low_freq_factor)
                                  .div(rope.high_freq_factor - rope.low_freq_factor);
    const at::Tensor smoothed =
        smooth.neg().add(1).mul(scaled).div(rope.factor).add(smooth.mul(scaled));
    const at::Tensor medium = wavelen.ge(high_wavelen).logical_and(wavelen.le(low_wavelen));
    inv = at::where(medium, smoothed, scaled);
  }
  return inv;
}

// [head_dim / 2] -> [head_dim]: rotate_half pairs element i with i + D/2,
// both turned by the same angle.
at::Tensor both_halves(const at::Tensor& inv) { return at::cat({inv, inv}); }

}  // namespace

// The rope's frequencies and Note [rope table]'s tables, for the full
// layers and, where their rope differs, the sliding ones.
void LlamaModel::load_rope() {
  inv_freq_ = both_halves(inverse_frequencies(config_.rope, config_.head_dim)).to(device_);
  rope_table_ = rope_table(inv_freq_);
  if (config_.sliding_rope) {
    sliding_inv_freq_ =
        both_halves(inverse_frequencies(*config_.sliding_rope, config_.head_dim)).to(device_);
    sliding_rope_table_ = rope_table(sliding_inv_freq_);
  }
}

// cos/sin [b, 1, q, head_dim] in the model dtype, computed in float32 in
// three launches (Note [counted step]): the int64 positions times the
// frequencies (stored for both halves) promote to float32, and cos and sin
// round into the dtype as they write.
std::pair<at::Tensor, at::Tensor> LlamaModel::rope(const at::Tensor& positions,
                                                   const at::Tensor& inv_freq) const {
  const at::Tensor angles = positions.unsqueeze(1).unsqueeze(-1).mul(inv_freq);  // [b, 1, q, D]
  at::Tensor cos = at::empty(angles.sizes(), angles.options().dtype(dtype_));
  at::Tensor sin = at::empty_like(cos);
  at::cos_out(cos, angles);
  at::sin_out(sin, angles);
  return {cos, sin};
}

// Padded tokens get position 0 for the rotary embedding; their outputs are
// never used and the cache never stores them.
// Note [rope table]: a pass whose positions all fall in the table (one
// past the highest, attend_len, is at most its rows) gathers cos and sin
// from it in one launch per rope; any other computes them (three).
LlamaModel::Rotary LlamaModel::rotary(const at::Tensor& positions, int64_t attend_len) const {
  const at::Tensor clamped = positions.clamp_min(0);
  const bool table = attend_len > 0 && attend_len <= rope_table_.size(0);
  Rotary r;
  std::tie(r.cos, r.sin) = table ? from_table(rope_table_, clamped) : rope(clamped, inv_freq_);
  if (sliding_inv_freq_.defined()) {
    std::tie(r.sliding_cos, r.sliding_sin) =
        table ? from_table(sliding_rope_table_, clamped) : rope(clamped, sliding_inv_freq_);
  } else {
    r.sliding_cos = r.cos;
    r.sliding_sin = r.sin;
  }
  return r;
}

// [rows, 2 * head_dim]: cos then sin of positions 0..rows-1, by rope()
// itself, so the table holds what rope() computes for those positions.
at::Tensor LlamaModel::rope_table(const at::Tensor& inv_freq) const {
  const int64_t rows = std::min(config_.max_position_embeddings, kRopeTableRows);
  const int64_t d = config_.head_dim;
  const at::Tensor positions =
      at::arange(rows, at::TensorOptions().dtype(at::kLong).device(device_)).view({1, rows});
  const auto [cos, sin] = rope(positions, inv_freq);  // [1, 1, rows, d]
  return at::cat({cos.view({rows, d}), sin.view({rows, d})}, 1);
}

// cos and sin [b, 1, q, head_dim] (views of one [b, q, 2 * head_dim]
// gather) of positions `clamped` [b, q], each >= 0 and in the table.
std::pair<at::Tensor, at::Tensor> LlamaModel::from_table(const at::Tensor& table,
                                                         const at::Tensor& clamped) const {
  const int64_t b = clamped.size(0), q = clamped.size(1), d = config_.head_dim;
  const at::Tensor rows = at::embedding(table, clamped).view({b, 1, q, 2 * d});
  return {rows.narrow(-1, 0, d), rows.narrow(-1, d, d)};
}

}  // namespace statickv::reference
