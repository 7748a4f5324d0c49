// The allocator's records (Note [Allocator log]): order, fields, totals
// that match stats(), chunk changes and a full trace.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <optional>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator_test_support.hpp"
#include "core/errors.hpp"

namespace tp {
namespace {

using namespace tp::testing;
using kind = allocator_event_kind;

/// A trace over a vector, handed to the allocator `chunk` records at a time
/// (so chunk changes happen), that drops once `capacity` records are taken.
class buffer_trace final : public allocator_log {
 public:
  explicit buffer_trace(std::size_t capacity = 4096, std::size_t chunk = 3, const tp::clock* clock = nullptr)
      : allocator_log(clock, &context_word), buffer_(capacity), chunk_(chunk) {}

  std::atomic<std::uint64_t> context_word{0};
  std::size_t dropped = 0;

  /// Every published record, in order.
  std::vector<allocator_record> events() const {
    const allocator_record* end = published_end();
    if (end == nullptr) return {};
    return {buffer_.data(), end};
  }
  std::vector<kind> kinds() const {
    std::vector<kind> out;
    for (const auto& e : events()) out.push_back(e.kind);
    return out;
  }
  /// The latest record's kind; nullopt before the first.
  std::optional<kind> last_kind() const {
    const auto all = events();
    if (all.empty()) return std::nullopt;
    return all.back().kind;
  }

