// Note [Segment recompute in the simulator]: what a segment call's prefix is,
// and that charging it makes recompute dearer only where a trace has modules.

#include "sim/segment_cost.hpp"

#include <gtest/gtest.h>

#include "sim/simulator.hpp"
#include "synthetic_traces.hpp"

namespace tp::sim {
namespace {

using namespace tp::sim::testing;

TEST(SegmentCost, APrefixIsTheSameSegmentCallsEarlierForwardTime) {
  trace_builder b;
  const storage_id x = b.pre_existing(KiB);
  const storage_id a1 = b.op("a1", {x}, KiB, true, 10);
  const storage_id a2 = b.op("a2", {a1}, KiB, true, 20);
  const storage_id c = b.op("c", {a2}, KiB, true, 40);
  const storage_id a3 = b.op("a3", {c}, KiB, true, 80);
  b.op("loss", {a3}, KiB, false, 5);
  b.op("grad", {a3}, KiB, false, 7, phase::backward);
  trace t = b.build();
  // Modules: a.x, a.y | b | a.y (a new call of a) | none | backward.
  for (const auto& [k, m] : {std::pair{0, "a.x"}, {1, "a.y"}, {2, "b"}, {3, "a.y"}, {4, ""}, {5, "a.x"}}) {
    t.ops[static_cast<std::size_t>(k)].module = m;
  }
  EXPECT_EQ(segment_prefix_ns(t, 0), (std::vector<std::int64_t>{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(segment_prefix_ns(t, 1), (std::vector<std::int64_t>{0, 10, 0, 0, 0, 0}));
  // At depth 2, a.x and a.y are calls of their own; b is in none.
  EXPECT_EQ(segment_prefix_ns(t, 2), (std::vector<std::int64_t>{0, 0, 0, 0, 0, 0}));
  t.ops[1].module = "a.x.inner";
  EXPECT_EQ(segment_prefix_ns(t, 2), (std::vector<std::int64_t>{0, 10, 0, 0, 0, 0}));
}

// DTR's heuristic on a chain that must recompute (as in
// Simulator.ChainFitsAtTwoSqrtNActivationsWithAboutOneExtraForward).
sim_options chain_budget(std::size_t depth) {
  sim_options o;
  o.policy = policy_kind::dtr;
  o.budget_bytes = 11 * 4 * MiB + 16 * 64 * KiB + 2 * MiB;
  o.proactive_offload = false;
  o.prefetch_ahead = false;
  o.segment_depth = depth;
  return o;
}

TEST(SegmentCost, ChargingSegmentsMakesRecomputeDearerOnlyWhereTheTraceHasModules) {
  trace t = linear_chain(16, 4 * MiB, 1'000'000, 2'000'000);
  const sim_report op_level = simulate(t, chain_budget(0));
  ASSERT_TRUE(op_level.fits) << op_level.failure;
  ASSERT_GT(op_level.recompute_ns, 0);
  const sim_report unlabelled = simulate(t, chain_budget(1));
  EXPECT_EQ(unlabelled.step_ns, op_level.step_ns);
  EXPECT_EQ(unlabelled.recompute_ns, op_level.recompute_ns);
  // Four-layer blocks: re-creating a block's k-th activation reruns k layers.
  int k = 0;
  for (op_record& op : t.ops) {
    if (op.when == phase::forward) {
      op.module = "block" + std::to_string(k / 4) + ".layer" + std::to_string(k);
      ++k;
    }
  }
  const sim_report segments = simulate(t, chain_budget(1));
  ASSERT_TRUE(segments.fits) << segments.failure;
  EXPECT_GT(segments.recompute_ns, op_level.recompute_ns);
  EXPECT_EQ(segments.step_ns, segments.compute_ns + segments.recompute_ns + segments.stall_ns);
  // At depth 2 every layer is a call of its own: the operator's cost again.
  const sim_report layers = simulate(t, chain_budget(2));
  EXPECT_EQ(layers.recompute_ns, op_level.recompute_ns);
}

}  // namespace
}  // namespace tp::sim
