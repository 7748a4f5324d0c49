// Note [Recompute limit]: the rule on its own, without a runtime.

#include "runtime/recompute_limit.hpp"

#include <gtest/gtest.h>

namespace tp {
namespace {

TEST(RecomputeLimit, TheFirstStepHasNoLimit) {
  recompute_limit l;
  l.spend(1'000'000'000);
  l.commit(1'000'000'000);
  EXPECT_FALSE(l.over());
  EXPECT_EQ(l.previous_compute_ns(), -1);
}

TEST(RecomputeLimit, OverOncePastFortyPercentOfThePreviousStep) {
  recompute_limit l;
  l.end_step(1000);
  l.spend(400);
  EXPECT_FALSE(l.over());  // at the limit: not past it
  l.spend(1);
  EXPECT_TRUE(l.over());
}

TEST(RecomputeLimit, ThePreviousStepsOwnComputeExcludesItsRecomputes) {
  recompute_limit l;
  l.end_step(100);     // the first step: no limit
  l.spend(200);
  l.end_step(1000);    // 800 of compute: a limit of 320, not 400
  EXPECT_EQ(l.previous_compute_ns(), 800);
  l.spend(320);
  EXPECT_FALSE(l.over());
  l.spend(1);
  EXPECT_TRUE(l.over());
}

TEST(RecomputeLimit, CommittedCostsCount) {
  recompute_limit l;
  l.end_step(1000);
  l.commit(300);
  l.spend(100);
  EXPECT_FALSE(l.over());
  l.commit(1);
  EXPECT_TRUE(l.over());
  l.settle(1);  // the drop was recomputed: its time is in spend() now
  EXPECT_FALSE(l.over());
}

TEST(RecomputeLimit, SettlingNeverGoesBelowNothingCommitted) {
  recompute_limit l;
  l.end_step(1000);
  l.commit(10);
  l.settle(50);
  EXPECT_EQ(l.committed_ns(), 0);
  l.spend(400);
  EXPECT_FALSE(l.over());
}

TEST(RecomputeLimit, ABoundaryStartsTheCountAfresh) {
  recompute_limit l;
  l.end_step(1000);
  l.spend(300);
  l.commit(300);
  EXPECT_TRUE(l.over());
  l.end_step(2000);  // 1700 of compute
  EXPECT_EQ(l.spent_ns(), 0);
  EXPECT_EQ(l.committed_ns(), 0);
  EXPECT_FALSE(l.over());
  EXPECT_EQ(l.previous_compute_ns(), 1700);
}

TEST(RecomputeLimit, AStepThatWasAllRecomputeAllowsNone) {
  recompute_limit l;
  l.spend(500);
  l.end_step(400);  // shorter than its recomputes (clock granularity): no compute, not negative
  EXPECT_EQ(l.previous_compute_ns(), 0);
  EXPECT_FALSE(l.over());
  l.commit(1);
  EXPECT_TRUE(l.over());
}

}  // namespace
}  // namespace tp
