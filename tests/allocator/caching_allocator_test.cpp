// Unit tests of tp::caching_allocator on the simulated device.

#include "allocator/caching_allocator.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <thread>
#include <utility>
#include <vector>

#include "allocator_test_support.hpp"
#include "core/errors.hpp"

namespace tp {
namespace {

using namespace tp::testing;

class CachingAllocator : public ::testing::Test {
 protected:
  simulated_rig rig_{1 * GiB};
  caching_allocator alloc_{rig_.dev};
};

TEST_F(CachingAllocator, ZeroBytesGivesNullAndNullFreeIsIgnored) {
  EXPECT_EQ(alloc_.allocate(0), nullptr);
  EXPECT_NO_THROW(alloc_.deallocate(nullptr));
  EXPECT_EQ(alloc_.stats().allocation.all().current, 0);
}

TEST_F(CachingAllocator, RoundsTo512AndAligns) {
  void* p = alloc_.allocate(1);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 512, 0u);
  EXPECT_EQ(alloc_.allocation_size(p), 512u);
  EXPECT_EQ(alloc_.stats().requested_bytes.all().current, 1);
  EXPECT_EQ(allocated(alloc_), 512);
  alloc_.deallocate(p);
}

TEST_F(CachingAllocator, SmallRequestsShareOneTwoMiBSegment) {
  void* a = alloc_.allocate(1000);
  void* b = alloc_.allocate(1000);
  const auto s = alloc_.stats();
  EXPECT_EQ(s.segment.all().current, 1);
  EXPECT_EQ(s.reserved_bytes.of(pool_kind::small).current, std::int64_t(2 * MiB));
  EXPECT_EQ(s.allocated_bytes.all().current, 2048);
  alloc_.deallocate(a);
  alloc_.deallocate(b);
}

TEST_F(CachingAllocator, LargePoolSegmentSizes) {
  void* a = alloc_.allocate(3 * MiB);  // < 10 MiB: a 20 MiB segment
  EXPECT_EQ(reserved(alloc_), std::int64_t(20 * MiB));
  void* b = alloc_.allocate(25 * MiB);  // >= 10 MiB and too big for a's remainder: its own 26 MiB
  EXPECT_EQ(reserved(alloc_), std::int64_t(46 * MiB));
  alloc_.deallocate(a);
  alloc_.deallocate(b);
}

TEST_F(CachingAllocator, ReusesFreedBlockOnSameStream) {
  void* a = alloc_.allocate(4 * MiB);
  alloc_.deallocate(a);
  void* b = alloc_.allocate(4 * MiB);
  EXPECT_EQ(a, b);
  EXPECT_EQ(alloc_.stats().num_device_alloc, 1);
  alloc_.deallocate(b);
}

TEST_F(CachingAllocator, DoesNotHandCachedBlockToAnotherStream) {
  const stream_id s1 = rig_.dev.create_stream();
  void* a = alloc_.allocate(4 * MiB, s1);
  alloc_.deallocate(a);
  void* b = alloc_.allocate(4 * MiB, default_stream);
  EXPECT_NE(a, b);
  EXPECT_EQ(alloc_.stats().num_device_alloc, 2);
  alloc_.deallocate(b);
}

TEST_F(CachingAllocator, BestFitPicksSmallestSufficientBlock) {
  // Free blocks of 12 and 14 MiB, each a segment of its own.
  void* big = alloc_.allocate(12 * MiB);
  void* mid = alloc_.allocate(14 * MiB);
  alloc_.deallocate(big);
  alloc_.deallocate(mid);
  void* p = alloc_.allocate(12 * MiB);
  EXPECT_EQ(p, big);  // 12 MiB segment fits exactly; 14 MiB would waste
  alloc_.deallocate(p);
}

TEST_F(CachingAllocator, SplitsAndMergesNeighbours) {
  void* a = alloc_.allocate(2 * MiB);  // from a 20 MiB segment
  void* b = alloc_.allocate(2 * MiB);  // the next part of the same segment
  EXPECT_EQ(static_cast<char*>(b), static_cast<char*>(a) + 2 * MiB);
  auto s = alloc_.stats();
  EXPECT_EQ(s.segment.all().current, 1);
  EXPECT_EQ(s.inactive_split.all().current, 1);
  EXPECT_EQ(s.inactive_split_bytes.all().current, std::int64_t(16 * MiB));
  alloc_.deallocate(a);
  alloc_.deallocate(b);
  s = alloc_.stats();
  EXPECT_EQ(s.inactive_split.all().current, 0);  // merged back into one block
  const auto snap = alloc_.snapshot();
  ASSERT_EQ(snap.size(), 1u);
  ASSERT_EQ(snap[0].blocks.size(), 1u);
  EXPECT_EQ(snap[0].blocks[0].size, 20 * MiB);
  EXPECT_EQ(snap[0].blocks[0].state, block_state::inactive);
}

TEST_F(CachingAllocator, OversizeBlocksAreNotSplit) {
  caching_allocator alloc(rig_.dev, {.budget = std::nullopt, .max_split_size = 32 * MiB});
  void* a = alloc.allocate(64 * MiB);
  alloc.deallocate(a);
  // A small large-pool request must not carve up the 64 MiB oversize block.
  void* b = alloc.allocate(4 * MiB);
  EXPECT_NE(b, a);
  // A request within 20 MiB of it may reuse it, whole.
  void* c = alloc.allocate(50 * MiB);
  EXPECT_EQ(c, a);
  EXPECT_EQ(alloc.allocation_size(c), 64 * MiB);
  EXPECT_EQ(alloc.stats().oversize_allocations.current, 1);
  alloc.deallocate(b);
  alloc.deallocate(c);
}

TEST_F(CachingAllocator, EmptyCacheReturnsFullyFreeSegmentsOnly) {
  void* a = alloc_.allocate(4 * MiB);
  void* b = alloc_.allocate(18 * MiB);  // too big for the 16 MiB left in a's segment
  alloc_.deallocate(b);
  const std::size_t free_before = rig_.dev.memory().free_bytes;
  alloc_.empty_cache();
  EXPECT_EQ(rig_.dev.memory().free_bytes, free_before + 18 * MiB);
  EXPECT_EQ(reserved(alloc_), std::int64_t(20 * MiB));  // a's segment stays
  alloc_.deallocate(a);
  alloc_.empty_cache();
  EXPECT_EQ(reserved(alloc_), 0);
  EXPECT_EQ(rig_.dev.memory().free_bytes, 1 * GiB);
}

TEST_F(CachingAllocator, RecordStreamDelaysReuseUntilEventCompletes) {
  const stream_id side = rig_.dev.create_stream();
  void* a = alloc_.allocate(4 * MiB);
  std::vector<char> host(4 * MiB, 7);
  rig_.dev.hold_stream(side);  // a copy on `side` stays in flight
  rig_.dev.copy_async(host.data(), a, 4 * MiB, side);
  alloc_.record_stream(a, side);
  alloc_.deallocate(a);
  EXPECT_EQ(alloc_.stats().active.all().current, 1);  // pending free
  void* b = alloc_.allocate(4 * MiB);
  EXPECT_NE(a, b) << "reused while the side stream still reads it";
  ASSERT_EQ(alloc_.snapshot()[0].blocks[0].state, block_state::active_pending_free);
  rig_.dev.release_stream(side);
  rig_.dev.synchronize(side);
  void* c = alloc_.allocate(4 * MiB);
  EXPECT_EQ(c, a);  // event done: reusable
  alloc_.deallocate(b);
  alloc_.deallocate(c);
}

TEST_F(CachingAllocator, RecordStreamOnOwnStreamNeedsNoEvent) {
  void* a = alloc_.allocate(1 * MiB);
  alloc_.record_stream(a, default_stream);
  alloc_.deallocate(a);
  EXPECT_EQ(alloc_.stats().active.all().current, 0);
}

// deallocate is noexcept (STYLE.md's contract): a double free or a foreign
// pointer cannot be thrown back, and carrying on would corrupt the cache, so
// it ends the process naming the pointer, as free() does.
static_assert(noexcept(std::declval<caching_allocator&>().deallocate(nullptr)));

TEST_F(CachingAllocator, DoubleFreeEndsTheProcessWithAMessage) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  void* a = alloc_.allocate(1 * MiB);
  alloc_.deallocate(a);
  EXPECT_DEATH(alloc_.deallocate(a), "deallocate\\(0x[0-9a-f]+\\): this pointer is not allocated by this allocator");
}

