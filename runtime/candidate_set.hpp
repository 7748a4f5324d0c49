#pragma once
// The tensors a policy may evict: resident, evictable, not pinned. O(1) add,
// remove, touch and random access (for sampling), and access order (for LRU),
// so no policy ever scans every tracked tensor (DESIGN.md, "Policies").

#include <cstddef>
#include <list>
#include <vector>

#include "runtime/managed_tensor.hpp"

namespace tp {

/// Thread-safety: none; guarded by the runtime's lock. Holds pointers only:
/// a tensor must be removed before its record is destroyed.
class candidate_set {
 public:
  using lru_iterator = std::list<managed_tensor*>::const_iterator;

  void add(managed_tensor& t) {
    if (t.in_candidates) return;
    t.in_candidates = true;
    t.candidate_index = items_.size();
    items_.push_back(&t);
    t.lru_pos = lru_.insert(lru_.end(), &t);
    bytes_ += t.bytes;
  }
  void remove(managed_tensor& t) {
    if (!t.in_candidates) return;
    managed_tensor* last = items_.back();
    items_[t.candidate_index] = last;
    last->candidate_index = t.candidate_index;
    items_.pop_back();
    lru_.erase(t.lru_pos);
    t.in_candidates = false;
    bytes_ -= t.bytes;
  }
  /// Moves t to the most recently used end.
  void touch(managed_tensor& t) {
    if (t.in_candidates) lru_.splice(lru_.end(), lru_, t.lru_pos);
  }
  std::size_t size() const { return items_.size(); }
  /// The candidates' bytes (Note [Resident floor]).
  std::size_t bytes() const { return bytes_; }
  bool empty() const { return items_.empty(); }
  /// Requires: i < size(). The order is arbitrary (for sampling).
  managed_tensor& at(std::size_t i) const { return *items_[i]; }
  /// Least recently used first.
  lru_iterator lru_begin() const { return lru_.begin(); }
  lru_iterator lru_end() const { return lru_.end(); }

 private:
  std::vector<managed_tensor*> items_;
  std::list<managed_tensor*> lru_;
  std::size_t bytes_ = 0;
};

}  // namespace tp
