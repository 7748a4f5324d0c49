// runtime_allocator: the caching allocator as the budget runtime sees it.
// The high-water mark of Note [Resident floor] is reachable only here.

#include "allocator/runtime_allocator.hpp"

#include <gtest/gtest.h>

#include <type_traits>

#include "runtime_test_support.hpp"

namespace tp {
namespace {

using testing::MiB;
using testing::runtime_rig;

// Not part of the allocator's own API: only the interface offers it.
template <class T>
concept offers_high_water = requires(T& a) { a.take_allocated_high_water(); };
static_assert(offers_high_water<runtime_allocator>);
static_assert(!offers_high_water<caching_allocator>);
static_assert(std::is_base_of_v<runtime_allocator, caching_allocator>);

TEST(RuntimeAllocator, HighWaterIsTheMostAllocatedSinceTheLastTake) {
  runtime_rig rig;
  runtime_allocator& ra = rig.alloc;
  (void)ra.take_allocated_high_water();
  void* a = rig.alloc.allocate(4 * MiB, rig.compute);
  void* b = rig.alloc.allocate(2 * MiB, rig.compute);
  rig.alloc.deallocate(a);
  const runtime_allocator::allocated_marks m = ra.take_allocated_high_water();
  EXPECT_EQ(m.high_water, 6 * MiB);
  EXPECT_EQ(m.now, 2 * MiB);
  const runtime_allocator::allocated_marks again = ra.take_allocated_high_water();
  EXPECT_EQ(again.high_water, 2 * MiB);  // the count restarted at the previous take
  EXPECT_EQ(again.now, 2 * MiB);
  EXPECT_EQ(rig.alloc.stats().allocated_bytes.all().peak, static_cast<std::int64_t>(6 * MiB));  // untouched
  rig.alloc.deallocate(b);
}

TEST(RuntimeAllocator, SeesTheAllocatorsBudgetAndBlocks) {
  runtime_rig rig({.budget = 64 * MiB});
  const runtime_allocator& ra = rig.alloc;
  EXPECT_EQ(ra.budget().value_or(0), 64 * MiB);
  void* p = rig.alloc.allocate(3 * MiB, rig.compute);
  EXPECT_GE(ra.allocation_size(p), 3 * MiB);
  EXPECT_EQ(ra.allocation_size(&rig), 0u);
  EXPECT_GE(ra.stats().reserved_bytes.all().current, static_cast<std::int64_t>(3 * MiB));
  rig.alloc.deallocate(p);
}

}  // namespace
}  // namespace tp
