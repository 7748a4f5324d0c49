// Where blocks go inside expandable segments (Note [Granule-aware carving]
// and Note [Small requests from large blocks] in
// caching_allocator_blocks.cpp, Note [Plans the budget can pay for] in
// caching_allocator_expandable.cpp): placements that keep free bytes in whole
// granules, which the allocator can unmap, and growth that fits the budget,
// on the simulated device (2 MiB granules). Offsets in the comments are MiB
// from the segment's start.

#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator_test_support.hpp"

namespace tp {
namespace {

using namespace tp::testing;

std::uintptr_t addr(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

class GranulePlacement : public ::testing::Test {
 protected:
  simulated_rig rig_{1 * GiB};
};

// Note [Granule-aware carving]: a request is carved from the end of a free
// range when that leaves the rest more whole granules to unmap.
TEST_F(GranulePlacement, CarvesFromTheEndWhenThatLeavesMoreWholeGranulesFree) {
  caching_allocator a(rig_.dev, expandable());
  void* b = a.allocate(6 * MiB + MiB / 2);  // [0, 6.5)
  void* keep = a.allocate(MiB + MiB / 2);   // [6.5, 8): keeps the last granule mapped
  EXPECT_EQ(addr(keep), addr(b) + 6 * MiB + MiB / 2);
  a.deallocate(b);  // free: [0, 6.5)
  // From the front, 2.5 MiB would leave [2.5, 6.5): one whole granule. From
  // the end it leaves [0, 4): two.
  void* c = a.allocate(2 * MiB + MiB / 2);
  EXPECT_EQ(addr(c), addr(b) + 4 * MiB);
  a.empty_cache();
  EXPECT_EQ(reserved(a), std::int64_t(4 * MiB));  // [4, 8); from the front it would be [0, 4) and [6, 8)
  // On a tie the front, as before: [0, 4) free, 2 MiB from either end leaves one granule.
  void* d = a.allocate(2 * MiB);
  EXPECT_EQ(addr(d), addr(b));
  for (void* p : {keep, c, d}) a.deallocate(p);
}

// Note [Small requests from large blocks]: a small request maps a small
// granule rather than take the stranded tail of a large one, which it would
// keep mapped after the large block is gone; it takes the tail only when
// nothing else serves it.
TEST_F(GranulePlacement, ASmallRequestTakesTheFreeTailOfAGranuleOnlyAsTheLastResort) {
  caching_allocator a(rig_.dev, expandable());
  void* l = a.allocate(3 * MiB);  // maps [0, 4): [3, 4) is free and can never be unmapped
  void* s = a.allocate(100 * KiB);
  EXPECT_NE(addr(s), addr(l) + 3 * MiB);
  allocator_stats st = a.stats();
  EXPECT_EQ(st.reserved_bytes.of(pool_kind::small).current, std::int64_t(2 * MiB));
  a.deallocate(l);  // the large granules empty: whole, they can be unmapped
  a.empty_cache();
  EXPECT_EQ(a.stats().reserved_bytes.all().current, std::int64_t(2 * MiB));
  a.deallocate(s);
  a.empty_cache();

  // Under a budget of the large block's granules, with nothing to evict: the tail.
  caching_allocator b(rig_.dev, expandable());
  b.set_budget(4 * MiB);
  void* l2 = b.allocate(3 * MiB);
  void* s2 = b.allocate(100 * KiB);
  EXPECT_EQ(addr(s2), addr(l2) + 3 * MiB);
  st = b.stats();
  EXPECT_EQ(st.reserved_bytes.of(pool_kind::small).current, 0);
  EXPECT_EQ(st.reserved_bytes.all().current, std::int64_t(4 * MiB));
  for (void* p : {l2, s2}) b.deallocate(p);
}

// Note [Small requests from large blocks], the other way: a large request
// maps granules of its own while the budget allows; under a full budget,
// after the reclaimer, it takes a free range of the small pool that spans
// two granules (which no unmap can give back: small blocks share both).
TEST_F(GranulePlacement, ALargeRequestTakesAFreeRangeOfTheSmallPoolOnlyAsTheLastResort) {
  for (const bool budget : {false, true}) {
    caching_allocator a(rig_.dev, expandable());
    idle_reclaimer r;
    a.set_reclaimer(&r);
    if (budget) a.set_budget(4 * MiB);
    std::vector<void*> small;
    for (int i = 0; i < 16; ++i) small.push_back(a.allocate(256 * KiB));  // the small pool's [0, 4)
    for (int i = 4; i < 12; ++i) a.deallocate(small[static_cast<std::size_t>(i)]);  // free: [1, 3)
    void* large = a.allocate(2 * MiB);
    const allocator_stats st = a.stats();
    if (budget) {
      EXPECT_EQ(addr(large), addr(small[4])) << "the small pool's free range, the last resort";
      EXPECT_GE(r.calls, 1) << "the reclaimer is asked first";
      EXPECT_EQ(st.reserved_bytes.all().current, std::int64_t(4 * MiB));
      EXPECT_EQ(st.allocated_bytes.of(pool_kind::small).current, std::int64_t(4 * MiB));
    } else {
      EXPECT_EQ(st.reserved_bytes.of(pool_kind::large).current, std::int64_t(2 * MiB)) << "a granule of its own";
      EXPECT_EQ(r.calls, 0);
    }
    a.deallocate(large);  // a small-pool block merges back into its free range
    for (int i : {0, 1, 2, 3, 12, 13, 14, 15}) a.deallocate(small[static_cast<std::size_t>(i)]);
    a.set_reclaimer(nullptr);
  }
}

// Note [Granule-aware carving]: a request of whole granules goes on a
// granule boundary when that leaves as many whole granules free, even off
// both ends of the free block; one of another size stays at the front.
TEST_F(GranulePlacement, ARequestOfWholeGranulesSitsOnGranuleBoundaries) {
  caching_allocator a(rig_.dev, expandable());
  void* x = a.allocate(MiB + MiB / 2);  // [0, 1.5)
  // 2 MiB more: from the front it would straddle [0, 4); it maps [2, 4) and
  // takes it, leaving [1.5, 2) free.
  void* y = a.allocate(2 * MiB);
  EXPECT_EQ(addr(y), addr(x) + 2 * MiB);
  EXPECT_EQ(reserved(a), std::int64_t(4 * MiB));
  a.deallocate(y);                            // free: [1.5, 4)
  void* z = a.allocate(MiB + MiB / 2);        // not whole granules: the front, [1.5, 3)
  EXPECT_EQ(addr(z), addr(x) + MiB + MiB / 2);
  a.deallocate(z);                            // free: [1.5, 4)
  void* big = a.allocate(7 * MiB);            // [1.5, 8.5): maps [4, 10)
  void* keep = a.allocate(MiB + MiB / 2);     // [8.5, 10): keeps [8, 10) mapped
  EXPECT_EQ(addr(keep), addr(big) + 7 * MiB);
  a.deallocate(big);                          // free: [1.5, 8.5)
  // 4 MiB leaves one whole granule free at the front ([1.5, 5.5)), at the
  // end ([4.5, 8.5)) and at [2, 6), which alone fills the two granules it
  // touches: the free block splits in three.
  void* w = a.allocate(4 * MiB);
  EXPECT_EQ(addr(w), addr(x) + 2 * MiB);
  a.deallocate(x);  // granule [0, 2) is now wholly free and unmaps
  a.empty_cache();
  EXPECT_EQ(reserved(a), std::int64_t(6 * MiB));  // [2, 6) and [8, 10)
  for (void* p : {w, keep}) a.deallocate(p);
}

// Note [Plans the budget can pay for]: the cheapest growth builds on two free
// neighbours and maps the 8 MiB between them, more than the 6 MiB of
// headroom; mapping 14 MiB fresh costs more, but unmapping those neighbours
// pays for it. Before, the allocator held on to the cheaper plan and ran out
// of memory with 8 MiB of unmappable granules and no reclaimer to ask.
TEST_F(GranulePlacement, GrowsWhereUnmappingCanPayForItNotWhereItIsCheapest) {
  caching_allocator a(rig_.dev, expandable());
  void* l = a.allocate(4 * MiB);     // [0, 4)
  void* gap = a.allocate(8 * MiB);   // [4, 12)
  void* r = a.allocate(4 * MiB);     // [12, 16)
  void* keep = a.allocate(2 * MiB);  // [16, 18)
  a.deallocate(gap);
  a.empty_cache();  // [4, 12) unmapped
  a.deallocate(l);
  a.deallocate(r);  // free: [0, 4) and [12, 16); 10 MiB reserved
  a.set_budget(16 * MiB);
  // [0, 4) + [4, 12) + [12, 16) would serve 14 MiB for 8 MiB of mapping.
  void* big = a.allocate(14 * MiB);
  EXPECT_EQ(addr(big), addr(l));  // [0, 14), mapped afresh once [0, 4) and [12, 16) were unmapped
  EXPECT_EQ(reserved(a), std::int64_t(16 * MiB));
  for (void* p : {big, keep}) a.deallocate(p);
}

// runtime_allocator::stranded_bytes(): the free bytes blocks in use keep
// mapped, which no release of the cache gives back.
TEST_F(GranulePlacement, StrandedBytesAreTheFreeBytesOutsideWholeGranules) {
  caching_allocator a(rig_.dev, expandable());
  void* b = a.allocate(3 * MiB);     // [0, 3)
  void* c = a.allocate(3 * MiB);     // [3, 6)
  void* keep = a.allocate(2 * MiB);  // [6, 8)
  EXPECT_EQ(a.stranded_bytes(), 0u);
  a.deallocate(c);  // free [3, 6): [4, 6) is a whole granule, [3, 4) shares one with b
  EXPECT_EQ(a.stranded_bytes(), 1 * MiB);
  a.empty_cache();
  EXPECT_EQ(a.stranded_bytes(), 1 * MiB);  // still mapped
  a.deallocate(b);  // [0, 6) free, every granule whole
  EXPECT_EQ(a.stranded_bytes(), 0u);
  a.deallocate(keep);
}

TEST_F(GranulePlacement, StrandedBytesOfPlainSegmentsAreTheFreeBlocksOfSegmentsInUse) {
  caching_allocator a(rig_.dev, {});
  void* b = a.allocate(3 * MiB);  // a 20 MiB segment: 17 MiB free beside b
  EXPECT_EQ(a.stranded_bytes(), 17 * MiB);
  a.deallocate(b);  // the segment is wholly free: a release gives it back
  EXPECT_EQ(a.stranded_bytes(), 0u);
}

}  // namespace
}  // namespace tp
