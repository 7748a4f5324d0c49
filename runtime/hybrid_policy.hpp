#pragma once
// Hybrid (Libra-style greedy refinement), planned once per step over the
// recorded step.
//
// Note [Hybrid plan]
// Every evictable tensor of the recorded step gets an action:
//   1. start: drop everything cheap (recomputable, recompute time <= its swap
//      round trip), swap the rest;
//   2. the planned peak is unmanaged bytes + non-evictable tracked bytes at
//      the recorded peak + the largest working set of one restore: a swapped
//      tensor brings back only itself, a dropped one its recompute chain (the
//      run of consecutive dropped ordinals ending at it, which a replay
//      re-creates together, as in checkpointing);
//   3. while the planned peak passes the budget, the longest chain is broken
//      by switching its member with the least swap penalty (round trip not
//      hidden under its gap) to swap;
//   4. refine: a swapped, recomputable tensor whose recompute time is below
//      its swap penalty goes back to drop if the peak still fits.
// added_time_ns sums recompute times and swap penalties. choose() samples
// candidates like Capuchin and takes the plan's action; with no plan for a
// tensor (no recorded step, or a size mismatch) it behaves as Capuchin.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "runtime/eviction_policy.hpp"

namespace tp {

/// The outcome of Note [Hybrid plan] over one recorded step.
struct hybrid_plan {
  std::vector<eviction_action> actions;  ///< by ordinal (non-evictable: swap)
  std::size_t planned_peak_bytes = 0;
  std::int64_t added_time_ns = 0;
  bool fits = true;  ///< planned_peak_bytes <= budget (true without a budget)
};

/// Thread-safety: none (see eviction_policy).
class hybrid_policy final : public eviction_policy {
 public:
  explicit hybrid_policy(std::size_t sample_size = 32) : k_(sample_size == 0 ? 1 : sample_size) {}
  policy_kind kind() const override { return policy_kind::hybrid; }
  std::optional<eviction_choice> choose(const policy_context& ctx) override;
  void plan_step(const step_record& recorded, const planning_inputs& in) override;

  /// Pure: Note [Hybrid plan] for one recorded step.
  static hybrid_plan make_plan(const step_record& recorded, const planning_inputs& in);
  const hybrid_plan& plan() const { return plan_; }

 private:
  std::size_t k_;
  hybrid_plan plan_;
};

}  // namespace tp
