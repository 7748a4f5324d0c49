// The simulator on synthetic traces with known answers.

#include "sim/simulator.hpp"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>

#include "core/errors.hpp"

#include "sim/sweep.hpp"
#include "synthetic_traces.hpp"

namespace tp::sim {
namespace {

using namespace tp::sim::testing;

constexpr int layers = 16;
constexpr std::size_t act = 4 * MiB;
constexpr std::int64_t fwd_ns = 1'000'000;
constexpr std::int64_t bwd_ns = 2'000'000;

TEST(Simulator, UnconstrainedReplayTakesTheRecordedTimeAndMovesNothing) {
  const trace t = linear_chain(layers, act, fwd_ns, bwd_ns);
  const sim_report r = simulate(t, {});
  ASSERT_TRUE(r.fits) << r.failure;
  EXPECT_EQ(r.step_ns, t.compute_ns());
  EXPECT_EQ(r.compute_ns, t.compute_ns());
  EXPECT_EQ(r.stall_ns, 0);
  EXPECT_EQ(r.recompute_ns, 0);
  EXPECT_EQ(r.offloaded_bytes, 0u);
  EXPECT_EQ(r.evictions, 0u);
  // Every activation plus the input, a gradient pair and the weights.
  EXPECT_GE(r.peak_allocated, (layers + 3) * act);
  EXPECT_GE(r.peak_reserved, r.peak_allocated);
}

TEST(Simulator, ComputeScaleMultipliesRecordedTimes) {
  const trace t = linear_chain(4, act, fwd_ns, bwd_ns);
  sim_options o;
  o.compute_scale = 0.25;
  EXPECT_EQ(simulate(t, o).step_ns, t.compute_ns() / 4);
}

// Checkpointing (Chen et al.): with room for ~2*sqrt(N) activations a chain
// of N layers needs about one extra forward. DTR's heuristic, recompute only
// (no copies ahead), must get there.
TEST(Simulator, ChainFitsAtTwoSqrtNActivationsWithAboutOneExtraForward) {
  const trace t = linear_chain(layers, act, fwd_ns, bwd_ns);
  const sim_report free_run = simulate(t, {});
  // 2*sqrt(16) = 8 activations, plus the input, two gradients and the weights.
  const std::size_t budget = (8 + 3) * act + layers * 64 * KiB + 2 * MiB;
  ASSERT_LT(budget, free_run.peak_reserved);
  sim_options o;
  o.policy = policy_kind::dtr;
  o.budget_bytes = budget;
  o.proactive_offload = false;
  o.prefetch_ahead = false;
  sim_report r = simulate(t, o);
  compare(r, free_run);
  ASSERT_TRUE(r.fits) << r.failure;
  EXPECT_LE(r.peak_reserved, budget);
  EXPECT_GT(r.recompute_ns, 0);
  const std::int64_t forward_ns = layers * fwd_ns;
  // "About one extra forward": at most 1.5 forwards of recompute.
  EXPECT_LE(r.recompute_ns, forward_ns * 3 / 2) << "recompute " << r.recompute_ns << " ns";
  EXPECT_EQ(r.offloaded_bytes, 0u);
  EXPECT_EQ(r.step_ns, r.compute_ns + r.recompute_ns + r.stall_ns);
  std::printf("chain of %d at %zu MiB: recompute %.2f forwards, slowdown %.3f\n", layers, budget / MiB,
              static_cast<double>(r.recompute_ns) / static_cast<double>(forward_ns), r.slowdown);
}

TEST(Simulator, BudgetBelowTheLargestOpsInputsPlusOutputsDoesNotFit) {
  const trace t = linear_chain(layers, act, fwd_ns, bwd_ns);
  for (policy_kind p : all_policies()) {
    sim_options o;
    o.policy = p;
    o.budget_bytes = 2 * act - 1;  // a forward layer needs its input and its output
    const sim_report r = simulate(t, o);
    EXPECT_FALSE(r.fits) << to_string(p);
    EXPECT_FALSE(r.failure.empty());
  }
}

// Long compute, small copies: every offload and prefetch hides under compute.
TEST(Simulator, SwapIsFreeWhenComputeHidesTheCopies) {
  const trace t = linear_chain(layers, act, 10'000'000, 20'000'000);  // 10 ms layers, 84 us copies
  const sim_report free_run = simulate(t, {});
  for (policy_kind p : {policy_kind::lru, policy_kind::capuchin, policy_kind::hybrid}) {
    sim_options o;
    o.policy = p;
    o.budget_bytes = budget_for_ratio(free_run, 0.5);
    sim_report r = simulate(t, o);
    compare(r, free_run);
    ASSERT_TRUE(r.fits) << to_string(p) << ": " << r.failure;
    EXPECT_GT(r.offloaded_bytes, 0u) << to_string(p);
    EXPECT_LT(r.slowdown, 1.01) << to_string(p);
  }
}

// Short compute, large copies: swapping must stall.
TEST(Simulator, SwapCannotHideUnderShortCompute) {
  const trace t = linear_chain(layers, 64 * MiB, 10'000, 20'000);  // 10 us layers, 1.3 ms copies
  const sim_report free_run = simulate(t, {});
  sim_options o;
  o.policy = policy_kind::lru;  // swap only
  o.budget_bytes = budget_for_ratio(free_run, 0.5);
  sim_report r = simulate(t, o);
  compare(r, free_run);
  ASSERT_TRUE(r.fits) << r.failure;
  EXPECT_GT(r.stall_ns, 0);
  EXPECT_GT(r.slowdown, 2.0);
  EXPECT_EQ(r.step_ns, r.compute_ns + r.recompute_ns + r.stall_ns);
}

TEST(Simulator, SameInputsGiveTheSameReport) {
  const trace t = linear_chain(layers, act, fwd_ns, bwd_ns);
  for (policy_kind p : all_policies()) {
    sim_options o;
    o.policy = p;
    o.budget_bytes = 9 * act;
    const sim_report a = simulate(t, o);
    const sim_report b = simulate(t, o);
    EXPECT_EQ(a.fits, b.fits);
    EXPECT_EQ(a.step_ns, b.step_ns) << to_string(p);
    EXPECT_EQ(a.peak_reserved, b.peak_reserved);
    EXPECT_EQ(a.peak_allocated, b.peak_allocated);
    EXPECT_EQ(a.recompute_ns, b.recompute_ns);
    EXPECT_EQ(a.stall_ns, b.stall_ns);
    EXPECT_EQ(a.offloaded_bytes, b.offloaded_bytes);
    EXPECT_EQ(a.evictions, b.evictions);
  }
}

TEST(Simulator, RejectsImpossibleOptions) {
  const trace t = linear_chain(2, act, fwd_ns, bwd_ns);
  sim_options o;
  o.bandwidth_bytes_per_s = 0;
  EXPECT_THROW(simulate(t, o), error);
  o = {};
  o.repeat = 0;
  EXPECT_THROW(simulate(t, o), error);
}

}  // namespace
}  // namespace tp::sim
