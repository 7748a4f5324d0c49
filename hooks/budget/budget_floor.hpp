#pragma once
// The check that refuses, at the first step boundary, a budget no eviction
// can meet (Note [Budget floor] in budget_floor.cpp). No torch.

#include <cstddef>

namespace tp::hooks {

/// What the first step of a ratio budget (Note [Ratio budgets]) measured.
struct budget_floor_figures {
  double ratio = 1.0;             ///< the ratio asked for
  std::size_t peak = 0;           ///< the first step's peak reserved bytes
  std::size_t between_steps = 0;  ///< reserved after the step, its cache released
  std::size_t step_floor = 0;     ///< memory_runtime::lowest_floor_bytes() (Note [Resident floor])
  std::size_t stranded = 0;       ///< memory_runtime::floor_stranded_bytes(): of step_floor
};

/// The smallest budget the figures allow: what stays between steps, or what
/// the step held that nothing could evict, whichever is more.
std::size_t smallest_workable_budget(const budget_floor_figures& f) noexcept;

/// Throws tp::out_of_memory naming the figures when `budget` is below
/// smallest_workable_budget(f). Pure otherwise.
void check_budget_floor(std::size_t budget, const budget_floor_figures& f);

}  // namespace tp::hooks
