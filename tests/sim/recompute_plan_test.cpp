// Note [Recomputable storages]: which storages a replay of their producer can
// re-create.

#include "sim/recompute_plan.hpp"

#include <gtest/gtest.h>

#include "synthetic_traces.hpp"

namespace tp::sim {
namespace {

using namespace tp::sim::testing;

TEST(RecomputePlan, AnOptimizerUpdateAfterTheLastUseKeepsActivationsRecomputable) {
  trace_builder b;
  const storage_id w = b.pre_existing(4 * KiB), x = b.pre_existing(4 * KiB);
  const storage_id a = b.op("linear", {x, w}, 4 * KiB, true, 10);
  const storage_id g = b.op("linear_backward", {a}, 4 * KiB, false, 20, phase::backward);
  b.free(a);
  trace t = b.build();
  op_record sgd{"sgd_", {g}, {}, {w}, 5, phase::backward, {}};  // writes w after a is freed
  t.events.push_back({event::kind::op, t.ops.size(), 0});
  t.ops.push_back(sgd);
  t.validate("t");
  const recompute_plan plan = recompute_plan::build(t);
  EXPECT_TRUE(plan.recomputable[t.index_of(a)]);
  EXPECT_FALSE(plan.recomputable[t.index_of(w)]);  // pre-existing: no producer
  EXPECT_EQ(plan.producer[t.index_of(a)], 0u);
}

TEST(RecomputePlan, AWriteToAnInputWhileTheOutputLivesMakesItSwapOnly) {
  trace_builder b;
  const storage_id w = b.pre_existing(4 * KiB), x = b.pre_existing(4 * KiB);
  const storage_id a = b.op("linear", {x, w}, 4 * KiB, true, 10);
  trace t = b.build();
  op_record write{"add_", {}, {}, {x}, 5, phase::forward, {}};  // x changes while a lives
  t.events.push_back({event::kind::op, t.ops.size(), 0});
  t.ops.push_back(write);
  t.events.push_back({event::kind::free, 0, a});
  t.validate("t");
  EXPECT_FALSE(recompute_plan::build(t).recomputable[t.index_of(a)]);
}

TEST(RecomputePlan, APreExistingInputFreedBeforeTheOutputMakesItSwapOnly) {
  trace_builder b;
  const storage_id w = b.pre_existing(4 * KiB), x = b.pre_existing(4 * KiB);
  const storage_id a = b.op("linear", {x, w}, 4 * KiB, true, 10);
  const storage_id c = b.op("relu", {a}, 4 * KiB, true, 10);
  b.free(x);  // the input of a is gone: a cannot be replayed, nor c through a
  b.free(a);
  b.free(c);
  const trace t = b.build();
  const recompute_plan plan = recompute_plan::build(t);
  EXPECT_FALSE(plan.recomputable[t.index_of(a)]);
  EXPECT_FALSE(plan.recomputable[t.index_of(c)]);
}

// A defect fixed before (docs/decisions.md): DTR's Transformer log adds every bias in place
// after its matmul, and nothing computed from such a storage could be
// dropped. Replaying the producer and then the write re-creates it.
TEST(RecomputePlan, AStorageWrittenInPlaceIsRecomputableByReplayingItsWrites) {
  trace_builder b;
  const storage_id w = b.pre_existing(4 * KiB), bias = b.pre_existing(4 * KiB), x = b.pre_existing(4 * KiB);
  const storage_id a = b.op("mm", {x, w}, 4 * KiB, true, 10);
  trace t = b.build();
  op_record add{"add_", {a, bias}, {}, {a}, 5, phase::forward, {}};
  t.events.push_back({event::kind::op, t.ops.size(), 0});
  t.ops.push_back(add);
  t.storages.push_back({100, 4 * KiB, false, true, {}});
  op_record relu{"relu", {a}, {100}, {}, 3, phase::forward, {}};
  t.events.push_back({event::kind::op, t.ops.size(), 0});
  t.ops.push_back(relu);
  t.events.push_back({event::kind::free, 0, a});
  t.validate("t");
  const recompute_plan plan = recompute_plan::build(t);
  EXPECT_TRUE(plan.recomputable[t.index_of(a)]);
  EXPECT_EQ(plan.writers[t.index_of(a)], std::vector<std::size_t>{1});
  EXPECT_TRUE(plan.recomputable[t.index_of(100)]);  // read a after the write: a replays with it
}

TEST(RecomputePlan, AWriteThatAlsoWritesAnotherStorageCannotBeReplayed) {
  trace_builder b;
  const storage_id w = b.pre_existing(4 * KiB), x = b.pre_existing(4 * KiB);
  const storage_id a = b.op("mm", {x, w}, 4 * KiB, true, 10);
  const storage_id c = b.op("mm", {x, w}, 4 * KiB, true, 10);
  trace t = b.build();
  op_record both{"swap_", {}, {}, {a, c}, 5, phase::forward, {}};  // a replay would write c again
  t.events.push_back({event::kind::op, t.ops.size(), 0});
  t.ops.push_back(both);
  t.validate("t");
  const recompute_plan plan = recompute_plan::build(t);
  EXPECT_FALSE(plan.recomputable[t.index_of(a)]);
  EXPECT_FALSE(plan.recomputable[t.index_of(c)]);
}

}  // namespace
}  // namespace tp::sim
