// The resident floor (Note [Resident floor] in runtime/resident_floor.hpp):
// the class alone, then as the runtime samples it over the real caching
// allocator and the simulated device.

#include "runtime/resident_floor.hpp"

#include <gtest/gtest.h>

#include <optional>

#include "runtime/runtime.hpp"
#include "runtime_test_support.hpp"

namespace tp {
namespace {

using namespace tp::testing;

TEST(ResidentFloor, IsTheHighWaterMarkLessWhatWasEvictableAllThrough) {
  resident_floor f;
  f.sample(100, 100, 40, 40, 0);  // first sample: 100 - 40
  EXPECT_EQ(f.peak(), 60u);
  f.sample(150, 150, 90, 90, 0);  // min(40 after the last event, 90 before this one): 150 - 40
  EXPECT_EQ(f.peak(), 110u);
  f.sample(120, 120, 10, 10, 0);  // 120 - 10, below the peak
  EXPECT_EQ(f.peak(), 110u);
  f.sample(5, 5, 10, 10, 0);      // never below zero
  EXPECT_EQ(f.peak(), 110u);
}

TEST(ResidentFloor, ATensorAccessedNowWasSpareAtTheHighWaterMomentButNotAfter) {
  resident_floor f;
  f.sample(100, 100, 50, 50, 0);  // 50 evictable: x (30) and y (20)
  EXPECT_EQ(f.peak(), 50u);
  // An operator peaked at 160 and freed 40 of it; then x is accessed: it
  // waited through the peak (evictable before this event), so 160 - 50, and
  // it is in use now: 120 allocated less y.
  f.sample(160, 120, 50, 20, 0);
  EXPECT_EQ(f.peak(), 110u);
  // The next operator peaks with x in use: x is not spare in this interval.
  f.sample(130, 90, 20, 20, 0);
  EXPECT_EQ(f.peak(), 110u);  // 130 - 20
  f.sample(150, 90, 50, 50, 0);  // y and a tensor tracked since: min(20, 50)
  EXPECT_EQ(f.peak(), 130u);
}

TEST(ResidentFloor, WhatIsAllocatedAfterTheEventCounts) {
  resident_floor f;
  f.sample(100, 100, 60, 60, 0);
  f.sample(100, 100, 60, 0, 0);  // everything now in use
  EXPECT_EQ(f.peak(), 100u);
}

TEST(ResidentFloor, AStepBoundaryKeepsTheLastStepsPeakUntilTheNextExceedsIt) {
  resident_floor f;
  f.sample(100, 100, 0, 0, 0);
  f.end_step();
  EXPECT_EQ(f.peak(), 100u);
  f.sample(50, 50, 0, 0, 0);
  EXPECT_EQ(f.peak(), 100u);
  f.end_step();
  EXPECT_EQ(f.peak(), 50u);  // the last completed step's
  f.sample(70, 70, 0, 0, 0);
  EXPECT_EQ(f.peak(), 70u);
}

TEST(ResidentFloor, TheLowestCountsEachStepFromWhatItHeldAtItsFirstEvent) {
  resident_floor f;
  f.sample(40, 40, 0, 0, 0);  // the first step begins holding 40
  f.sample(100, 60, 0, 0, 0);
  EXPECT_EQ(f.lowest(), 100u);  // the first step, in progress: 40 + 60
  f.end_step();
  f.sample(40, 40, 0, 0, 0);
  f.sample(130, 60, 0, 0, 0);  // a sample above what the step needs: 40 + 90
  EXPECT_EQ(f.lowest(), 100u);
  EXPECT_EQ(f.peak(), 130u);
  f.end_step();
  f.sample(40, 40, 0, 0, 0);
  f.sample(90, 60, 0, 0, 0);
  EXPECT_EQ(f.lowest(), 90u);  // 40 + 50, the least beyond a start so far
}

TEST(ResidentFloor, AStepThatBeginsHoldingMoreNeedsItsStartMore) {
  // zero_grad() just before backward(): from the second iteration on, the
  // gradients and the momentum live through the forward. The first
  // iteration's smaller floor says nothing of the second's.
  resident_floor f;
  f.sample(48, 48, 0, 0, 0);   // weights and the batch
  f.sample(88, 70, 0, 0, 0);   // its backward's peak: 48 + 40
  f.end_step();
  f.sample(134, 134, 0, 0, 0);  // weights, gradients, momentum and the batch
  f.sample(163, 150, 0, 0, 0);  // the stem's convolution: 134 + 29
  EXPECT_EQ(f.lowest(), 163u);  // not the first iteration's 88
}

TEST(ResidentFloor, TheLowestAddsWhatTheStepsStartLeftStranded) {
  // A budget caps mapped bytes: the free pieces beside what a step begins
  // with stay mapped through it, and a large request maps more beside them.
  resident_floor f;
  EXPECT_TRUE(f.at_step_start());
  f.sample(134, 134, 0, 0, 13);  // weights, gradients, momentum, 13 free beside them
  EXPECT_FALSE(f.at_step_start());
  f.sample(163, 150, 0, 0, 99);  // not a step's first event: not read
  EXPECT_EQ(f.lowest(), 176u);   // 134 + 13 + 29
  EXPECT_EQ(f.stranded_at_start(), 13u);
  EXPECT_EQ(f.peak(), 163u);     // allocated bytes, as before
  f.end_step();
  EXPECT_TRUE(f.at_step_start());
  f.sample(134, 134, 0, 0, 2);  // the next step begins packed tighter
  f.sample(163, 150, 0, 0, 0);
  EXPECT_EQ(f.lowest(), 165u);  // 134 + 2 + 29
  EXPECT_EQ(f.stranded_at_start(), 2u);
}

TEST(ResidentFloor, RuntimeCountsWhatIsNotEvictableAndWhatIsInUse) {
  runtime_rig rig({.expandable = true});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, {});
  void* weights = rig.alloc.allocate(8 * MiB, rig.compute);  // not tracked: never evictable
  // Two operators' outputs, each tracked as it is made.
  fake_binding x(rig, 4 * MiB, 1);
  const tensor_id tx = rt.track(x, x.bytes(), rig.compute, 0);
  fake_binding y(rig, 4 * MiB, 2);
  const tensor_id ty = rt.track(y, y.bytes(), rig.compute, 0);
  rt.step();
  EXPECT_GE(rt.floor_bytes(), 8 * MiB);
  EXPECT_LT(rt.floor_bytes(), 16 * MiB);  // x and y could be evicted
  // A backward-like use: a gradient (not tracked) appears, x is used.
  void* grad = rig.alloc.allocate(4 * MiB, rig.compute);
  rt.access(tx);
  EXPECT_GE(rt.floor_bytes(), 16 * MiB);  // weights, the gradient and x in use
  EXPECT_LT(rt.floor_bytes(), 20 * MiB);  // y waits
  EXPECT_EQ(rt.stats().floor_bytes, rt.floor_bytes());
  rig.alloc.deallocate(grad);
  rt.untrack(tx);
  rt.untrack(ty);
  rig.alloc.deallocate(weights);
}

TEST(ResidentFloor, RuntimeCountsTheStrandedBytesAtTheStepsStart) {
  runtime_rig rig({.expandable = true});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, {});
  // 3 MiB blocks, then the middle ones freed: each hole shares a granule
  // with a block in use on either side.
  std::vector<void*> blocks;
  for (int i = 0; i < 6; ++i) blocks.push_back(rig.alloc.allocate(3 * MiB, rig.compute));
  for (std::size_t i : {1u, 3u}) rig.alloc.deallocate(std::exchange(blocks[i], nullptr));
  const std::size_t stranded = rig.alloc.stranded_bytes();
  EXPECT_GT(stranded, 0u);
  fake_binding x(rig, 4 * MiB, 1);
  const tensor_id tx = rt.track(x, x.bytes(), rig.compute, 0);
  EXPECT_EQ(rt.floor_stranded_bytes(), stranded);
  const auto allocated = static_cast<std::size_t>(rig.alloc.stats().allocated_bytes.all().current);
  EXPECT_GE(rt.lowest_floor_bytes(), allocated - 4 * MiB + stranded);
  EXPECT_EQ(rt.lowest_floor_bytes() % rig.alloc.granularity(), 0u);  // a budget holds whole granules
  EXPECT_EQ(rig.alloc.granularity(), 2 * MiB);
  rt.untrack(tx);
  for (void* p : blocks) rig.alloc.deallocate(p);
}

