// Note [Step plan]: the planner on recorded steps with known answers.

#include "runtime/step_planner.hpp"

#include <gtest/gtest.h>

#include <vector>

namespace tp {
namespace {

constexpr std::size_t MB = std::size_t{1} << 20;

// Records a step through the real recorder: `layers` activations of `bytes`
// tracked in forward (one every `fwd_ns`, each computed from the previous
// one at `cost_ns`), then accessed in reverse (one every `bwd_ns`) and
// untracked after their use.
step_record chain_step(int layers, std::size_t bytes, std::int64_t fwd_ns, std::int64_t bwd_ns,
                       std::int64_t cost_ns) {
  access_recorder r;
  r.begin_step(0);
  std::int64_t t = 0;
  for (int i = 0; i < layers; ++i) {
    std::vector<std::size_t> parents;
    if (i > 0) parents.push_back(static_cast<std::size_t>(i - 1));
    r.on_track(bytes, cost_ns, true, t, parents);
    t += fwd_ns;
  }
  for (int i = layers - 1; i >= 0; --i) {
    r.on_access(static_cast<std::size_t>(i), t);
    t += bwd_ns;
    r.on_untrack(static_cast<std::size_t>(i), t);
  }
  r.begin_step(t);
  return *r.previous();
}

step_planner_inputs inputs(std::size_t budget, double bytes_per_s = 1e9, std::int64_t latency_ns = 0) {
  step_planner_inputs in;
  in.budget_bytes = budget;
  in.unmanaged_bytes = 0;
  in.copies = copy_cost_model{{.bytes_per_s = bytes_per_s, .latency_ns = latency_ns}};
  return in;
}

std::size_t count(const step_plan& p, eviction_action a) {
  std::size_t n = 0;
  for (const planned_eviction& e : p.evictions) n += e.action == a;
  return n;
}

TEST(StepPlanner, AStepThatFitsGetsNoPlan) {
  const step_record r = chain_step(8, MB, 1'000'000, 2'000'000, 100'000);
  EXPECT_TRUE(make_step_plan(r, inputs(8 * MB)).empty());
  step_planner_inputs none = inputs(0);
  none.budget_bytes.reset();
  EXPECT_TRUE(make_step_plan(r, none).empty());
}

// Long compute, 1 ms copies of 1 MB at 1 GB/s: every swap hides, and
// swapping is cheaper than recomputing (10 ms each).
TEST(StepPlanner, SwapsWhatHidesUnderComputeUntilTheStepFits) {
  const step_record r = chain_step(16, MB, 10'000'000, 20'000'000, 10'000'000);
  const step_plan p = make_step_plan(r, inputs(6 * MB));
  EXPECT_TRUE(p.fits);
  EXPECT_LE(p.planned_peak_bytes, 6 * MB);
  EXPECT_GE(count(p, eviction_action::swap), 10u);
  EXPECT_EQ(count(p, eviction_action::drop), 0u);
  for (const planned_eviction& e : p.evictions) {
    EXPECT_LT(e.leave_at, e.prefetch_at);
    EXPECT_LT(e.prefetch_at, e.back_at);
  }
  EXPECT_EQ(p.prefetch_order.size(), count(p, eviction_action::swap));
}

// Copies of 64 MB at 1 GB/s take 64 ms, far longer than the 1 ms layers:
// nothing can hide, so a cheap recompute is planned instead.
TEST(StepPlanner, DropsWhatCannotHideAndIsCheapToRecompute) {
  const step_record r = chain_step(16, 64 * MB, 1'000'000, 2'000'000, 100'000);
  const step_plan p = make_step_plan(r, inputs(8 * 64 * MB));
  EXPECT_TRUE(p.fits);
  EXPECT_EQ(count(p, eviction_action::swap), 0u);
  EXPECT_GE(count(p, eviction_action::drop), 8u);
  EXPECT_GT(p.added_time_ns, 0);
  for (const planned_eviction& e : p.evictions) EXPECT_LT(e.leave_at, e.back_at);
}

// Issue 32, item 2: the choice between swap and recompute follows the copy
// bandwidth. A GPU-sized step: 24 activations of 32 MiB, forward 0.5 ms and
// backward 1 ms a layer, each recomputed in 0.5 ms, at half its peak. At
// 50 GB/s a 32 MiB copy takes 0.7 ms and hides under the compute between two
// uses; at 8 GB/s it takes 4.2 ms, and recomputing costs less. Between, the
// plan's added time never grows as the bandwidth does, and the step fits.
TEST(StepPlanner, TheChoiceBetweenSwapAndRecomputeFollowsTheBandwidth) {
  const step_record r = chain_step(24, 32 * MB, 500'000, 1'000'000, 500'000);
  const auto plan_at = [&](double gb_per_s) {
    return make_step_plan(r, inputs(12 * 32 * MB, gb_per_s * 1e9, 10'000));
  };
  const step_plan fast = plan_at(50);
  const step_plan slow = plan_at(8);
  EXPECT_GT(count(fast, eviction_action::swap), count(fast, eviction_action::drop));
  EXPECT_GT(count(slow, eviction_action::drop), count(slow, eviction_action::swap));
  std::int64_t previous = INT64_MAX;
  for (const double gb_per_s : {8.0, 12.0, 25.0, 50.0}) {
    SCOPED_TRACE(::testing::Message() << gb_per_s << " GB/s");
    const step_plan p = plan_at(gb_per_s);
    EXPECT_TRUE(p.fits);
    EXPECT_LE(p.planned_peak_bytes, 12 * 32 * MB);
    EXPECT_LE(p.added_time_ns, previous);
    previous = p.added_time_ns;
  }
}

// The same, with the bandwidth measured instead of configured (Note [Copy
// cost model]): configured at 50 GB/s, the copies of the step's 32 MiB
// tensors timed at 8 GB/s one way or the other. A tensor the plan swapped
// is recomputed instead once either direction is measured slow; and prefetches
// are priced by the to_device class alone.
TEST(StepPlanner, TheChoiceBetweenSwapAndRecomputeFollowsTheMeasuredBandwidth) {
  const step_record r = chain_step(24, 32 * MB, 500'000, 1'000'000, 500'000);
  const step_planner_inputs configured = inputs(12 * 32 * MB, 50e9, 10'000);
  const auto measured_slow = [&](copy_direction d) {
    step_planner_inputs in = configured;
    for (int i = 0; i < 8; ++i) in.copies.observe(d, 32 * MB, bandwidth_model{8e9, 10'000}.transfer_ns(32 * MB));
    return make_step_plan(r, in);
  };
  const step_plan fast = make_step_plan(r, configured);
  ASSERT_GT(count(fast, eviction_action::swap), count(fast, eviction_action::drop));
  for (const copy_direction d : {copy_direction::to_host, copy_direction::to_device}) {
    SCOPED_TRACE(static_cast<int>(d));
    const step_plan slow = measured_slow(d);
    EXPECT_GT(count(slow, eviction_action::drop), count(slow, eviction_action::swap));
    std::size_t flipped = 0;
    for (const planned_eviction& f : fast.evictions) {
      if (f.action != eviction_action::swap) continue;
      for (const planned_eviction& s : slow.evictions) flipped += s.ordinal == f.ordinal && s.action == eviction_action::drop;
    }
    EXPECT_GT(flipped, 0u);
  }
}

TEST(StepPlanner, SaysWhenTheStepCannotFit) {
  const step_record r = chain_step(4, MB, 1'000'000, 2'000'000, 0);  // swap only, copies too slow
  step_planner_inputs in = inputs(MB / 2, 1e6);
  const step_plan p = make_step_plan(r, in);
  EXPECT_FALSE(p.fits);
  EXPECT_GT(p.planned_peak_bytes, MB / 2);
}

// The floor is what the device held besides tracked tensors under pressure:
// it leaves less room, so more must go.
TEST(StepPlanner, TheRecordedPressureFloorLeavesLessRoom) {
  step_record r = chain_step(16, MB, 10'000'000, 20'000'000, 10'000'000);
  const step_plan without = make_step_plan(r, inputs(8 * MB));
  r.pressure_floor_bytes = 2 * MB;
  const step_plan with = make_step_plan(r, inputs(8 * MB));
  EXPECT_EQ(with.floor_bytes, 2 * MB);
  EXPECT_GT(with.evictions.size(), without.evictions.size());
  EXPECT_LE(with.planned_peak_bytes, 8 * MB);
}

}  // namespace
}  // namespace tp
