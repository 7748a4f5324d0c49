// What the runtime samples for the resident floor (Note [Resident floor] in
// runtime/resident_floor.hpp), which hooks/budget checks a ratio budget
// against (Note [Budget floor] in hooks/budget/budget_floor.cpp).

#include <algorithm>
#include <optional>
#include <utility>

#include "allocator/size_policy.hpp"
#include "runtime/runtime.hpp"

namespace tp {

// Note [Resident floor]: a candidate the program still holds (the input batch
// through the whole forward) frees nothing when evicted, so it is not spare.
// Telling which are held takes a scan of the candidates, O(n) an event, so it
// is done only while no budget is set: in the steps a ratio is measured on,
// which are the steps whose floor refuses a budget (Note [Budget floor] in
// hooks/budget/budget_floor.cpp). Under a budget the floor counts them all.
// Nor is more spare than can go somewhere: a candidate that cannot be
// recomputed can only be swapped, and a pinned host pool that refuses past
// its budget takes only its room. Counted in full, such tensors let the floor
// accept a budget (0.75 of a 46 MiB peak, host_budget 1 MiB, capuchin) that
// ran out of memory in its first budgeted step, "6 MiB that could neither be
// swapped nor recomputed" (tests/python/test_budget_fuzz.py, seed 210).
memory_runtime::floor_spare memory_runtime::floor_spare_locked(const managed_tensor& t) const {
  const std::size_t all = spare_bytes_locked();
  if (alloc_.budget()) return {all, t.in_candidates ? t.bytes : 0};
  return {all, t.in_candidates && t.binding->can_release() ? std::min(t.bytes, all) : 0};
}

std::size_t memory_runtime::spare_bytes_locked() const {
  if (alloc_.budget()) return candidates_.bytes();
  std::size_t droppable = 0;
  std::size_t swap_only = 0;
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    const managed_tensor& c = candidates_.at(i);
    if (!c.binding->can_release()) continue;
    (c.recomputable() && c.binding->can_recompute() ? droppable : swap_only) += c.bytes;
  }
  if (const std::optional<std::size_t> room = engine_.host_room()) swap_only = std::min(swap_only, *room);
  return droppable + swap_only;
}

void memory_runtime::sample_floor_locked(const managed_tensor& t, bool tracked) {
  const auto marks = alloc_.take_allocated_high_water();
  const floor_spare spare = floor_spare_locked(t);
  const std::size_t stranded = floor_.at_step_start() ? alloc_.stranded_bytes() : 0;
  // Tracked: t was in use at the high-water moment, and may be evicted from
  // now on. Accessed: t waited until now, and is about to be used.
  const std::size_t before = tracked ? spare.all - spare.of_t : spare.all;
  const std::size_t after = tracked ? spare.all : spare.all - spare.of_t;
  floor_.sample(std::max(marks.high_water, std::exchange(held_high_water_, 0)), marks.now, before, after, stranded);
  hold_in_segment_locked(marks.high_water, marks.now, before, after);
  operand_ = tracked && segment_open_ ? std::optional<tensor_id>(t.id) : std::nullopt;
  if (!tracked && spare.of_t > 0 && t.rerun_bytes > 0 && !alloc_.budget() && floor_counts_rerun_locked(t)) {
    floor_.sample_rerun(bytes_above(marks.now, spare.all) + t.rerun_bytes);
  }
}

// Note [A rerun's working set]: whether the floor counts t's rerun.
bool memory_runtime::floor_counts_rerun_locked(const managed_tensor& t) const {
  return policy_->recompute_only() && t.recomputable() && t.binding->can_recompute();
}

// Note [A rerun's working set]: what a segment's forward held beyond what was
// held when it began, allocated less what eviction would free, at the samples
// in between and at its end. The high water taken here is the next sample's.
std::size_t memory_runtime::segment_started() {
  lock_type lock(mu_);
  segment_open_ = false;
  operand_.reset();
  if (alloc_.budget()) return 0;  // measured only where the floor is (no budget)
  const auto marks = alloc_.take_allocated_high_water();
  held_high_water_ = std::max(held_high_water_, marks.high_water);  // from before the segment
  segment_held_ = bytes_above(marks.now, spare_bytes_locked());
  segment_start_ = segment_held_;
  segment_open_ = true;
  return segment_held_;
}

std::size_t memory_runtime::segment_growth() {
  lock_type lock(mu_);
  segment_open_ = false;
  segment_total_ = 0;
  if (alloc_.budget()) return 0;
  const auto marks = alloc_.take_allocated_high_water();
  held_high_water_ = std::max(held_high_water_, marks.high_water);
  const std::size_t spare = spare_bytes_locked();
  hold_in_segment_locked(marks.high_water, marks.now, spare, spare);
  operand_.reset();
  segment_total_ = bytes_above(segment_held_, segment_start_);
  return segment_total_;
}

// Note [A rerun's working set]: the segment in progress, since it began, at
// a high water (spare before it, the tensor tracked at the last event held as
// an operand: Note [A saved operand is held while its operator runs]) and now.
void memory_runtime::hold_in_segment_locked(std::size_t high_water, std::size_t now, std::size_t spare_before,
                                            std::size_t spare_after) {
  const std::size_t operand = std::min(operand_spare_locked(), spare_before);
  segment_held_ = std::max({segment_held_, bytes_above(high_water, spare_before - operand),
                            bytes_above(now, spare_after)});
}

void memory_runtime::segment_input_saved() {
  lock_type lock(mu_);
  operand_.reset();
}

// Note [A saved operand is held while its operator runs]: what the spare
// bytes count of the tensor tracked at the last event (at its track the
// operator still held it, so it was not spare then).
std::size_t memory_runtime::operand_spare_locked() const {
  if (!operand_) return 0;
  const auto it = tensors_.find(to_underlying(*operand_));
  if (it == tensors_.end()) return 0;
  const managed_tensor& t = *it->second;
  return t.in_candidates && t.binding->can_release() ? t.bytes : 0;
}

std::size_t memory_runtime::floor_bytes() const {
  lock_type lock(mu_);
  return floor_.peak();
}

std::size_t memory_runtime::lowest_floor_bytes() const {
  lock_type lock(mu_);
  // Note [Resident floor]: a budget holds whole granules.
  const std::size_t granule = alloc_.granularity();
  const std::size_t floor = floor_.lowest();
  return granule == 0 ? floor : size_policy::round_up(floor, granule);
}

std::size_t memory_runtime::floor_stranded_bytes() const {
  lock_type lock(mu_);
  return floor_.stranded_at_start();
}

}  // namespace tp
