// End to end: a caching allocator with a budget, the runtime as its
// reclaimer, and a synthetic training step (forward allocates and tracks
// activations, backward uses them in reverse) that fits under half of its
// unconstrained peak with every byte verified, for every policy.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/runtime.hpp"
#include "runtime_test_support.hpp"

namespace tp {
namespace {

using namespace tp::testing;

constexpr int layers = 16;
constexpr std::size_t activation = 4 * MiB;
constexpr std::size_t weights = 8 * MiB;

// One step; returns false at the first byte that came back wrong.
bool training_step(runtime_rig& rig, memory_runtime& rt, int step) {
  bool ok = true;
  std::vector<std::unique_ptr<fake_binding>> acts;
  std::vector<tensor_id> ids;
  for (int i = 0; i < layers; ++i) {  // forward
    acts.push_back(std::make_unique<fake_binding>(rig, activation, std::uint64_t(step * 1000 + i)));
    // Alternate cheap and expensive recomputes so policies must choose.
    const std::int64_t cost = i % 3 == 0 ? 0 : (i % 2 == 0 ? 50'000 : 2'000'000);
    ids.push_back(rt.track(*acts.back(), activation, rig.compute, cost));
    rig.clk.advance(100'000);
  }
  for (int i = layers - 1; i >= 0; --i) {  // backward
    const auto u = std::size_t(i);
    rt.access(ids[u]);
    ok = ok && acts[u]->verify();
    rt.untrack(ids[u]);
    acts[u].reset();
    rig.clk.advance(100'000);
  }
  rt.step();
  return ok;
}

std::size_t unconstrained_peak() {
  runtime_rig rig;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk);
  fake_binding w(rig, weights, 99);
  const tensor_id wid = rt.track(w, weights, rig.compute, 0, /*evictable=*/false);
  EXPECT_TRUE(training_step(rig, rt, 0));
  rt.untrack(wid);
  return static_cast<std::size_t>(rig.alloc.stats().reserved_bytes.all().peak);
}

class RuntimeBudget : public ::testing::TestWithParam<policy_kind> {};

TEST_P(RuntimeBudget, TrainingStepFitsUnderHalfItsPeakWithEveryByteVerified) {
  const std::size_t peak = unconstrained_peak();
  const std::size_t budget = peak / 2;
  runtime_rig rig({.bandwidth = 16e9, .latency_ns = 5'000, .budget = budget});
  memory_runtime::options o;
  o.policy = GetParam();
  o.bandwidth = {.bytes_per_s = 16e9, .latency_ns = 5'000};
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  fake_binding w(rig, weights, 99);
  const tensor_id wid = rt.track(w, weights, rig.compute, 0, /*evictable=*/false);
  for (int s = 1; s <= 3; ++s) {
    ASSERT_TRUE(training_step(rig, rt, s)) << "step " << s << " returned a stale byte";
    rt.check_invariants();
  }
  EXPECT_TRUE(w.verify());
  rt.untrack(wid);
  const auto reserved_peak = static_cast<std::size_t>(rig.alloc.stats().reserved_bytes.all().peak);
  EXPECT_LE(reserved_peak, budget);
  const runtime_stats st = rt.stats();
  EXPECT_GT(st.evictions, 0u);
  EXPECT_GT(st.offloads + st.drops, 0u);
  EXPECT_EQ(st.tracked, 0u);
  RecordProperty("policy", to_string(GetParam()));
  std::printf("%-8s peak %zu MiB (unconstrained %zu MiB): offloads %llu drops %llu recomputes %llu "
              "stalls %llu stall %.2f ms policy %.3f ms\n",
              to_string(GetParam()), reserved_peak / MiB, peak / MiB,
              static_cast<unsigned long long>(st.offloads), static_cast<unsigned long long>(st.drops),
              static_cast<unsigned long long>(st.recomputes), static_cast<unsigned long long>(st.stalls),
              static_cast<double>(st.stall_ns) / 1e6, static_cast<double>(st.policy_ns) / 1e6);
}

// Issue 16's defect: a reclaim that left evictable bytes while a request
// failed. Ten 20 MiB segments hold 13 tensors of 1.5 MiB each (the last of
// each in a 2 MiB block); every other tensor is the least recently used, so
// the first victims free blocks that never touch, and no 2.5 MiB block forms
// until their neighbours go too. With every round freeing only the shortfall
// (a 4 MiB segment: three victims) the allocator's 16 rounds freed 72 MiB
// of isolated blocks and threw with 126.5 MiB still evictable; Note [Reclaim
// rounds] doubles each round and the request is served.
TEST(RuntimeBudget, ARequestThatNeedsWholeSegmentsIsServedWhileAnythingIsEvictable) {
  runtime_rig rig({.budget = 200 * MiB});
  memory_runtime::options o;
  o.policy = policy_kind::lru;
  memory_runtime rt(rig.dev, rig.alloc, rig.host, rig.clk, o);
  std::vector<std::unique_ptr<fake_binding>> t;
  std::vector<tensor_id> ids;
  for (int i = 0; i < 130; ++i) {
    t.push_back(std::make_unique<fake_binding>(rig, 3 * MiB / 2, std::uint64_t(i)));
    ids.push_back(rt.track(*t.back(), t.back()->bytes(), rig.compute, 0));
  }
  ASSERT_EQ(rig.alloc.stats().reserved_bytes.all().current, std::int64_t{200 * MiB});
  for (std::size_t i = 0; i < ids.size(); i += 2) rt.access(ids[i]);  // odd ones are the LRU
  void* p = nullptr;
  ASSERT_NO_THROW(p = rig.alloc.allocate(5 * MiB / 2, rig.compute));
  EXPECT_GT(rt.stats().evictions, 32u);
  rig.alloc.deallocate(p);
  for (std::size_t i = 0; i < ids.size(); ++i) {
    rt.access(ids[i]);
    ASSERT_TRUE(t[i]->verify()) << "tensor " << i;
    rt.untrack(ids[i]);
    t[i].reset();
  }
}

INSTANTIATE_TEST_SUITE_P(Policies, RuntimeBudget,
                         ::testing::Values(policy_kind::lru, policy_kind::dtr, policy_kind::capuchin,
                                           policy_kind::hybrid),
                         [](const auto& p) { return std::string(to_string(p.param)); });

}  // namespace
}  // namespace tp
