// The recorded step (Note [Step plan] in runtime/step_planner.hpp): the
// access recorder, and what the runtime does with the step before: offload
// ahead of a recorded peak, prefetch ahead of the next use. The same
// executable as runtime_test.cpp.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/runtime.hpp"
#include "runtime_test_support.hpp"

namespace tp {
namespace {

using namespace tp::testing;

TEST(AccessRecorder, PrefetchDistanceGrowsOnStallsAndShrinksWhenIdle) {
  access_recorder r({.initial_distance = 2, .max_distance = 16, .idle_threshold_ns = 100});
  EXPECT_EQ(r.prefetch_distance(), 2u);
  r.on_stall();
  EXPECT_EQ(r.prefetch_distance(), 4u);
  r.on_stall();
  r.on_stall();
  r.on_stall();
  EXPECT_EQ(r.prefetch_distance(), 16u);
  r.on_prefetch_idle(50);
  EXPECT_EQ(r.prefetch_distance(), 16u);
  r.on_prefetch_idle(500);
  EXPECT_EQ(r.prefetch_distance(), 15u);
}

TEST(AccessRecorder, RecordsOneStepAndFindsNextUses) {
  access_recorder r;
  r.begin_step(1000);
  const std::size_t a = r.on_track(10, 5, true, 1000);
  const std::size_t b = r.on_track(20, 0, true, 1100);
  r.on_access(b, 1200);
  r.on_access(a, 1300);
  r.on_untrack(a, 1400);
  r.begin_step(2000);
  const step_record* prev = r.previous();
  ASSERT_NE(prev, nullptr);
  EXPECT_EQ(prev->peak_live_bytes, 30u);
  EXPECT_EQ(prev->events.size(), 5u);
  EXPECT_EQ(prev->next_use_after(a, 0), 300);
  EXPECT_FALSE(prev->next_use_after(a, 300).has_value());
  EXPECT_TRUE(prev->matches(b, 20));
  EXPECT_FALSE(prev->matches(b, 21));
  EXPECT_EQ(prev->duration_ns, 1000);
}

/// Four steps of eight 4 MiB tensors (tracked in order, used in reverse,
/// untracked), with a budget of `ratio` of the first step's peak reserved
/// bytes from the second step on; the runtime's counters after them.
runtime_stats run_steps_under(double ratio) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, {});
  for (int s = 0; s < 4; ++s) {
    if (s == 1) {
      const auto peak = static_cast<double>(rig.alloc.stats().reserved_bytes.all().peak);
      rig.alloc.set_budget(static_cast<std::size_t>(ratio * peak));
    }
    std::vector<std::unique_ptr<fake_binding>> bs;
    std::vector<tensor_id> ids;
    for (int i = 0; i < 8; ++i) {
      bs.push_back(std::make_unique<fake_binding>(rig, 4 * MiB, std::uint64_t(100 * s + i)));
      ids.push_back(rt.track(*bs.back(), bs.back()->bytes(), rig.compute, 0));
      rig.clk.advance(1000);
    }
    for (int i = 7; i >= 0; --i) {
      rt.access(ids[std::size_t(i)]);
      EXPECT_TRUE(bs[std::size_t(i)]->verify());
      rig.clk.advance(1000);
    }
    for (tensor_id id : ids) rt.untrack(id);
    rt.step();
  }
  return rt.stats();
}

TEST(Runtime, ProactiveOffloadStaysOffWhileTheStepsFit) {
  // At the first step's peak the cached blocks keep reserved at the budget,
  // so the prediction (reserved + the recorded growth) would start copies
  // although nothing has to move (Note [Proactive offload under pressure]).
  const runtime_stats st = run_steps_under(1.0);
  EXPECT_EQ(st.reclaims, 0u);
  EXPECT_EQ(st.proactive_offloads, 0u);
  EXPECT_EQ(st.offloads, 0u);
}

TEST(Runtime, ProactiveOffloadArmsUnderPressure) {
  const runtime_stats st = run_steps_under(0.5);
  EXPECT_GT(st.reclaims, 0u);
  EXPECT_GT(st.proactive_offloads, 0u);
}

TEST(Runtime, PrefetchAheadFollowsTheRecordedStepAndDistanceAdapts) {
  runtime_rig rig({.latency_ns = 1000});
  memory_runtime::options o;
  o.proactive_offload = false;
  o.recorder.initial_distance = 1;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  constexpr int n = 6;
  for (int s = 0; s < 3; ++s) {
    std::vector<std::unique_ptr<fake_binding>> bs;
    std::vector<tensor_id> ids;
    for (int i = 0; i < n; ++i) {
      bs.push_back(std::make_unique<fake_binding>(rig, 128 * KiB, std::uint64_t(100 * s + i)));
      ids.push_back(rt.track(*bs.back(), bs.back()->bytes(), rig.compute, 0));
      rig.clk.advance(100);
    }
    if (s > 0) {
      for (tensor_id id : ids) ASSERT_TRUE(rt.offload(id));
      rig.clk.advance(100'000);
      rt.poll();
    }
    for (int i = n - 1; i >= 0; --i) {
      rt.access(ids[std::size_t(i)]);
      EXPECT_TRUE(bs[std::size_t(i)]->verify());
      rig.clk.advance(100);
    }
    for (tensor_id id : ids) rt.untrack(id);
    rt.step();
  }
  const runtime_stats st = rt.stats();
  EXPECT_GT(st.prefetches, 0u);
  EXPECT_GT(st.prefetch_distance, 1u);  // stalls pushed prefetching earlier
}

// Note [A step is an iteration]: three iterations, with boundaries between
// them and none after the last (as a Python block sees them), are three
// steps; a boundary with nothing tracked since the previous one, and the
// accesses that bring everything back at the end, count none.
TEST(RuntimeRecordedStep, StepsCountIterationsNotBoundaries) {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  std::vector<std::unique_ptr<fake_binding>> bs;
  std::vector<tensor_id> ids;
  for (int iteration = 0; iteration < 3; ++iteration) {
    if (iteration > 0) rt.step();
    EXPECT_EQ(rt.stats().steps, std::uint64_t(iteration));  // counted at its first tensor, not at the boundary
    bs.push_back(std::make_unique<fake_binding>(rig, MiB, iteration));
    ids.push_back(rt.track(*bs.back(), bs.back()->bytes(), rig.compute, 0));
    EXPECT_EQ(rt.stats().steps, std::uint64_t(iteration + 1));
  }
  rt.step();
  rt.step();  // nothing tracked since the previous boundary
  for (tensor_id id : ids) rt.access(id);  // what a session's end brings back
  EXPECT_EQ(rt.stats().steps, 3u);
  for (tensor_id id : ids) rt.untrack(id);
}

}  // namespace
}  // namespace tp
