// Note [Budget floor]
// A budget the steps cannot fit in should fail at once, with the figures a
// person needs, not after a long run of evictions (or a failure in the middle
// of a step). At the first step boundary of a ratio budget the session knows
// two lower bounds on any workable budget: the bytes still reserved once the
// step has ended and the cache is released (weights, gradients, optimizer
// state; with expandable segments their granules, no more), and the step's
// resident floor (Note [Resident floor] in runtime/resident_floor.hpp): the
// most it held at once that no eviction could give back, which adds the
// activation gradients in flight and the operands of the operator running,
// and the free bytes that what the step began with keeps mapped (a budget
// caps mapped bytes).
// A ratio that resolves below the larger of the two is refused with both
// figures and the smallest ratio that could work. Where the ratio is
// measured over several iterations (Note [A ratio is a share of a steady
// iteration] in budget_api.hpp), the floor is the smallest of theirs: a
// sample can come out above what a step needs (resident_floor::lowest), each
// step counted from what it held at its start: a first iteration without
// the optimizer's state holds less than the steady one. The figure is meant
// as a prediction both ways, a refused ratio cannot work and the ratio named
// does (tests/python/test_floor_prediction.py, test_budget_fuzz.py, whose
// accepted budgets must all train). Where it has failed (docs/decisions.md,
// "Resident floor"): free pieces of granules that grew as the budget moved
// small tensors about, and swaps that a capped host pool could not take; the
// allocator's out-of-memory message then says what stranded the memory.

#include "hooks/budget/budget_floor.hpp"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <string>

#include "core/errors.hpp"

namespace tp::hooks {
namespace {

// hooks/ formats without fmt: torch's bundled fmt headers come first on the
// include path here, without their library.
std::string mib(std::size_t bytes) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f MiB", static_cast<double>(bytes) / (1 << 20));
  return buf;
}

std::string fixed(double x, int digits) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.*f", digits, x);
  return buf;
}

// The ratio to two decimals, rounded up: a budget of the ratio named is at
// least the bytes it stands for (less a rounding error of x * 100).
std::string ratio_up(double x) { return fixed(std::ceil(x * 100 - 1e-9) / 100, 2); }

}  // namespace

// The step ran within its peak, so the peak is always a budget that works:
// a step floor above it (the stranded bytes counted at the step's start were
// filled by small requests, and the sum rounded up to whole granules; a
// program whose state is all small tensors) is capped there. Before, such a
// program (an MLP of 6 MiB, manage:all) was refused at every ratio, 1.0
// included, naming "ratio 1.34 of the peak".
std::size_t smallest_workable_budget(const budget_floor_figures& f) noexcept {
  const std::size_t step = f.peak > 0 ? std::min(f.step_floor, f.peak) : f.step_floor;
  return std::max(f.between_steps, step);
}

void check_budget_floor(std::size_t budget, const budget_floor_figures& f) {
  const std::size_t floor = smallest_workable_budget(f);
  if (budget >= floor) return;
  const double peak = f.peak > 0 ? static_cast<double>(f.peak) : 1.0;
  throw out_of_memory(
      "tensorpager: Budget: ratio " + fixed(f.ratio, 2) + " of the measured peak (" + mib(f.peak) +
      " reserved) is " + mib(budget) + ", below what the steps need whatever is evicted: " + mib(f.between_steps) +
      " stay reserved between steps (weights, gradients, optimizer state), and a step held " +
      mib(f.step_floor) +
      " at once that no eviction could give back (those, activation gradients in flight, an operator's "
      "operands" +
      (f.stranded > 0 ? ", and " + mib(f.stranded) + " free beside what it began with, in granules no unmap can give back"
                      : std::string()) +
      (f.peak > 0 && f.step_floor > f.peak ? "; an estimate that the peak the step ran in caps" : std::string()) +
      "). The smallest budget that could work is at least " +
      mib(floor) + " (ratio " + ratio_up(static_cast<double>(floor) / peak) +
      " of the peak): the budget is refused");
}

}  // namespace tp::hooks