TEST_F(CachingAllocator, ForeignPointerEndsTheProcessOnFreeAndThrowsElsewhere) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  int x = 0;
  EXPECT_DEATH(alloc_.deallocate(&x), "a double free, or memory from elsewhere");
  void* a = alloc_.allocate(1 * MiB);
  EXPECT_DEATH(alloc_.deallocate(static_cast<char*>(a) + 512), "not allocated by this allocator");  // interior
  EXPECT_EQ(alloc_.allocation_size(&x), 0u);  // how a caller handed foreign pointers tells them apart
  EXPECT_THROW(alloc_.record_stream(&x, default_stream), invalid_argument);
  alloc_.deallocate(a);
}

TEST_F(CachingAllocator, UnknownStreamThrows) {
  EXPECT_THROW(alloc_.allocate(1024, stream_id{12345}), invalid_argument);
  void* a = alloc_.allocate(1024);
  EXPECT_THROW(alloc_.record_stream(a, stream_id{12345}), invalid_argument);
  alloc_.deallocate(a);
  EXPECT_EQ(reserved(alloc_), std::int64_t(2 * MiB));
}

TEST_F(CachingAllocator, RequestLargerThanDeviceIsOutOfMemory) {
  try {
    alloc_.allocate(2 * GiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("larger than the device's total memory"), std::string::npos) << e.what();
  }
  EXPECT_EQ(alloc_.stats().num_ooms, 1);
  EXPECT_THROW(alloc_.allocate(SIZE_MAX), out_of_memory);  // no overflow in rounding
}

