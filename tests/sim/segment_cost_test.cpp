// Note [Segment recompute in the simulator]: what a segment call's prefix is,
// and that charging it makes recompute dearer only where a trace has modules.

#include "sim/segment_cost.hpp"

#include <gtest/gtest.h>

#include "sim/simulator.hpp"
#include "synthetic_traces.hpp"

namespace tp::sim {
namespace {

using namespace tp::sim::testing;

// A chain of forward ops in modules a.x, a.y | b | a.y (a new call of a) |
// none, and a backward op in a.x.
trace two_calls_of_a() {
  trace_builder b;
  const storage_id x = b.pre_existing(KiB);
  const storage_id a1 = b.op("a1", {x}, KiB, true, 10);
  const storage_id a2 = b.op("a2", {a1}, KiB, true, 20);
  const storage_id c = b.op("c", {a2}, KiB, true, 40);
  const storage_id a3 = b.op("a3", {c}, KiB, true, 80);
  b.op("loss", {a3}, KiB, false, 5);
  b.op("grad", {a3}, KiB, false, 7, phase::backward);
  trace t = b.build();
  for (const auto& [k, m] : {std::pair{0, "a.x"}, {1, "a.y"}, {2, "b"}, {3, "a.y"}, {4, ""}, {5, "a.x"}}) {
    t.ops[static_cast<std::size_t>(k)].module = m;
  }
  return t;
}

TEST(SegmentCost, APrefixIsTheSameSegmentCallsEarlierForwardTime) {
  trace t = two_calls_of_a();
  EXPECT_EQ(segment_prefix_ns(t, 0), (std::vector<std::int64_t>{0, 0, 0, 0, 0, 0}));
  EXPECT_EQ(segment_prefix_ns(t, 1), (std::vector<std::int64_t>{0, 10, 0, 0, 0, 0}));
  // At depth 2, a.x and a.y are calls of their own; b is in none.
  EXPECT_EQ(segment_prefix_ns(t, 2), (std::vector<std::int64_t>{0, 0, 0, 0, 0, 0}));
  t.ops[1].module = "a.x.inner";
  EXPECT_EQ(segment_prefix_ns(t, 2), (std::vector<std::int64_t>{0, 10, 0, 0, 0, 0}));
}

TEST(SegmentCost, NumbersEachSegmentCall) {
  const trace t = two_calls_of_a();
  EXPECT_EQ(segment_call_of(t, 0), (std::vector<std::size_t>(6, no_call)));
  EXPECT_EQ(segment_call_of(t, 1), (std::vector<std::size_t>{0, 0, 1, 2, no_call, no_call}));
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

// A rerun runs its segment call from the call's inputs, so what the call made
// before the storage is computed on the way, not re-created one by one (each
// at the cost of its own rerun): the recorded Transformer at depth 1, one call
// for the whole encoder, re-created 85 storages a step at 0.5 that way
// (11.5x) where 38 do (6.5x; docs/simulator.md).
TEST(SegmentCost, ARerunDoesNotReCreateWhatItsCallComputesOnTheWay) {
  trace_builder b;
  const storage_id x = b.pre_existing(4 * MiB);
  const storage_id h = b.op("h", {x}, 4 * MiB, true, 1'000'000);  // freed before the backward
  const storage_id a = b.op("a", {h}, 4 * MiB, true, 2'000'000);
  b.free(h);
  const storage_id big = b.op("big", {}, 8 * MiB, true, 10);  // leaves no room for a
  b.free(big);
  b.op("grad", {a}, 4 * MiB, false, 10, phase::backward);
  trace t = b.build();
  t.ops[0].module = "encoder.h";
  t.ops[1].module = "encoder.a";
  sim_options o;
  o.policy = policy_kind::dtr;
  o.budget_bytes = 4 * MiB + 8 * MiB + 2 * MiB;
  o.proactive_offload = false;
  o.prefetch_ahead = false;
  o.repeat = 1;
  const sim_report op_level = simulate(t, o);
  ASSERT_TRUE(op_level.fits) << op_level.failure;
  EXPECT_EQ(op_level.recomputes, 2u);  // a, and h for it
  EXPECT_EQ(op_level.recompute_ns, 3'000'000);
  o.segment_depth = 1;
  const sim_report segment = simulate(t, o);
  ASSERT_TRUE(segment.fits) << segment.failure;
  EXPECT_EQ(segment.recomputes, 1u);  // a, computing h on the way
  EXPECT_EQ(segment.recompute_ns, 3'000'000);
}

}  // namespace
}  // namespace tp::sim
