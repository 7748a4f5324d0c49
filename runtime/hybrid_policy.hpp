#pragma once
// Hybrid: plan the step from the one recorded (Note [Step plan] in
// step_planner.hpp: swap what hides under compute, drop what is cheap to
// recompute, greedily, until the step fits), let the runtime carry the plan
// out ahead of need (Note [Carrying out a plan] in runtime_plan.cpp), and
// fall back to a score for what the plan did not foresee.
//
// Note [Hybrid fallback]
// A reclaim the plan did not avoid (the first step, a changed step, a
// misprediction) samples k candidates and prices each by the cheaper of
//   swap: its offload in full, plus the part of its prefetch not hidden
//         under the time from the offload's end to its next use in the
//         recorded step (all of it when unknown), plus a sixteenth of the
//         round trip so that free swaps still prefer fewer bytes on the wire
//         (copies as measured: Note [Copy cost model]). A reclaim runs
//         because an allocation needs the bytes now, and a swapped block is
//         reusable only once its offload has read it: the allocation waits
//         for the copy, while a drop frees at once. Priced as a round trip
//         hidden under the gap, a swap looked free whenever its next use was
//         far, and on a slow link each such reclaim waited for its copies
//         (measured: docs/decisions.md, "A reclaim waits for its swaps");
//   drop: its recompute time plus its evicted neighbourhood (DTR's price,
//         Note [Evicted neighbourhood]);
// divided by bytes x staleness, as DTR does; the victim takes its cheaper
// action.
//
// Note [Replanning]
// Planning is O(events x live tensors), a small part of a step (measured:
// docs/decisions.md, "Replanning"), but not free. A step that ran under the plan with no reclaim (pressure_floor_bytes 0),
// with the same tensors (count and sizes), events and budget as the step the
// plan was made from, and copies that cost what they cost then (no size
// class of the copy cost model moved by more than replan_ratio), keeps the
// plan: the steady state plans once. A reclaim, a new shape, a new budget or
// copies timed faster or slower make a new plan from the step just recorded:
// the first plan is made from the seed, before many copies have been timed.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/eviction_policy.hpp"
#include "runtime/step_planner.hpp"

namespace tp {

/// Thread-safety: none (see eviction_policy).
class hybrid_policy final : public eviction_policy {
 public:
  explicit hybrid_policy(std::size_t sample_size = 32) : k_(sample_size == 0 ? 1 : sample_size) {}
  policy_kind kind() const override { return policy_kind::hybrid; }
  std::optional<eviction_choice> choose(const policy_context& ctx) override;
  void plan_step(const step_record& recorded, const planning_inputs& in) override;
  const step_plan* plan() const override { return &plan_; }

  /// Note [Hybrid fallback]: the cheaper action for t and its price (ns).
  static std::pair<eviction_action, double> price(const managed_tensor& t, const policy_context& ctx);

 private:
  static bool same_shape(const step_record& r, const std::vector<std::size_t>& shape);

  /// Note [Replanning]: how far a measured copy cost may move before the
  /// plan is made again.
  static constexpr double replan_ratio = 1.25;

  std::size_t k_;
  step_plan plan_;
  std::optional<std::size_t> planned_budget_;
  copy_cost_model planned_copies_;
  std::vector<std::size_t> planned_from_;  // tensor sizes, then the event count
};

}  // namespace tp
