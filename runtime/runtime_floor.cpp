// What the runtime samples for the resident floor (Note [Resident floor] in
// runtime/resident_floor.hpp), which hooks/budget checks a ratio budget
// against (Note [Budget floor] in hooks/budget/budget_floor.cpp).

#include <algorithm>
#include <optional>

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
  if (alloc_.budget()) return {candidates_.bytes(), t.in_candidates ? t.bytes : 0};
  std::size_t droppable = 0;
  std::size_t swap_only = 0;
  for (std::size_t i = 0; i < candidates_.size(); ++i) {
    const managed_tensor& c = candidates_.at(i);
    if (!c.binding->can_release()) continue;
    (c.recomputable() && c.binding->can_recompute() ? droppable : swap_only) += c.bytes;
  }
  if (const std::optional<std::size_t> room = engine_.host_room()) swap_only = std::min(swap_only, *room);
  const std::size_t all = droppable + swap_only;
  return {all, t.in_candidates && t.binding->can_release() ? std::min(t.bytes, all) : 0};
}

void memory_runtime::sample_floor_locked(const managed_tensor& t, bool tracked) {
  const auto marks = alloc_.take_allocated_high_water();
  const floor_spare spare = floor_spare_locked(t);
  const std::size_t stranded = floor_.at_step_start() ? alloc_.stranded_bytes() : 0;
  if (tracked) {
    // t was in use at the high-water moment, and may be evicted from now on.
    floor_.sample(marks.high_water, marks.now, spare.all - spare.of_t, spare.all, stranded);
  } else {
    // t waited until now, and is about to be used.
    floor_.sample(marks.high_water, marks.now, spare.all, spare.all - spare.of_t, stranded);
  }
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
