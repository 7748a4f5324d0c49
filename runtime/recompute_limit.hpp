#pragma once
// tp::recompute_limit: how much recompute one step may take on before a
// policy's drops become swaps.
//
// Note [Recompute limit]
// No policy may recompute more than the step's own compute: left alone,
// DTR's heuristic recomputes many times the step where swapping fits. The
// runtime counts, in the current step, the
// host time spent in recomputes (chains included) plus the recompute costs
// of the tensors dropped in this step and not yet recomputed, each with its
// evicted parents' (what those drops commit the step to; lineage::
// evicted_parents_cost). Once that passes 40% of the previous step's time
// outside recomputes (the first step, whose compute is not known yet, has no
// limit), a policy's drop becomes a swap for the rest of the step: the
// victim is copied out instead, and one that cannot be swapped (the host
// pool is full) is dropped as before. What is already committed, and the
// chains deeper than a parent that it will need, still come on top, so the
// limit is well under the step's compute: 40% keeps the total under it on
// DTR's logs and leaves their figures at the reference's ratios unchanged
// down to 0.3 (measured: docs/decisions.md, "Recompute limit"). Recomputing
// less than that never meets the limit. A recompute-only policy (dtr, Note
// [DTR is recompute only]) has no limit: it is the baseline that recomputes
// whatever DTR's heuristic would, thrash included.

#include <algorithm>
#include <cstdint>

namespace tp {

/// The recompute one step has spent and committed to, against the limit the
/// previous step sets (Note [Recompute limit]). A value with no clock: the
/// caller passes the times in.
///
/// Thread-safety: none; memory_runtime holds one under its lock.
class recompute_limit {
 public:
  /// Host time spent in a recompute this step. The caller counts a thread's
  /// outermost recompute only: nested ones are inside it.
  void spend(std::int64_t ns) { spent_ns_ += ns; }
  /// A drop in this step commits it to `ns` of recompute: the tensor's own
  /// cost and its evicted parents' (lineage::evicted_parents_cost).
  void commit(std::int64_t ns) { committed_ns_ += ns; }
  /// A tensor dropped in this step was recomputed: the `ns` its drop
  /// committed is no longer pending (its time was spend()). Never below 0.
  void settle(std::int64_t ns) { committed_ns_ -= std::min(committed_ns_, ns); }

  /// Whether a drop must become a swap: spent plus committed has passed 40%
  /// of the previous step's compute. Never in the first step.
  bool over() const {
    if (previous_compute_ns_ < 0) return false;  // the first step: its compute is not known yet
    return spent_ns_ + committed_ns_ > previous_compute_ns_ / 10 * 4;
  }

  /// Step boundary: the step that ended took `step_ns`; its compute is that
  /// less the recompute it spent. The new step starts with nothing spent or
  /// committed.
  void end_step(std::int64_t step_ns) {
    previous_compute_ns_ = std::max<std::int64_t>(step_ns - spent_ns_, 0);
    spent_ns_ = 0;
    committed_ns_ = 0;
  }

  std::int64_t spent_ns() const { return spent_ns_; }
  std::int64_t committed_ns() const { return committed_ns_; }
  /// The previous step's time outside recomputes; -1 before the first boundary.
  std::int64_t previous_compute_ns() const { return previous_compute_ns_; }

 private:
  std::int64_t spent_ns_ = 0;       // host time in recomputes this step
  std::int64_t committed_ns_ = 0;   // costs of this step's drops not yet recomputed
  std::int64_t previous_compute_ns_ = -1;
};

}  // namespace tp
