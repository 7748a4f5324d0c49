// Expandable segments (Note [Expandable segments] in caching_allocator.hpp):
// growth by mapping granules, unmapping free granules under pressure before
// the reclaimer is asked, statistics, snapshots and trace records, on the
// simulated device (2 MiB granules).

#include <gtest/gtest.h>

#include <cstring>
#include <optional>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator_test_support.hpp"
#include "core/errors.hpp"

namespace tp {
namespace {

using namespace tp::testing;

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

/// Counts reclaim calls; frees the pointers it holds, in order.
class counting_reclaimer final : public reclaimer {
 public:
  explicit counting_reclaimer(caching_allocator& a) : alloc_(a) {}
  std::vector<std::pair<void*, std::size_t>> victims;
  int calls = 0;
  std::size_t asked = 0;
  std::size_t reclaim(std::size_t bytes, stream_id) override {
    ++calls;
    asked += bytes;
    std::size_t freed = 0;
    while (freed < bytes && !victims.empty()) {
      alloc_.deallocate(victims.front().first);
      freed += victims.front().second;
      victims.erase(victims.begin());
    }
    return freed;
  }

 private:
  caching_allocator& alloc_;
};

/// The allocator's records, kept in a vector.
class record_trace final : public allocator_log {
 public:
  record_trace() : allocator_log(nullptr, nullptr), buffer_(1 << 14) {}
  std::vector<allocator_record> records() const {
    const allocator_record* end = published_end();
    return end == nullptr ? std::vector<allocator_record>{} : std::vector<allocator_record>(buffer_.data(), end);
  }