// Weights (8 MiB), then three operators' outputs of 4 MiB: x and y can only
// be swapped (recompute cost 0), z can be recomputed. The floor of the step.
std::size_t floor_of_three_outputs(std::optional<std::size_t> host_budget) {
  runtime_rig rig({.host_budget = host_budget, .expandable = true});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, {});
  void* weights = rig.alloc.allocate(8 * MiB, rig.compute);
  fake_binding x(rig, 4 * MiB, 1);
  const tensor_id tx = rt.track(x, x.bytes(), rig.compute, 0);
  fake_binding y(rig, 4 * MiB, 2);
  const tensor_id ty = rt.track(y, y.bytes(), rig.compute, 0);
  fake_binding z(rig, 4 * MiB, 3);
  const tensor_id tz = rt.track(z, z.bytes(), rig.compute, 1000);
  rt.step();
  const std::size_t floor = rt.floor_bytes();
  rt.untrack(tz);
  rt.untrack(ty);
  rt.untrack(tx);
  rig.alloc.deallocate(weights);
  return floor;
}

TEST(ResidentFloor, WhatCannotBeRecomputedIsSpareOnlyAsFarAsTheHostPoolHasRoom) {
  // While z is made, x and y wait: both can be swapped to an uncapped pool
  // (the weights and z stay), one of them to a pool that refuses past 4 MiB.
  EXPECT_EQ(floor_of_three_outputs(std::nullopt), 12 * MiB);
  EXPECT_EQ(floor_of_three_outputs(4 * MiB), 16 * MiB);
}

