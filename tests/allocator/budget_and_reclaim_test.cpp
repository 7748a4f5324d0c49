// The budget on reserved bytes, the reclaim path and the out-of-memory report.

#include <gtest/gtest.h>

#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator_test_support.hpp"
#include "core/errors.hpp"

namespace tp {
namespace {

using namespace tp::testing;

/// A reclaimer that frees pointers it was given, in order, until it has
/// freed what was asked.
class freeing_reclaimer final : public reclaimer {
 public:
  explicit freeing_reclaimer(caching_allocator& a) : alloc_(a) {}
  std::vector<std::pair<void*, std::size_t>> victims;
  int calls = 0;
  std::size_t reclaim(std::size_t bytes, stream_id) override {
    ++calls;
    std::size_t freed = 0;
    while (freed < bytes && !victims.empty()) {
      alloc_.deallocate(victims.front().first);  // the allocator's lock is not held
      freed += victims.front().second;
      victims.erase(victims.begin());
    }
    return freed;
  }
  std::string describe() const override { return "evictable 1.00 MiB"; }

 private:
  caching_allocator& alloc_;
};

class Budget : public ::testing::Test {
 protected:
  simulated_rig rig_{1 * GiB};
};

TEST_F(Budget, ReservedNeverPassesBudget) {
  caching_allocator a(rig_.dev, {.budget = 64 * MiB});
  std::vector<void*> ps;
  try {
    for (int i = 0; i < 100; ++i) {
      ps.push_back(a.allocate(3 * MiB));
      ASSERT_LE(reserved(a), std::int64_t(64 * MiB));
    }
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory&) {
  }
  EXPECT_LE(reserved(a), std::int64_t(64 * MiB));
  EXPECT_GE(ps.size(), 18u);  // falls back to 4 MiB segments near the cap
  for (void* p : ps) a.deallocate(p);
}

TEST_F(Budget, SmallRequestTakesAFreeLargeBlockWhenNoSmallSegmentFits) {
  // Note [Small requests from large blocks]: a 20 MiB large segment, its
  // first 4 MiB in use, the rest free but not releasable; the budget leaves
  // no room for a small segment, not even one of exactly 512 KiB.
  caching_allocator a(rig_.dev, {.budget = 20 * MiB + 256 * KiB});
  void* big = a.allocate(4 * MiB);
  ASSERT_EQ(reserved(a), std::int64_t(20 * MiB));
  void* small = a.allocate(512 * KiB);
  EXPECT_EQ(reserved(a), std::int64_t(20 * MiB));  // no new segment
  EXPECT_EQ(a.allocation_size(small), 512 * KiB);
  const allocator_stats s = a.stats();
  EXPECT_EQ(s.allocated_bytes.of(pool_kind::large).current, std::int64_t(4 * MiB + 512 * KiB));
  a.deallocate(small);
  a.deallocate(big);
  EXPECT_EQ(a.stats().inactive_split.all().current, 0);  // merged back into one free block
  a.empty_cache();
  EXPECT_EQ(reserved(a), 0);
}

TEST_F(Budget, ReclaimIsAskedAgainWhileFreedBytesAreScattered) {
  // Two 20 MiB segments of 2 MiB blocks fill the budget. The reclaimer frees
  // every other block first, so the first rounds free bytes that form no
  // 4 MiB block; the allocation succeeds once two neighbours are free.
  caching_allocator a(rig_.dev, {.budget = 40 * MiB});
  std::vector<void*> blocks;
  for (int i = 0; i < 20; ++i) blocks.push_back(a.allocate(2 * MiB));
  ASSERT_EQ(reserved(a), std::int64_t(40 * MiB));
  freeing_reclaimer r(a);
  for (int i = 0; i < 20; i += 2) r.victims.emplace_back(blocks[std::size_t(i)], 2 * MiB);
  for (int i = 1; i < 20; i += 2) r.victims.emplace_back(blocks[std::size_t(i)], 2 * MiB);
  a.set_reclaimer(&r);
  void* p = a.allocate(4 * MiB);
  EXPECT_GT(r.calls, 1);
  EXPECT_LE(reserved(a), std::int64_t(40 * MiB));
  a.set_reclaimer(nullptr);
  a.deallocate(p);
  for (auto& [ptr, bytes] : r.victims) a.deallocate(ptr);
}

TEST_F(Budget, UsesSmallerSegmentWhenUsualOneWouldPassBudget) {
  caching_allocator a(rig_.dev, {.budget = 5 * MiB});
  void* p = a.allocate(3 * MiB);  // a 20 MiB segment would not fit
  EXPECT_EQ(reserved(a), std::int64_t(4 * MiB));
  a.deallocate(p);
}

TEST_F(Budget, FreesCacheBeforeGivingUp) {
  caching_allocator a(rig_.dev, {.budget = 40 * MiB});
  void* p = a.allocate(30 * MiB);
  a.deallocate(p);  // cached: 30 MiB reserved, none allocated
  void* q = a.allocate(1 * MiB);  // small pool: needs a new 2 MiB segment
  EXPECT_EQ(reserved(a), std::int64_t(32 * MiB));
  void* r = a.allocate(31 * MiB);  // too big for the cached block; must release it first
  EXPECT_EQ(a.stats().num_alloc_retries, 1);
  EXPECT_EQ(reserved(a), std::int64_t(34 * MiB));
  a.deallocate(q);
  a.deallocate(r);
}

TEST_F(Budget, CallsReclaimerThenRetries) {
  caching_allocator a(rig_.dev, {.budget = 32 * MiB});
  freeing_reclaimer rec(a);
  a.set_reclaimer(&rec);
  for (int i = 0; i < 3; ++i) rec.victims.push_back({a.allocate(10 * MiB), 10 * MiB});
  void* p = a.allocate(10 * MiB);
  EXPECT_EQ(rec.calls, 1);
  EXPECT_EQ(a.stats().num_reclaims, 1);
  EXPECT_EQ(a.stats().reclaimed_bytes, std::int64_t(10 * MiB));
  EXPECT_LE(reserved(a), std::int64_t(32 * MiB));
  a.deallocate(p);
  for (auto& v : rec.victims) a.deallocate(v.first);
  a.set_reclaimer(nullptr);
}

TEST_F(Budget, OutOfMemoryAfterReclaimCarriesBreakdown) {
  caching_allocator a(rig_.dev, {.budget = 8 * MiB});
  freeing_reclaimer rec(a);
  a.set_reclaimer(&rec);
  void* p = a.allocate(6 * MiB);
  try {
    a.allocate(4 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    for (const char* part : {"tried to allocate 4.00 MiB", "Budget: 8.00 MiB", "6.00 MiB allocated",
                             "6.00 MiB reserved", "cached but free", "largest free block", "evictable 1.00 MiB",
                             "Hint: raise the budget"}) {
      EXPECT_NE(m.find(part), std::string::npos) << "missing '" << part << "' in: " << m;
    }
  }
  EXPECT_EQ(rec.calls, 1);
  EXPECT_EQ(a.stats().num_ooms, 1);
  a.deallocate(p);
  a.set_reclaimer(nullptr);
}

// Before, a runtime that tracked nothing yet (describe() empty) was taken for
// no runtime, and the hint told a user inside a budget block to enter one.
TEST_F(Budget, OutOfMemoryUnderARuntimeThatTracksNothingDoesNotHintAtEnteringOne) {
  class tracks_nothing final : public reclaimer {
   public:
    std::size_t reclaim(std::size_t, stream_id) override { return 0; }
  } rec;
  caching_allocator a(rig_.dev, {.budget = 8 * MiB});
  a.set_reclaimer(&rec);
  void* p = a.allocate(6 * MiB);
  try {
    a.allocate(4 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("Reclaim freed 0 B."), std::string::npos) << m;
    EXPECT_NE(m.find("Hint: raise the budget (key 'budget') or reduce the batch size."), std::string::npos) << m;
    EXPECT_EQ(m.find("tensorpager.budget(...)"), std::string::npos) << m;
  }
  a.deallocate(p);
  a.set_reclaimer(nullptr);
}

TEST_F(Budget, CanBeRaisedAndLoweredAtRunTime) {
  caching_allocator a(rig_.dev);
  EXPECT_EQ(a.budget(), std::nullopt);
  void* p = a.allocate(30 * MiB);
  a.deallocate(p);
  a.set_budget(16 * MiB);  // releases the cached 30 MiB segment
  EXPECT_EQ(reserved(a), 0);
  EXPECT_EQ(a.stats().budget, std::int64_t(16 * MiB));
  EXPECT_THROW(a.allocate(30 * MiB), out_of_memory);
  a.set_budget(std::nullopt);
  void* q = a.allocate(30 * MiB);
  a.deallocate(q);
}

TEST_F(Budget, BelowWhatIsInUseThrowsAndKeepsOldBudget) {
  caching_allocator a(rig_.dev, {.budget = 64 * MiB});
  void* p = a.allocate(30 * MiB);
  try {
    a.set_budget(16 * MiB);
    FAIL() << "expected invalid_argument";
  } catch (const invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find("at least 30.00 MiB"), std::string::npos) << e.what();
  }
  EXPECT_EQ(a.budget(), 64 * MiB);
  a.deallocate(p);
}

TEST_F(Budget, PendingFreeIsWaitedForUnderPressure) {
  caching_allocator a(rig_.dev, {.budget = 24 * MiB});
  const stream_id side = rig_.dev.create_stream();
  void* p = a.allocate(20 * MiB);
  a.record_stream(p, side);
  a.deallocate(p);  // pending on `side`, which has nothing in flight
  void* q = a.allocate(20 * MiB, side);  // needs p's segment back
  EXPECT_NE(q, nullptr);
  EXPECT_EQ(a.stats().num_sync_all_streams, 0);  // the event had completed already
  a.deallocate(q);
}

}  // namespace
}  // namespace tp