TEST_F(CachingAllocator, DeviceExhaustionIsOutOfMemoryWithFigures) {
  std::vector<void*> held;
  for (int i = 0; i < 4; ++i) held.push_back(alloc_.allocate(200 * MiB));
  try {
    alloc_.allocate(300 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("tried to allocate 300.00 MiB"), std::string::npos) << m;
    EXPECT_NE(m.find("800.00 MiB allocated"), std::string::npos) << m;
    EXPECT_NE(m.find("Device: 1.00 GiB total"), std::string::npos) << m;
  }
  for (void* p : held) alloc_.deallocate(p);
}

TEST_F(CachingAllocator, SnapshotDescribesSegmentsAndBlocks) {
  void* a = alloc_.allocate(1000);
  void* b = alloc_.allocate(5 * MiB);
  const auto snap = alloc_.snapshot();
  ASSERT_EQ(snap.size(), 2u);
  std::size_t total = 0;
  for (const auto& seg : snap) {
    std::size_t sum = 0;
    std::uintptr_t next = seg.address;
    for (const auto& blk : seg.blocks) {
      EXPECT_EQ(blk.address, next);
      next += blk.size;
      sum += blk.size;
    }
    EXPECT_EQ(sum, seg.total_size);
    total += seg.total_size;
  }
  EXPECT_EQ(std::int64_t(total), reserved(alloc_));
  alloc_.deallocate(a);
  alloc_.deallocate(b);
}

TEST_F(CachingAllocator, ResetPeakAndAccumulated) {
  void* a = alloc_.allocate(8 * MiB);
  alloc_.deallocate(a);
  EXPECT_EQ(alloc_.stats().allocated_bytes.all().peak, std::int64_t(8 * MiB));
  alloc_.reset_peak_stats();
  EXPECT_EQ(alloc_.stats().allocated_bytes.all().peak, 0);
  alloc_.reset_accumulated_stats();
  EXPECT_EQ(alloc_.stats().allocated_bytes.all().allocated, 0);
  EXPECT_EQ(alloc_.stats().num_device_alloc, 0);
}

TEST_F(CachingAllocator, MemoryStatsUseTorchKeyNames) {
  void* a = alloc_.allocate(1 * MiB);
  const auto m = to_memory_stats(alloc_.stats());
  for (const char* key : {"allocated_bytes.all.current", "allocated_bytes.small_pool.peak",
                          "reserved_bytes.large_pool.allocated", "active_bytes.all.freed",
                          "inactive_split_bytes.all.current", "requested_bytes.all.current", "num_alloc_retries",
                          "num_ooms", "segment.all.current", "allocation.all.current", "num_device_alloc"}) {
    EXPECT_TRUE(m.count(key)) << key;
  }
  EXPECT_EQ(m.at("allocated_bytes.small_pool.current"), std::int64_t(1 * MiB));
  alloc_.deallocate(a);
}

TEST_F(CachingAllocator, ManyThreadsAllocateAndFree) {
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t) {
    threads.emplace_back([this, t] {
      std::vector<void*> mine;
      for (int i = 0; i < 2000; ++i) {
        const std::size_t bytes = 1 + static_cast<std::size_t>(i * 7919 + t * 104729) % (3 * MiB);
        void* p = alloc_.allocate(bytes);
        std::memset(p, t, std::min<std::size_t>(bytes, 64));
        mine.push_back(p);
        if (mine.size() > 8) {
          alloc_.deallocate(mine.front());
          mine.erase(mine.begin());
        }
      }
      for (void* p : mine) alloc_.deallocate(p);
    });
  }
  for (auto& th : threads) th.join();
  const auto s = alloc_.stats();
  EXPECT_EQ(s.allocated_bytes.all().current, 0);
  EXPECT_EQ(s.allocation.all().current, 0);
  EXPECT_EQ(s.active.all().current, 0);
}

}  // namespace
}  // namespace tp
