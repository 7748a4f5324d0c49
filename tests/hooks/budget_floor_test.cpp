// Note [Budget floor] in hooks/budget/budget_floor.cpp: a ratio budget below
// what no eviction can give back is refused with the figures.

#include "hooks/budget/budget_floor.hpp"

#include <gtest/gtest.h>

#include <string>

#include "core/errors.hpp"

namespace tp::hooks {
namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// The message check_budget_floor refuses budget with; a failure where it accepts it.
std::string refusal(std::size_t budget, const budget_floor_figures& f) {
  try {
    check_budget_floor(budget, f);
  } catch (const out_of_memory& e) {
    return e.what();
  }
  ADD_FAILURE() << "expected tp::out_of_memory for a budget of " << budget << " B";
  return {};
}

TEST(BudgetFloor, SmallestWorkableBudgetIsTheLargerLowerBound) {
  EXPECT_EQ(smallest_workable_budget({0.5, 400 * MiB, 90 * MiB, 240 * MiB}), 240 * MiB);
  EXPECT_EQ(smallest_workable_budget({0.5, 400 * MiB, 300 * MiB, 240 * MiB}), 300 * MiB);
}

TEST(BudgetFloor, AStepFloorAboveThePeakIsCappedAtThePeakWhichTheStepRanIn) {
  // Measured: an MLP whose state is all small tensors, 6 MiB peak, a step floor of 8 MiB
  // (1.4 MiB stranded at its start, rounded up to granules); every ratio was refused, 1.0 included.
  EXPECT_EQ(smallest_workable_budget({1.0, 6 * MiB, 4 * MiB, 8 * MiB, 2 * MiB}), 6 * MiB);
  EXPECT_NO_THROW(check_budget_floor(6 * MiB, {1.0, 6 * MiB, 4 * MiB, 8 * MiB, 2 * MiB}));
  const std::string msg = refusal(3 * MiB, {0.5, 6 * MiB, 4 * MiB, 8 * MiB, 2 * MiB});
  EXPECT_NE(msg.find("6.0 MiB (ratio 1.00 of the peak)"), std::string::npos) << msg;
  EXPECT_NE(msg.find("an estimate that the peak the step ran in caps"), std::string::npos) << msg;
}

TEST(BudgetFloor, AcceptsABudgetAtOrAboveTheFloor) {
  EXPECT_NO_THROW(check_budget_floor(240 * MiB, {0.6, 400 * MiB, 90 * MiB, 240 * MiB}));
  EXPECT_NO_THROW(check_budget_floor(400 * MiB, {1.0, 400 * MiB, 90 * MiB, 0}));
}

TEST(BudgetFloor, RefusesABudgetBelowTheFloorNamingTheFigures) {
  const std::string msg = refusal(120 * MiB, {0.3, 400 * MiB, 90 * MiB, 240 * MiB});
  EXPECT_NE(msg.find("ratio 0.30"), std::string::npos) << msg;
  EXPECT_NE(msg.find("120.0 MiB"), std::string::npos) << msg;        // the budget
  EXPECT_NE(msg.find("90.0 MiB stay reserved"), std::string::npos) << msg;
  EXPECT_NE(msg.find("240.0 MiB (ratio 0.60 of the peak)"), std::string::npos) << msg;  // what could work
}

TEST(BudgetFloor, TheRatioItNamesIsRoundedUpSoThatItWorks) {
  const std::string msg = refusal(100 * MiB, {0.25, 1000 * MiB, 90 * MiB, 301 * MiB});  // 0.301 of the peak
  EXPECT_NE(msg.find("(ratio 0.31 of the peak)"), std::string::npos) << msg;
  EXPECT_EQ(msg.find("granules"), std::string::npos) << msg;  // nothing stranded: not mentioned
}

TEST(BudgetFloor, NamesTheStrandedBytesItCounts) {
  const std::string msg = refusal(120 * MiB, {0.3, 400 * MiB, 90 * MiB, 240 * MiB, 13 * MiB});
  EXPECT_NE(msg.find("13.0 MiB free beside what it began with"), std::string::npos) << msg;
}

}  // namespace
}  // namespace tp::hooks
