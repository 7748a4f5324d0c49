#pragma once
// tp::plan_cursor: where the step in progress stands in a step plan.

#include <cstddef>
#include <span>
#include <vector>

#include "runtime/step_planner.hpp"

namespace tp {

/// Which of a step_plan's departures and prefetches have come due and are
/// still to be carried out (Note [Carrying out a plan] in runtime_plan.cpp).
/// Entries are indices into step_plan::evictions. Each plan entry comes due
/// once, when the event at its leave_at (a departure) or prefetch_at (a
/// prefetch) has been recorded, and stops being due when the caller has
/// carried it out or the event at its back_at (its use) has been recorded.
/// The work per event is the due entries only: O(1) amortised. A value.
///
/// Thread-safety: none; memory_runtime holds one under its lock. Requires:
/// the same plan from one reset() to the next, and event positions that do
/// not go back.
class plan_cursor {
 public:
  /// A new step, or a new plan: nothing is due, nothing is passed.
  void reset() {
    next_leave_ = 0;
    next_prefetch_ = 0;
    leaves_due_.clear();
    prefetches_due_.clear();
  }

  /// The event at position `at` of the step has been recorded: what is due
  /// at or before it comes due, and what was due but whose use is at or
  /// before it is no longer (too late to carry out).
  void advance(const step_plan& plan, std::size_t at) {
    while (next_leave_ < plan.evictions.size() && plan.evictions[next_leave_].leave_at <= at) {
      leaves_due_.push_back(next_leave_++);
    }
    while (next_prefetch_ < plan.prefetch_order.size() &&
           plan.evictions[plan.prefetch_order[next_prefetch_]].prefetch_at <= at) {
      prefetches_due_.push_back(plan.prefetch_order[next_prefetch_++]);
    }
    const auto in_time = [&](std::size_t k) { return at < plan.evictions[k].back_at; };
    retain(leaves_due_, in_time);
    retain(prefetches_due_, in_time);
  }

  /// The departures due, in the order they came due.
  std::span<const std::size_t> leaves_due() const { return leaves_due_; }
  /// The prefetches due, in the order they came due.
  std::span<const std::size_t> prefetches_due() const { return prefetches_due_; }

  /// Calls `again(k)` once for each due departure, in order, and keeps due
  /// only those for which it returns true (to be tried after the next event).
  template <class Fn>
  void retain_leaves(Fn&& again) {
    retain(leaves_due_, again);
  }
  /// As retain_leaves(), for the due prefetches.
  template <class Fn>
  void retain_prefetches(Fn&& again) {
    retain(prefetches_due_, again);
  }

 private:
  template <class Fn>
  static void retain(std::vector<std::size_t>& due, Fn&& keep) {
    std::size_t kept = 0;
    for (const std::size_t k : due) {
      if (keep(k)) due[kept++] = k;
    }
    due.resize(kept);
  }

  std::size_t next_leave_ = 0;     // the first of plan.evictions not yet due
  std::size_t next_prefetch_ = 0;  // the first of plan.prefetch_order not yet due
  std::vector<std::size_t> leaves_due_;
  std::vector<std::size_t> prefetches_due_;
};

}  // namespace tp
