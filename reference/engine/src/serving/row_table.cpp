// RowTable: where each live request's cache row is, kept as two contiguous
// regions (prefilling, then decoding) at the front of the cache, with
// one-row moves (copy_row) and resets (state.hpp).

#include "state.hpp"

namespace statickv::reference::serving_detail {

namespace {

at::Tensor row_index(std::vector<int64_t> rows) {
  return at::tensor(rows, at::TensorOptions().dtype(at::kLong));
}

}  // namespace

void RowTable::copy_row(size_t from, size_t to) {
  for (Cache* c : caches_) c->copy_row(static_cast<int64_t>(from), static_cast<int64_t>(to));
  head_->copy_row(static_cast<int64_t>(from), static_cast<int64_t>(to));
  ++copies_;
}

void RowTable::reset_row(size_t r) {
  for (Cache* c : caches_) c->reset_rows(row_index({static_cast<int64_t>(r)}));
}

void RowTable::move_row(size_t from, size_t to) {
  if (from == to) return;
  copy_row(from, to);
  rows_[to] = std::move(rows_[from]);
}

void RowTable::admit(Active request) {
  const size_t live = rows_.size();
  if (prefilling_ < live) {
    // The first decoding row moves to the fresh row past the live prefix.
    copy_row(prefilling_, live);
    rows_.push_back(std::move(rows_[prefilling_]));
    reset_row(prefilling_);
    rows_[prefilling_] = std::move(request);
  } else {
    rows_.push_back(std::move(request));  // the row past the live prefix: fresh
  }
  const Active& admitted = rows_[prefilling_];
  head_->set_row(static_cast<int64_t>(prefilling_), admitted.request.sampling,
                 admitted.request.prompt, admitted.stop);
  ++prefilling_;
}

void RowTable::regroup() {
  std::vector<int64_t> order;
  for (size_t r = 0; r < prefilling_; ++r) {
    if (!rows_[r].decoding()) order.push_back(static_cast<int64_t>(r));
  }
  const size_t still = order.size();
  if (still == prefilling_) return;
  for (size_t r = 0; r < prefilling_; ++r) {
    if (rows_[r].decoding()) order.push_back(static_cast<int64_t>(r));
  }
  bool identity = true;
  for (size_t i = 0; i < order.size(); ++i)
    identity = identity && order[i] == static_cast<int64_t>(i);
  if (!identity) {
    const at::Tensor index = row_index(order);
    for (Cache* c : caches_) c->reorder(index);  // row i becomes old row order[i], i < prefilling
    head_->reorder(index);
    copies_ += static_cast<int64_t>(order.size());
    std::vector<Active> moved;
    for (int64_t r : order) moved.push_back(std::move(rows_[static_cast<size_t>(r)]));
    for (size_t i = 0; i < moved.size(); ++i) rows_[i] = std::move(moved[i]);
  }
  prefilling_ = still;
}

Completion RowTable::retire(size_t r, Finish finish) {
  Completion done = complete(rows_[r], finish, ServeClock::now());
  size_t hole = r;
  if (r < prefilling_) {
    move_row(prefilling_ - 1, r);
    hole = --prefilling_;
  }
  const size_t last = rows_.size() - 1;
  move_row(last, hole);
  reset_row(last);
  rows_.pop_back();
  return done;
}

}  // namespace statickv::reference::serving_detail