TEST(ResidentFloor, ATensorTheProgramHoldsIsNotSpareWhileNoBudgetIsSet) {
  // The input batch: saved by the first operator, held by the program all
  // through the forward. Evicting it would free nothing.
  runtime_rig rig({.expandable = true});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, {});
  fake_binding batch(rig, 4 * MiB, 1);
  batch.shared = true;
  const tensor_id tb = rt.track(batch, batch.bytes(), rig.compute, 0);
  fake_binding out(rig, 8 * MiB, 2);  // the first operator's output, saved by the next
  const tensor_id to = rt.track(out, out.bytes(), rig.compute, 0);
  EXPECT_GE(rt.floor_bytes(), 12 * MiB);  // both were in memory at the second event; neither could go
  batch.shared = false;  // the program let go of it
  fake_binding next(rig, 8 * MiB, 3);
  const tensor_id tn = rt.track(next, next.bytes(), rig.compute, 0);
  EXPECT_LT(rt.floor_bytes(), 20 * MiB);  // the batch was spare at this event
  rt.untrack(tn);
  rt.untrack(to);
  rt.untrack(tb);
}

// Note [A rerun's working set]: one segment's forward, measured, and then a
// backward use of its 4 MiB output x. The forward also holds an 8 MiB
// temporary, before x is made or after it. In the backward a 4 MiB gradient is
// held while x is used. Returns the floor.
struct rerun_case {
  policy_kind policy = policy_kind::dtr;
  bool temporary_after_x = false;
  bool stops_at_x = false;     // the rerun stops once the forward has made x
  bool x_is_an_input = false;  // x is an input of the segment (segment_input_saved)
};