 private:
  allocator_record* next_chunk() noexcept override {
    if (taken_ == buffer_.size()) {
      ++dropped;
      return nullptr;
    }
    allocator_record* first = buffer_.data() + taken_;
    taken_ = std::min(buffer_.size(), taken_ + chunk_);
    start_chunk(first, buffer_.data() + taken_);
    return first;
  }
  std::vector<allocator_record> buffer_;
  const std::size_t chunk_;
  std::size_t taken_ = 0;
};

class AllocatorLog : public ::testing::Test {
 protected:
  void SetUp() override { alloc_.set_log(&obs_); }
  void TearDown() override { alloc_.set_log(nullptr); }
  simulated_rig rig_{1 * GiB};
  caching_allocator alloc_{rig_.dev};
  buffer_trace obs_;
};

TEST_F(AllocatorLog, ReportsSegmentAllocFreeInOrderWithTotals) {
  void* p = alloc_.allocate(3 * MiB);
  alloc_.deallocate(p);
  alloc_.empty_cache();
  // Nothing pending on other streams: the free is one folded event. Freeing
  // the segment waits for the whole device first (cudaFree does).
  ASSERT_EQ(obs_.kinds(), (std::vector<kind>{kind::segment_alloc, kind::alloc, kind::free, kind::device_sync,
                                             kind::segment_free}));
  const std::vector<allocator_record> all = obs_.events();
  const auto& seg = all[0];
  EXPECT_EQ(seg.bytes, 20 * MiB);
  EXPECT_EQ(seg.reserved_bytes, std::int64_t(20 * MiB));
  const auto& a = all[1];
  EXPECT_EQ(a.address, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(a.bytes, 3 * MiB);
  EXPECT_EQ(a.detail, 3 * MiB);
  EXPECT_EQ(a.allocated_bytes, std::int64_t(3 * MiB));
  EXPECT_EQ(obs_.events()[2].address, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(obs_.events()[2].bytes, 3 * MiB);
  EXPECT_EQ(obs_.events()[2].allocated_bytes, 0);
  EXPECT_EQ(obs_.events()[3].bytes, 20 * MiB);
  EXPECT_EQ(obs_.events()[3].detail, 1u);  // the whole device
  EXPECT_EQ(obs_.events()[4].reserved_bytes, 0);
  EXPECT_EQ(alloc_.stats().num_device_syncs, 1);
}

TEST_F(AllocatorLog, FreeCompletesOnlyAfterOtherStreamsEvents) {
  const stream_id side = rig_.dev.create_stream();
  void* p = alloc_.allocate(1 * MiB);
  alloc_.record_stream(p, side);
  rig_.dev.hold_stream(side);
  alloc_.deallocate(p);
  EXPECT_EQ(obs_.last_kind(), kind::free_requested);  // not folded: the block waits
  EXPECT_EQ(obs_.events().back().allocated_bytes, 0);  // freed, though not yet reusable
  void* q = alloc_.allocate(1 * MiB);  // polls events: still pending
  EXPECT_NE(obs_.last_kind(), kind::free_completed);
  rig_.dev.release_stream(side);
  alloc_.deallocate(q);
  void* r = alloc_.allocate(512);  // polls again: p's free completes now
  bool completed_p = false;
  for (const auto& e : obs_.events()) {
    completed_p |= e.kind == kind::free_completed && e.address == reinterpret_cast<std::uintptr_t>(p);
  }
  EXPECT_TRUE(completed_p);
  EXPECT_EQ(obs_.last_kind(), kind::alloc);
  alloc_.deallocate(r);
  EXPECT_EQ(obs_.last_kind(), kind::free);
}

TEST_F(AllocatorLog, ReportsOomBudgetAndReclaim) {
  class nothing_to_give final : public reclaimer {
   public:
    std::size_t reclaim(std::size_t, stream_id) override { return 0; }
  } rec;
  alloc_.set_reclaimer(&rec);
  alloc_.set_budget(4 * MiB);
  EXPECT_THROW(alloc_.allocate(8 * MiB), out_of_memory);
  const auto k = obs_.kinds();
  ASSERT_EQ(k, (std::vector<kind>{kind::budget_change, kind::reclaim, kind::oom}));
  EXPECT_EQ(obs_.events()[0].bytes, 4 * MiB);
  EXPECT_EQ(obs_.events()[2].bytes, 8 * MiB);
  alloc_.set_reclaimer(nullptr);
}

TEST_F(AllocatorLog, TotalsAlwaysMatchStatistics) {
  // Replaying the events' deltas reproduces the final statistics.
  std::vector<void*> ps;
  for (int i = 0; i < 50; ++i) ps.push_back(alloc_.allocate(std::size_t(1 + i) * 300 * KiB));
  for (std::size_t i = 0; i < ps.size(); i += 2) alloc_.deallocate(ps[i]);
  std::int64_t allocated = 0, reserved = 0;
  for (const auto& e : obs_.events()) {
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

TEST_F(AllocatorLog, StampsTheTracesClockAndContextOnAllocationsOnly) {
  manual_clock clk(7000);
  buffer_trace trace(64, 64, &clk);
  trace.context_word = 42;
  alloc_.set_log(&trace);
  void* p = alloc_.allocate(1 * MiB);
  clk.advance(5);
  alloc_.deallocate(p);
  alloc_.set_log(&obs_);
  const auto e = trace.events();
  ASSERT_EQ(trace.kinds(), (std::vector<kind>{kind::segment_alloc, kind::alloc, kind::free}));
  EXPECT_EQ(e[1].time, 7000u);
  EXPECT_EQ(e[2].time, 7005u);
  EXPECT_EQ(e[1].context, 42u);
  EXPECT_EQ(e[0].context, 0u);
  EXPECT_EQ(e[2].context, 0u);
  EXPECT_EQ(e[1].stream, to_underlying(default_stream));
  EXPECT_EQ(e[1].pool, pool_kind::small);
}

TEST_F(AllocatorLog, AFullTraceDropsRecordsAndTheAllocatorCarriesOn) {
  buffer_trace small(5, 2);
  alloc_.set_log(&small);
  std::vector<void*> ps;
  for (int i = 0; i < 8; ++i) ps.push_back(alloc_.allocate(64 * KiB));
  for (void* p : ps) alloc_.deallocate(p);
  alloc_.set_log(&obs_);
  // 1 segment + 8 allocs + 8 frees = 17 records: the first 5 are kept.
  EXPECT_EQ(small.events().size(), 5u);
  EXPECT_EQ(small.dropped, 12u);
  EXPECT_EQ(small.kinds().front(), kind::segment_alloc);
  EXPECT_EQ(alloc_.stats().allocated_bytes.all().current, 0);
}

}  // namespace
}  // namespace tp
