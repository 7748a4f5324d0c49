// The allocator's events: order, fields, and totals that match stats().

#include <gtest/gtest.h>

#include <optional>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator_test_support.hpp"
#include "core/errors.hpp"

namespace tp {
namespace {

using namespace tp::testing;
using kind = allocator_event_kind;

/// Records every event and the statistics the allocator reported with it.
class recording_observer final : public allocator_observer {
 public:
  std::vector<allocator_event> events;
  void on_event(const allocator_event& e) noexcept override { events.push_back(e); }
  std::vector<kind> kinds() const {
    std::vector<kind> out;
    for (const auto& e : events) out.push_back(e.kind);
    return out;
  }
  /// The latest event's kind; nullopt before the first.
  std::optional<kind> last_kind() const {
    if (events.empty()) return std::nullopt;
    return events[events.size() - 1].kind;
  }
};

class AllocatorObserver : public ::testing::Test {
 protected:
  void SetUp() override { alloc_.set_observer(&obs_); }
  void TearDown() override { alloc_.set_observer(nullptr); }
  simulated_rig rig_{1 * GiB};
  caching_allocator alloc_{rig_.dev};
  recording_observer obs_;
};

TEST_F(AllocatorObserver, ReportsSegmentAllocFreeInOrderWithTotals) {
  void* p = alloc_.allocate(3 * MiB);
  alloc_.deallocate(p);
  alloc_.empty_cache();
  // Nothing pending on other streams: the free is one folded event.
  ASSERT_EQ(obs_.kinds(), (std::vector<kind>{kind::segment_alloc, kind::alloc, kind::free, kind::segment_free}));
  const auto& seg = obs_.events[0];
  EXPECT_EQ(seg.bytes, 20 * MiB);
  EXPECT_EQ(seg.reserved_bytes, std::int64_t(20 * MiB));
  const auto& a = obs_.events[1];
  EXPECT_EQ(a.address, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(a.bytes, 3 * MiB);
  EXPECT_EQ(a.detail, 3 * MiB);
  EXPECT_EQ(a.allocated_bytes, std::int64_t(3 * MiB));
  EXPECT_EQ(obs_.events[2].address, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(obs_.events[2].bytes, 3 * MiB);
  EXPECT_EQ(obs_.events[2].allocated_bytes, 0);
  EXPECT_EQ(obs_.events[2].active_bytes, 0);  // totals after both halves
  EXPECT_EQ(obs_.events[3].reserved_bytes, 0);
}

TEST_F(AllocatorObserver, FreeCompletesOnlyAfterOtherStreamsEvents) {
  const stream_id side = rig_.dev.create_stream();
  void* p = alloc_.allocate(1 * MiB);
  alloc_.record_stream(p, side);
  rig_.dev.hold_stream(side);
  alloc_.deallocate(p);
  EXPECT_EQ(obs_.last_kind(), kind::free_requested);  // not folded: the block waits
  EXPECT_EQ(obs_.events.at(obs_.events.size() - 1).active_bytes, std::int64_t(1 * MiB));
  void* q = alloc_.allocate(1 * MiB);  // polls events: still pending
  EXPECT_NE(obs_.last_kind(), kind::free_completed);
  rig_.dev.release_stream(side);
  alloc_.deallocate(q);
  void* r = alloc_.allocate(512);  // polls again: p's free completes now
  bool completed_p = false;
  for (const auto& e : obs_.events) {
    completed_p |= e.kind == kind::free_completed && e.address == reinterpret_cast<std::uintptr_t>(p);
  }
  EXPECT_TRUE(completed_p);
  EXPECT_EQ(obs_.last_kind(), kind::alloc);
  alloc_.deallocate(r);
  EXPECT_EQ(obs_.last_kind(), kind::free);
}

TEST_F(AllocatorObserver, ReportsOomBudgetAndReclaim) {
  class nothing_to_give final : public reclaimer {
   public:
    std::size_t reclaim(std::size_t, stream_id) override { return 0; }
  } rec;
  alloc_.set_reclaimer(&rec);
  alloc_.set_budget(4 * MiB);
  EXPECT_THROW(alloc_.allocate(8 * MiB), out_of_memory);
  const auto k = obs_.kinds();
  ASSERT_EQ(k, (std::vector<kind>{kind::budget_change, kind::reclaim, kind::oom}));
  EXPECT_EQ(obs_.events[0].bytes, 4 * MiB);
  EXPECT_EQ(obs_.events[2].bytes, 8 * MiB);
  alloc_.set_reclaimer(nullptr);
}

TEST_F(AllocatorObserver, TotalsAlwaysMatchStatistics) {
  // Replaying the events' deltas reproduces the final statistics.
  std::vector<void*> ps;
  for (int i = 0; i < 50; ++i) ps.push_back(alloc_.allocate(std::size_t(1 + i) * 300 * KiB));
  for (std::size_t i = 0; i < ps.size(); i += 2) alloc_.deallocate(ps[i]);
  std::int64_t allocated = 0, reserved = 0;
  for (const auto& e : obs_.events) {
    if (e.kind == kind::alloc) allocated += std::int64_t(e.bytes);
    if (e.kind == kind::free_requested || e.kind == kind::free) allocated -= std::int64_t(e.bytes);
    if (e.kind == kind::segment_alloc) reserved += std::int64_t(e.bytes);
    if (e.kind == kind::segment_free) reserved -= std::int64_t(e.bytes);
    EXPECT_EQ(allocated, e.allocated_bytes);
    EXPECT_EQ(reserved, e.reserved_bytes);
  }
  EXPECT_EQ(allocated, alloc_.stats().allocated_bytes.all().current);
  for (std::size_t i = 1; i < ps.size(); i += 2) alloc_.deallocate(ps[i]);
}

}  // namespace
}  // namespace tp