std::size_t floor_with_a_rerun(rerun_case c) {
  runtime_rig rig({.expandable = true});
  memory_runtime::options o;
  o.policy = c.policy;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  rt.segment_started();
  const auto temporary = [&] { rig.alloc.deallocate(rig.alloc.allocate(8 * MiB, rig.compute)); };
  void* held = c.temporary_after_x ? nullptr : rig.alloc.allocate(8 * MiB, rig.compute);
  fake_binding x(rig, 4 * MiB, 1);
  const tensor_id tx = rt.track(x, x.bytes(), rig.compute, 0);
  if (c.x_is_an_input) rt.segment_input_saved();
  if (held != nullptr) rig.alloc.deallocate(held);
  if (c.temporary_after_x) temporary();
  const std::size_t growth = rt.segment_growth();
  // Before x: the temporary and x at once. After x: the temporary of the
  // operator that saved x, which holds it (Note [A saved operand is held
  // while its operator runs]), unless x is an input, which the caller counts.
  EXPECT_EQ(growth, c.temporary_after_x && c.x_is_an_input ? 8 * MiB : 12 * MiB);
  rt.set_recompute_cost(tx, 1000, growth, c.stops_at_x);
  void* grad = rig.alloc.allocate(4 * MiB, rig.compute);
  rt.access(tx);
  const std::size_t floor = rt.floor_bytes();
  rig.alloc.deallocate(grad);
  rt.untrack(tx);
  return floor;
}

TEST(ResidentFloor, AUseThatARecomputeOnlyPolicyWouldRerunCountsTheRerunsWorkingSet) {
  // lru would swap x back: the forward's 12 MiB is the most held. dtr would
  // drop x and rerun its segment while the gradient is held: 4 + 12 MiB.
  EXPECT_EQ(floor_with_a_rerun({.policy = policy_kind::lru}), 12 * MiB);
  EXPECT_EQ(floor_with_a_rerun({.policy = policy_kind::dtr}), 16 * MiB);
}

TEST(ResidentFloor, ARerunThatStopsAtItsTensorHoldsOnlyWhatTheForwardHeldUntilThen) {
  // The temporary comes after x: a whole rerun holds it and x (4 + 12 MiB
  // beside the gradient), one that stops at x only x (4 + 4 MiB).
  EXPECT_EQ(floor_with_a_rerun({.temporary_after_x = true}), 16 * MiB);
  EXPECT_EQ(floor_with_a_rerun({.temporary_after_x = true, .stops_at_x = true}), 8 * MiB);
  EXPECT_EQ(floor_with_a_rerun({.stops_at_x = true}), 16 * MiB);  // the temporary came first
}

TEST(ResidentFloor, ATensorSavedJustBeforeAnAllocationIsHeldThroughIt) {
  // Note [A saved operand is held while its operator runs]: autograd saves an
  // operator's inputs before the operator allocates, so a rerun holds x and
  // the temporary at once (4 + 12 MiB beside the gradient); an input of the
  // segment is counted once, by the caller's rerun_bytes (4 + 8 MiB).
  EXPECT_EQ(floor_with_a_rerun({.temporary_after_x = true}), 16 * MiB);
  EXPECT_EQ(floor_with_a_rerun({.temporary_after_x = true, .x_is_an_input = true}), 12 * MiB);
}

TEST(ResidentFloor, ASegmentsMarksLeaveTheHighWaterToTheNextSample) {
  runtime_rig rig({.expandable = true});
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, {});
  rig.alloc.deallocate(rig.alloc.allocate(16 * MiB, rig.compute));  // an operator's temporary
  const std::size_t mark = rt.segment_started();
  EXPECT_EQ(mark, 0u);  // nothing held when the segment began
  fake_binding x(rig, 4 * MiB, 1);
  const tensor_id tx = rt.track(x, x.bytes(), rig.compute, 0);
  EXPECT_EQ(rt.floor_bytes(), 16 * MiB);  // the temporary, taken by segment_started, still counts
  EXPECT_EQ(rt.segment_growth(), 4 * MiB);  // but not in the segment, which began after it
  rt.untrack(tx);
}

}  // namespace
}  // namespace tp
