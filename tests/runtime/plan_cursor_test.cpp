// Note [Carrying out a plan]: which plan entries are due after each event,
// on a plan written by hand.

#include "runtime/plan_cursor.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace tp {
namespace {

using due = std::vector<std::size_t>;

due leaves(const plan_cursor& c) { return {c.leaves_due().begin(), c.leaves_due().end()}; }
due prefetches(const plan_cursor& c) { return {c.prefetches_due().begin(), c.prefetches_due().end()}; }

planned_eviction swap(std::size_t ordinal, std::size_t leave_at, std::size_t prefetch_at, std::size_t back_at) {
  return {.ordinal = ordinal, .action = eviction_action::swap, .leave_at = leave_at, .prefetch_at = prefetch_at,
          .back_at = back_at};
}

// Three swaps; the second's prefetch comes before the first's.
step_plan three_swaps() {
  step_plan p;
  p.evictions = {swap(0, 1, 8, 10), swap(1, 2, 6, 7), swap(2, 2, 9, 12)};
  p.prefetch_order = {1, 0, 2};
  return p;
}

TEST(PlanCursor, NothingIsDueBeforeItsEvent) {
  const step_plan p = three_swaps();
  plan_cursor c;
  c.advance(p, 0);
  EXPECT_EQ(leaves(c), due{});
  EXPECT_EQ(prefetches(c), due{});
}

TEST(PlanCursor, DeparturesComeDueAtTheirLeaveAtInPlanOrder) {
  const step_plan p = three_swaps();
  plan_cursor c;
  c.advance(p, 1);
  EXPECT_EQ(leaves(c), due{0});
  c.advance(p, 2);
  EXPECT_EQ(leaves(c), (due{0, 1, 2}));  // not carried out: still due
}

TEST(PlanCursor, PrefetchesComeDueByPrefetchOrder) {
  const step_plan p = three_swaps();
  plan_cursor c;
  c.advance(p, 6);
  EXPECT_EQ(prefetches(c), due{1});
  c.advance(p, 9);  // several events at once: 1 is past its use at 7
  EXPECT_EQ(prefetches(c), (due{0, 2}));
}

TEST(PlanCursor, WhatWasCarriedOutIsNoLongerDue) {
  const step_plan p = three_swaps();
  plan_cursor c;
  c.advance(p, 2);
  std::vector<std::size_t> tried;
  c.retain_leaves([&](std::size_t k) {
    tried.push_back(k);
    return k == 1;  // only 1 could not leave yet (pinned)
  });
  EXPECT_EQ(tried, (due{0, 1, 2}));
  EXPECT_EQ(leaves(c), due{1});
  c.advance(p, 3);
  EXPECT_EQ(leaves(c), due{1});  // tried again after the next event
}

TEST(PlanCursor, AnEntryIsDueOnlyUntilItsUse) {
  const step_plan p = three_swaps();
  plan_cursor c;
  c.advance(p, 2);
  c.advance(p, 6);
  EXPECT_EQ(leaves(c), (due{0, 1, 2}));
  EXPECT_EQ(prefetches(c), due{1});
  c.advance(p, 7);  // 1 is used at 7: too late to leave or come back
  EXPECT_EQ(leaves(c), (due{0, 2}));
  EXPECT_EQ(prefetches(c), due{});
  c.retain_prefetches([](std::size_t) { return true; });
  c.advance(p, 10);
  EXPECT_EQ(leaves(c), due{2});
  EXPECT_EQ(prefetches(c), due{2});
}

TEST(PlanCursor, EachEntryComesDueOnce) {
  const step_plan p = three_swaps();
  plan_cursor c;
  c.advance(p, 2);
  c.retain_leaves([](std::size_t) { return false; });
  c.advance(p, 3);
  c.advance(p, 4);
  EXPECT_EQ(leaves(c), due{});
}

TEST(PlanCursor, ResetStartsTheStepAgain) {
  const step_plan p = three_swaps();
  plan_cursor c;
  c.advance(p, 9);
  c.retain_leaves([](std::size_t) { return false; });
  c.reset();
  EXPECT_EQ(leaves(c), due{});
  EXPECT_EQ(prefetches(c), due{});
  c.advance(p, 2);
  EXPECT_EQ(leaves(c), (due{0, 1, 2}));
}

TEST(PlanCursor, AnEmptyPlanHasNothingDue) {
  plan_cursor c;
  c.advance(step_plan{}, 100);
  EXPECT_EQ(leaves(c), due{});
  EXPECT_EQ(prefetches(c), due{});
}

}  // namespace
}  // namespace tp