 private:
  allocator_record* next_chunk() noexcept override {
    if (started_) return nullptr;
    started_ = true;
    start_chunk(buffer_.data(), buffer_.data() + buffer_.size());
    return buffer_.data();
  }
  std::vector<allocator_record> buffer_;
  bool started_ = false;
};

class ExpandableSegments : public ::testing::Test {
 protected:
  std::size_t mapped_on_device() const {
    const memory_info m = rig_.dev.memory();
    return m.total_bytes - m.free_bytes;
  }
  simulated_rig rig_{1 * GiB};
  const std::size_t g_ = rig_.dev.granularity();  // 2 MiB
};

TEST_F(ExpandableSegments, GrowsByMappingGranulesAfterTheLastBlock) {
  caching_allocator a(rig_.dev, expandable());
  void* p = a.allocate(3 * MiB);
  EXPECT_EQ(reserved(a), std::int64_t(4 * MiB));  // two granules, not a 20 MiB segment
  // 1 MiB of the second granule is free: the next 5 MiB map only 4 MiB more,
  // right after p, and the block spans both mappings.
  void* q = a.allocate(5 * MiB);
  EXPECT_EQ(addr(q), addr(p) + 3 * MiB);
  EXPECT_EQ(reserved(a), std::int64_t(8 * MiB));
  EXPECT_EQ(mapped_on_device(), 8 * MiB);
  const allocator_stats s = a.stats();
  EXPECT_EQ(s.num_device_alloc, 2);       // two maps
  EXPECT_EQ(s.segment.all().current, 1);  // one mapped range
  EXPECT_EQ(s.allocated_bytes.all().current, std::int64_t(8 * MiB));
  a.deallocate(p);
  a.deallocate(q);
}

TEST_F(ExpandableSegments, SplitsEveryRemainderInTheLargePool) {
  caching_allocator a(rig_.dev, expandable());
  void* p = a.allocate(2 * MiB + 512);  // a plain 20 MiB segment would keep 2 MiB + 512 B as one block too
  EXPECT_EQ(a.allocation_size(p), 2 * MiB + 512);
  EXPECT_EQ(reserved(a), std::int64_t(4 * MiB));
  EXPECT_EQ(a.stats().inactive_split_bytes.all().current, std::int64_t(2 * MiB - 512));
  a.deallocate(p);
  EXPECT_EQ(a.stats().inactive_split.all().current, 0);  // merged back: one free block, the whole range
}

// plan_growth: a free oversize block (max_split_size) may not serve a small
// request, and must not make it map all the unmapped space beside it.
TEST_F(ExpandableSegments, GrowsAGranuleAwayFromAFreeOversizeNeighbour) {
  caching_allocator::options o = expandable();
  o.max_split_size = 4 * MiB;
  caching_allocator a(rig_.dev, o);
  void* big = a.allocate(8 * MiB);     // [0, 8)
  void* hole = a.allocate(30 * MiB);   // [8, 38)
  void* right = a.allocate(4 * MiB);   // [38, 42), then the unmapped rest
  a.deallocate(hole);
  a.empty_cache();  // unmaps [8, 38)
  a.deallocate(big);
  a.deallocate(right);  // two free oversize blocks around the hole; the second before the rest
  ASSERT_EQ(reserved(a), std::int64_t(12 * MiB));
  // 1.5 MiB may come from neither; building on them would map all 30 MiB of
  // the hole (and nothing after the second). It maps one granule instead,
  // a granule away from the first.
  void* p = a.allocate(MiB + MiB / 2);
  EXPECT_EQ(addr(p), addr(big) + 10 * MiB);
  EXPECT_EQ(reserved(a), std::int64_t(14 * MiB));
  for (const segment_snapshot& s : a.snapshot()) EXPECT_TRUE(s.expandable);
  a.deallocate(p);
  a.empty_cache();
  EXPECT_EQ(reserved(a), 0);
}

TEST_F(ExpandableSegments, SnapshotShowsEachMappedRangeAsASegment) {
  caching_allocator a(rig_.dev, expandable());
  std::vector<void*> ps;
  for (int i = 0; i < 3; ++i) ps.push_back(a.allocate(4 * MiB));
  void* small = a.allocate(4 * KiB);
  a.deallocate(ps[1]);
  a.empty_cache();  // unmaps the middle 4 MiB: the large range splits in two
  const std::vector<segment_snapshot> snap = a.snapshot();
  ASSERT_EQ(snap.size(), 3u);  // two large ranges, one small
  std::int64_t total = 0;
  for (const segment_snapshot& s : snap) {
    EXPECT_TRUE(s.expandable);
    EXPECT_EQ(s.total_size % g_, 0u);
    total += std::int64_t(s.total_size);
  }
  const allocator_stats st = a.stats();
  EXPECT_EQ(st.segment.all().current, 3);
  EXPECT_EQ(st.segment.of(pool_kind::small).current, 1);
  EXPECT_EQ(total, st.reserved_bytes.all().current);
  EXPECT_EQ(total, std::int64_t(10 * MiB));
  a.deallocate(ps[0]);
  a.deallocate(ps[2]);
  a.deallocate(small);
  a.empty_cache();
  EXPECT_EQ(reserved(a), 0);
  EXPECT_TRUE(a.snapshot().empty());
  EXPECT_EQ(mapped_on_device(), 0u);
}

TEST_F(ExpandableSegments, UnmapsFreeGranulesBeforeAskingTheReclaimer) {
  // Budget 12 MiB. A and C stay; B (6 MiB) between them is freed. A 7 MiB
  // request fits nowhere mapped; B's 6 MiB are whole granules, which are
  // unmapped and mapped again after C, without any eviction.
  caching_allocator a(rig_.dev, expandable(12 * MiB));
  counting_reclaimer r(a);
  a.set_reclaimer(&r);
  void* pa = a.allocate(2 * MiB);
  void* pb = a.allocate(6 * MiB);
  void* pc = a.allocate(2 * MiB);
  a.deallocate(pb);
  void* big = a.allocate(7 * MiB);
  EXPECT_EQ(r.calls, 0);
  EXPECT_LE(reserved(a), std::int64_t(12 * MiB));
  EXPECT_GE(a.stats().num_device_free, 1);
  a.deallocate(big);
  a.deallocate(pa);
  a.deallocate(pc);
  a.set_reclaimer(nullptr);
}

TEST_F(ExpandableSegments, PlainSegmentsNeedTheReclaimerWhereExpandableOnesDoNot) {
  // Twelve 3 MiB blocks fill a 40 MiB budget (two 20 MiB plain segments);
  // every other one is freed: 18 MiB free, scattered, nothing to evict. Each
  // free block holds a whole granule, which an expandable segment can unmap.
  for (const bool is_expandable : {false, true}) {
    SCOPED_TRACE(is_expandable ? "expandable" : "plain");
    caching_allocator a(rig_.dev, expandable(40 * MiB, is_expandable));
    counting_reclaimer r(a);
    a.set_reclaimer(&r);
    std::vector<void*> keep, hold;
    for (int i = 0; i < 12; ++i) (i % 2 == 0 ? keep : hold).push_back(a.allocate(3 * MiB));
    for (void* p : hold) a.deallocate(p);
    void* big = nullptr;
    try {
      big = a.allocate(12 * MiB);
    } catch (const out_of_memory&) {
    }
    if (is_expandable) {
      EXPECT_NE(big, nullptr);
      EXPECT_EQ(r.calls, 0);
    } else {
      EXPECT_EQ(big, nullptr);  // 18 MiB free, but no 12 MiB of it contiguous and nothing left to evict
      EXPECT_EQ(r.calls, 1);
    }
    if (big != nullptr) a.deallocate(big);
    for (void* p : keep) a.deallocate(p);
    a.set_reclaimer(nullptr);
  }
}

TEST_F(ExpandableSegments, AsksTheReclaimerOnlyForWhatUnmappingCannotGive) {
  caching_allocator a(rig_.dev, expandable(16 * MiB));
  counting_reclaimer r(a);
  a.set_reclaimer(&r);
  void* x = a.allocate(8 * MiB);
  void* y = a.allocate(8 * MiB);
  r.victims.emplace_back(x, 8 * MiB);
  void* z = a.allocate(4 * MiB);  // budget full, nothing free: evict
  EXPECT_EQ(r.calls, 1);
  EXPECT_EQ(r.asked, 4 * MiB);
  EXPECT_LE(reserved(a), std::int64_t(16 * MiB));
  a.deallocate(z);
  a.deallocate(y);
  a.set_reclaimer(nullptr);
}

TEST_F(ExpandableSegments, PhysicalMemoryMovesBetweenStreams) {
  // Blocks never change streams, but granules do: a free block of stream 1
  // is unmapped to map what stream 2 asks for, within a budget of one block.
  caching_allocator a(rig_.dev, expandable(8 * MiB));
  const stream_id s1 = rig_.dev.create_stream();
  const stream_id s2 = rig_.dev.create_stream();
  void* p = a.allocate(8 * MiB, s1);
  a.deallocate(p);
  void* q = a.allocate(8 * MiB, s2);
  EXPECT_EQ(reserved(a), std::int64_t(8 * MiB));
  a.deallocate(q);
  a.empty_cache();
  rig_.dev.destroy_stream(s1);
  rig_.dev.destroy_stream(s2);
}

TEST_F(ExpandableSegments, ContentsSurviveUnmappingAndRemappingAround) {
  caching_allocator a(rig_.dev, expandable());
  auto* left = static_cast<unsigned char*>(a.allocate(3 * MiB));
  void* middle = a.allocate(6 * MiB);
  auto* right = static_cast<unsigned char*>(a.allocate(3 * MiB));
  std::memset(left, 0x5a, 3 * MiB);
  std::memset(right, 0xa5, 3 * MiB);
  a.deallocate(middle);
  a.empty_cache();  // unmaps the middle's whole granules, next to both
  auto* again = static_cast<unsigned char*>(a.allocate(5 * MiB));
  std::memset(again, 0x11, 5 * MiB);
  for (std::size_t i = 0; i < 3 * MiB; i += 4093) {
    ASSERT_EQ(left[i], 0x5a) << i;
    ASSERT_EQ(right[i], 0xa5) << i;
  }
  a.deallocate(again);
  a.deallocate(left);
  a.deallocate(right);
}

TEST_F(ExpandableSegments, SetBudgetBelowReservedUnmapsFreeGranules) {
  caching_allocator a(rig_.dev, expandable());
  void* p = a.allocate(4 * MiB);
  void* q = a.allocate(16 * MiB);
  a.deallocate(q);
  EXPECT_EQ(reserved(a), std::int64_t(20 * MiB));
  a.set_budget(6 * MiB);
  EXPECT_LE(reserved(a), std::int64_t(6 * MiB));
  EXPECT_THROW(a.set_budget(2 * MiB), invalid_argument);  // 4 MiB stay in use
  a.deallocate(p);
}

TEST_F(ExpandableSegments, RecordsMapsAndUnmapsWithTotals) {
  caching_allocator a(rig_.dev, expandable());
  record_trace t;
  a.set_log(&t);
  void* p = a.allocate(3 * MiB);
  a.deallocate(p);
  a.empty_cache();
  a.set_log(nullptr);
  const std::vector<allocator_record> r = t.records();
  ASSERT_EQ(r.size(), 5u);
  EXPECT_EQ(r[0].kind, allocator_event_kind::segment_map);
  EXPECT_EQ(r[0].address, addr(p));
  EXPECT_EQ(r[0].bytes, 4 * MiB);
  EXPECT_EQ(r[0].reserved_bytes, std::int64_t(4 * MiB));
  EXPECT_EQ(r[0].detail % g_, 0u);  // the segment's base
  EXPECT_EQ(r[1].kind, allocator_event_kind::alloc);
  EXPECT_EQ(r[2].kind, allocator_event_kind::free);
  // empty_cache waits for the segment's stream, once, then unmaps
  // (releasing the address space is not an event).
  EXPECT_EQ(r[3].kind, allocator_event_kind::device_sync);
  EXPECT_EQ(r[3].bytes, 4 * MiB);
  EXPECT_EQ(r[3].stream, to_underlying(default_stream));
  EXPECT_EQ(r[3].detail, 0u);  // one stream, not the whole device
  EXPECT_EQ(r[4].kind, allocator_event_kind::segment_unmap);
  EXPECT_EQ(r[4].address, addr(p));
  EXPECT_EQ(r[4].bytes, 4 * MiB);
  EXPECT_EQ(r[4].reserved_bytes, 0);
  EXPECT_EQ(r[4].detail, r[0].detail);
  EXPECT_EQ(a.stats().num_device_free, 1);
  EXPECT_EQ(a.stats().num_device_syncs, 1);
}

TEST_F(ExpandableSegments, ASmallRequestMapsASmallGranuleAndLargeOnesStayApart) {
  caching_allocator a(rig_.dev, expandable());
  void* s = a.allocate(100 * KiB);
  void* l = a.allocate(3 * MiB);
  const allocator_stats st = a.stats();
  EXPECT_EQ(st.reserved_bytes.of(pool_kind::small).current, std::int64_t(2 * MiB));
  EXPECT_EQ(st.reserved_bytes.of(pool_kind::large).current, std::int64_t(4 * MiB));
  a.deallocate(s);
  a.deallocate(l);
}

TEST_F(ExpandableSegments, OutOfMemoryNamesTheFiguresAndChangesNothing) {
  caching_allocator a(rig_.dev, expandable(8 * MiB));
  void* p = a.allocate(6 * MiB);
  try {
    a.allocate(4 * MiB);
    FAIL() << "expected out_of_memory";
  } catch (const out_of_memory& e) {
    EXPECT_NE(std::string(e.what()).find("Budget"), std::string::npos) << e.what();
  }
  EXPECT_EQ(reserved(a), std::int64_t(6 * MiB));
  a.deallocate(p);
}

TEST_F(ExpandableSegments, DestroyingTheAllocatorReturnsEverything) {
  {
    caching_allocator a(rig_.dev, expandable());
    (void)a.allocate(5 * MiB);  // still allocated at destruction
    void* q = a.allocate(64 * KiB);
    a.deallocate(q);
  }
  EXPECT_EQ(mapped_on_device(), 0u);
}

}  // namespace
}  // namespace tp
