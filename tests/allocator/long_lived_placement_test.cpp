// Note [Long-lived placement] in caching_allocator.hpp: long-lived requests
// come from segments of their own, so tensors that live across steps do not
// keep the granules of a step's freed activations mapped; and try_allocate()
// never asks the reclaimer. On the simulated device (2 MiB granules).

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator_test_support.hpp"
#include "core/errors.hpp"

namespace tp {
namespace {

using namespace tp::testing;

class LongLivedPlacement : public ::testing::Test {
 protected:
  simulated_rig rig_{1 * GiB};
};

// A step's shape: each activation is followed by a tensor that outlives it
// (a gradient, a momentum buffer), then the step's activations are freed.
// What stays mapped once the cache gives back every free granule is what
// the long-lived tensors hold, when they have their own segments; among
// the activations, they keep most of the activations' granules mapped.
std::int64_t reserved_after_a_step(simulated_rig& rig, lifetime of_state) {
  caching_allocator a(rig.dev, expandable());
  std::vector<void*> activations;
  std::vector<void*> state;
  for (int i = 0; i < 8; ++i) {
    activations.push_back(a.allocate(3 * MiB));
    state.push_back(a.allocate(MiB + MiB / 2, default_stream, of_state));
  }
  for (void* p : activations) a.deallocate(p);
  a.empty_cache();
  const std::int64_t held = reserved(a);
  for (void* p : state) a.deallocate(p);
  return held;
}

TEST_F(LongLivedPlacement, TensorsThatOutliveTheStepLeaveTheStepsGranulesFree) {
  const std::int64_t packed = reserved_after_a_step(rig_, lifetime::long_lived);
  EXPECT_EQ(packed, std::int64_t(12 * MiB)) << "8 x 1.5 MiB, packed: 6 granules";
  const std::int64_t interleaved = reserved_after_a_step(rig_, lifetime::transient);
  EXPECT_GT(interleaved, std::int64_t(20 * MiB)) << "each between two activations keeps up to 2 granules mapped";
}

TEST_F(LongLivedPlacement, AFreeBlockServesOnlyItsOwnLifetime) {
  caching_allocator a(rig_.dev, expandable());
  void* t = a.allocate(4 * MiB);
  EXPECT_EQ(a.lifetime_of(t), lifetime::transient);
  a.deallocate(t);  // cached, mapped
  void* l = a.allocate(4 * MiB, default_stream, lifetime::long_lived);
  EXPECT_NE(l, t) << "a long-lived request took a transient free block";
  EXPECT_EQ(a.lifetime_of(l), lifetime::long_lived);
  EXPECT_EQ(a.lifetime_of(static_cast<char*>(l) + 512), std::nullopt) << "not the start of an allocation";
  void* t2 = a.allocate(4 * MiB);
  EXPECT_EQ(t2, t) << "the transient free block serves the next transient request";
  bool seen_long_lived = false;
  for (const segment_snapshot& s : a.snapshot()) {
    for (const block_snapshot& b : s.blocks) {
      if (b.address == reinterpret_cast<std::uintptr_t>(l)) {
        EXPECT_EQ(s.life, lifetime::long_lived);
        seen_long_lived = true;
      }
      if (b.address == reinterpret_cast<std::uintptr_t>(t2)) {
        EXPECT_EQ(s.life, lifetime::transient);
      }
    }
  }
  EXPECT_TRUE(seen_long_lived);
  a.deallocate(l);
  a.deallocate(t2);
}

TEST_F(LongLivedPlacement, ASmallRequestIsTransientWhateverTheCallerExpects) {
  caching_allocator a(rig_.dev, expandable());
  void* s = a.allocate(256 * KiB, default_stream, lifetime::long_lived);
  EXPECT_EQ(a.lifetime_of(s), lifetime::transient) << "the small pool shares its granules";
  void* l = a.allocate(MiB + 512, default_stream, lifetime::long_lived);
  EXPECT_EQ(a.lifetime_of(l), lifetime::long_lived);
  a.deallocate(s);
  a.deallocate(l);
}

// Lifetimes are a preference: a request takes a free block of the other
// lifetime before the reclaimer is asked to evict anything.
TEST_F(LongLivedPlacement, ARequestBorrowsAFreeBlockOfTheOtherLifetimeBeforeAnEviction) {
  caching_allocator a(rig_.dev, expandable(8 * MiB));
  idle_reclaimer r;
  a.set_reclaimer(&r);
  const std::size_t one_and_a_half = MiB + MiB / 2;
  void* t = a.allocate(3 * MiB + MiB / 2);                                // transient [0, 4)
  void* l = a.allocate(one_and_a_half, default_stream, lifetime::long_lived);     // long-lived [0, 1.5)
  void* keep = a.allocate(one_and_a_half, default_stream, lifetime::long_lived);  // [1.5, 3) of [0, 4)
  a.deallocate(l);  // free, and no whole granule in it: 8 MiB mapped, the budget is full
  EXPECT_EQ(a.try_allocate(one_and_a_half, default_stream, lifetime::transient), nullptr)
      << "try_allocate never borrows";
  void* borrowed = a.allocate(one_and_a_half);
  EXPECT_EQ(borrowed, l);
  EXPECT_EQ(r.calls, 0) << "evicted for a request that a free block served";
  for (void* p : {borrowed, keep, t}) a.deallocate(p);
  a.set_reclaimer(nullptr);
}

// Under a budget, free transient granules are unmapped for a long-lived
// request, as for any other (Note [Expandable segments], "Pressure").
TEST_F(LongLivedPlacement, ALongLivedRequestTakesTheBudgetThatFreeTransientGranulesHeld) {
  caching_allocator a(rig_.dev, expandable(8 * MiB));
  a.deallocate(a.allocate(8 * MiB));
  EXPECT_EQ(reserved(a), std::int64_t(8 * MiB));
  void* l = a.allocate(6 * MiB, default_stream, lifetime::long_lived);
  EXPECT_LE(reserved(a), std::int64_t(8 * MiB));
  a.deallocate(l);
}

TEST_F(LongLivedPlacement, TryAllocateReturnsNullWhereAllocateWouldAskTheReclaimer) {
  caching_allocator a(rig_.dev, expandable(4 * MiB));
  idle_reclaimer r;
  a.set_reclaimer(&r);
  void* full = a.allocate(4 * MiB);
  EXPECT_EQ(a.try_allocate(2 * MiB, default_stream, lifetime::long_lived), nullptr);
  EXPECT_EQ(r.calls, 0);
  EXPECT_THROW(a.allocate(2 * MiB, default_stream, lifetime::long_lived), out_of_memory);
  EXPECT_GT(r.calls, 0);
  a.deallocate(full);
  void* p = a.try_allocate(2 * MiB, default_stream, lifetime::long_lived);
  EXPECT_NE(p, nullptr) << "the free granules are unmapped for it, as allocate() does";
  a.deallocate(p);
  a.set_reclaimer(nullptr);
}

}  // namespace
}  // namespace tp
