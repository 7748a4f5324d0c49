// The simulator's defaults are the live runtime's (Note [The simulator's
// defaults] in sim/simulator.hpp): each check fails when one side's default
// changes and the other's does not.

#include <gtest/gtest.h>

#include <cstdint>

#include "allocator/caching_allocator.hpp"
#include "config/config.hpp"
#include "runtime/runtime.hpp"
#include "sim/simulator.hpp"

namespace tp::sim {
namespace {

// What the adapters are given when PYTORCH_CUDA_ALLOC_CONF and
// TENSORPAGER_CONF are empty.
config live_defaults() { return parse_config("", "defaults_test"); }

TEST(SimulatorDefaults, AllocatorSettingsAreTheConfigurations) {
  const sim_options o;
  EXPECT_EQ(o.expandable_segments, live_defaults().expandable_segments);
  EXPECT_TRUE(o.expandable_segments);  // Note [Expandable segments by default]
  // max_split_size: none in the configuration leaves the allocator's own default.
  ASSERT_FALSE(live_defaults().max_split_size.has_value());
  EXPECT_EQ(o.max_split_size, caching_allocator_options{}.max_split_size);
}

TEST(SimulatorDefaults, PolicyIsTheConfigurations) {
  EXPECT_EQ(sim_options{}.policy, live_defaults().policy);
  EXPECT_EQ(sim_options{}.policy, memory_runtime_options{}.policy);
  EXPECT_EQ(sim_report{}.policy, sim_options{}.policy);
}

TEST(SimulatorDefaults, RuntimeSwitchesAreTheRuntimes) {
  const sim_options o;
  const memory_runtime_options r;
  EXPECT_EQ(o.proactive_offload, r.proactive_offload);
  EXPECT_EQ(o.prefetch_ahead, r.prefetch_ahead);
  EXPECT_EQ(o.sample_size, r.sample_size);
  EXPECT_EQ(o.seed, r.seed);
}

// tp.budget()'s lend default is this constant, read from the extension
// (_C.BUDGET_LENDS_BY_DEFAULT): one place, no second spelling to compare.
TEST(SimulatorDefaults, LendsAsTpBudgetDoes) { EXPECT_EQ(sim_options{}.lend, budget_lends_by_default); }

}  // namespace
}  // namespace tp::sim
