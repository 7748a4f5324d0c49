// Allocator-aware victims (Note [Allocator-aware victims] in
// runtime/allocator_aware_eviction.hpp), with the real caching allocator
// (expandable segments, 2 MiB granules) over the simulated device.

#include <gtest/gtest.h>

#include <memory>
#include <vector>

#include "runtime/runtime.hpp"
#include "runtime_test_support.hpp"

namespace tp {
namespace {

using namespace tp::testing;

// Blocks, in address order: A (1.5 MiB, tracked, least recently used),
// K1 (1.5 MiB, not tracked), C (6 MiB, tracked), K2 (1.5 MiB, not tracked);
// 12 MiB mapped, the budget. A 4 MiB request needs 4 MiB more mapped. LRU
// would evict A first, which frees no whole granule (K1 shares it); C frees
// two.
struct granule_layout {
  explicit granule_layout(bool aware)
      : rig({.budget = 12 * MiB, .expandable = true}),
        a(rig, 3 * MiB / 2, 1),
        k1(rig.alloc.allocate(3 * MiB / 2, rig.compute)),
        c(rig, 6 * MiB, 2),
        k2(rig.alloc.allocate(3 * MiB / 2, rig.compute)) {
    memory_runtime::options o;
    o.policy = policy_kind::lru;
    o.allocator_aware = aware;
    o.proactive_offload = false;
    o.prefetch_ahead = false;
    rt = std::make_unique<memory_runtime>(rig.dev, rig.alloc, rig.host, rig.clk, o);
    ta = rt->track(a, a.bytes(), rig.compute, 0);
    tc = rt->track(c, c.bytes(), rig.compute, 0);
  }
  ~granule_layout() {
    rt->untrack(ta);
    rt->untrack(tc);
    rt.reset();
    rig.alloc.deallocate(k1);
    rig.alloc.deallocate(k2);
  }
  runtime_rig rig;
  fake_binding a;
  void* k1;
  fake_binding c;
  void* k2;
  std::unique_ptr<memory_runtime> rt;
  tensor_id ta{}, tc{};
};

TEST(AllocatorAwareEviction, EvictsTheTensorWhoseBlockFreesWholeGranules) {
  granule_layout l(/*aware=*/true);
  ASSERT_EQ(l.rig.alloc.stats().reserved_bytes.all().current, std::int64_t(12 * MiB));
  void* p = l.rig.alloc.allocate(4 * MiB, l.rig.compute);
  EXPECT_EQ(l.rt->state(l.ta), tensor_state::resident);  // LRU's pick stayed: it would have freed nothing usable
  EXPECT_EQ(l.rt->state(l.tc), tensor_state::on_host);
  EXPECT_EQ(l.rt->stats().evictions, 1u);
  l.rig.alloc.deallocate(p);
  l.rt->access(l.tc);
  EXPECT_TRUE(l.c.verify());  // bit-identical after the round trip
}

TEST(AllocatorAwareEviction, WithoutItLruEvictsBothTensors) {
  granule_layout l(/*aware=*/false);
  void* p = l.rig.alloc.allocate(4 * MiB, l.rig.compute);
  EXPECT_EQ(l.rt->state(l.ta), tensor_state::on_host);
  EXPECT_EQ(l.rt->state(l.tc), tensor_state::on_host);
  EXPECT_EQ(l.rt->stats().evictions, 2u);
  l.rig.alloc.deallocate(p);
}

}  // namespace
}  // namespace tp
