// The event log: order, the cap and its dropped count, labels and context,
// concurrent writers and readers, and the allocator's events through the
// recorder.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <thread>
#include <vector>

#include "core/errors.hpp"
#include "profiler/tsc_clock.hpp"
#include "profiler_test_support.hpp"

namespace tp::profiler {
namespace {

using namespace tp::profiler::testing;

TEST(EventLog, RecordStampsWithItsClockAndSnapshotsInTimeOrder) {
  manual_clock clk(5000);
  event_log log(clk);
  log.record(runtime_event(event_kind::offload_begin, 7, 4 * MiB));
  clk.advance(250);
  log.record(runtime_event(event_kind::offload_end, 7, 4 * MiB));
  event late;
  late.kind = event_kind::stall;
  late.t_ns = 5100;  // record_at keeps the time given: between the two
  log.record_at(late);
  const timeline t = log.snapshot();
  ASSERT_EQ(t.events.size(), 3u);
  EXPECT_EQ(t.events[0].kind, event_kind::offload_begin);
  EXPECT_EQ(t.events[0].t_ns, 5000);
  EXPECT_EQ(t.events[1].kind, event_kind::stall);
  EXPECT_EQ(t.events[2].t_ns, 5250);
  EXPECT_EQ(t.dropped, 0u);
  EXPECT_EQ(log.size(), 3u);
}

TEST(EventLog, KeepsTheFirstMaxEventsAndCountsTheRestAsDropped) {
  manual_clock clk;
  event_log::options o;
  o.max_events = 10;
  o.chunk_events = 4;
  o.spare_chunks = 0;  // chunks mapped by the writer itself
  event_log log(clk, o);
  for (std::uint64_t i = 0; i < 25; ++i) {
    log.record(runtime_event(event_kind::eviction, i, 1));
    clk.advance(1);
  }
  const timeline t = log.snapshot();
  ASSERT_EQ(t.events.size(), 10u);
  EXPECT_EQ(t.events.front().id, 0u);
  EXPECT_EQ(t.events.back().id, 9u);
  EXPECT_EQ(t.dropped, 15u);
  EXPECT_EQ(log.dropped(), 15u);
  EXPECT_EQ(t.max_events, 10u);
}

TEST(EventLog, RejectsAZeroCap) {
  manual_clock clk;
  event_log::options o;
  o.max_events = 0;
  EXPECT_THROW(event_log(clk, o), invalid_argument);
}

TEST(EventLog, InternsLabelsOnceWithDenseIds) {
  manual_clock clk;
  event_log log(clk);
  EXPECT_EQ(log.intern(""), 0u);
  const label_id a = log.intern("features.0 (Conv2d)");
  const label_id b = log.intern("classifier (Linear)");
  EXPECT_EQ(a, 1u);
  EXPECT_EQ(b, 2u);
  EXPECT_EQ(log.intern("features.0 (Conv2d)"), a);
  const timeline t = log.snapshot();
  EXPECT_EQ(t.label_text(a), "features.0 (Conv2d)");
  EXPECT_EQ(t.label_text(99), "");
}

TEST(EventLog, RecorderMirrorsTheAllocatorsEventsWithContextAndTotals) {
  recorded_rig rig;
  rig.log.set_context({category::activation, rig.log.intern("block (Conv2d)")});
  void* p = rig.alloc.allocate(3 * MiB);
  rig.tick();
  rig.log.set_context({category::gradient, 0});
  rig.alloc.deallocate(p);
  rig.tick();
  rig.alloc.empty_cache();
  const timeline t = rig.log.snapshot();
  std::vector<event_kind> kinds;
  for (const event& e : t.events) kinds.push_back(e.kind);
  ASSERT_EQ(kinds, (std::vector<event_kind>{event_kind::segment_alloc, event_kind::alloc, event_kind::free_requested,
                                            event_kind::free_completed, event_kind::device_sync,
                                            event_kind::segment_free}));
  const event& a = t.events[1];
  EXPECT_EQ(a.address, reinterpret_cast<std::uintptr_t>(p));
  EXPECT_EQ(a.bytes, 3 * MiB);
  EXPECT_EQ(a.detail, static_cast<std::int64_t>(3 * MiB));
  EXPECT_EQ(a.category, category::activation);
  EXPECT_EQ(t.label_text(a.label), "block (Conv2d)");
  EXPECT_EQ(a.allocated_bytes, static_cast<std::int64_t>(3 * MiB));
  EXPECT_EQ(a.reserved_bytes, static_cast<std::int64_t>(20 * MiB));
  EXPECT_EQ(t.events[2].t_ns, 1000);
  EXPECT_EQ(t.events[2].category, category::unknown);  // only allocations carry the context
  EXPECT_EQ(t.events[4].bytes, 20 * MiB);  // the device waited for, to give the segment back
  EXPECT_EQ(t.events[4].detail, 1);
  EXPECT_EQ(t.events[5].reserved_bytes, 0);
  // The free was folded in the log (Note [Folded frees]) and is expanded here.
  EXPECT_EQ(rig.log.size(), 5u);
  EXPECT_EQ(t.events[3].t_ns, t.events[2].t_ns);
  EXPECT_EQ(t.events[3].address, t.events[2].address);
  EXPECT_EQ(t.events[3].bytes, 3 * MiB);
  EXPECT_EQ(t.events[2].detail, 0);
  EXPECT_EQ(t.events[3].allocated_bytes, 0);
}

TEST(EventLog, AllocatorTicksAreConvertedToTheClocksNanosecondsInSnapshot) {
  if (!tsc_clock::available()) GTEST_SKIP() << "no invariant time-stamp counter on this CPU";
  const tsc_clock clk(std::chrono::milliseconds(1));
  event_log log(clk);
  manual_clock device_clock;
  simulated_device dev(recorded_rig::device_options(1 * GiB), device_clock);
  caching_allocator alloc(dev);
  alloc.set_log(&log.open_allocator_recorder(0));  // stamps raw ticks (Note [Event clock])
  std::vector<std::int64_t> before, after;
  for (int i = 0; i < 50; ++i) {
    before.push_back(clk.now_ns());
    alloc.deallocate(alloc.allocate(1 * MiB));
    after.push_back(clk.now_ns());
    event marker;  // through record(): stamped in ns
    marker.kind = event_kind::stall;
    marker.id = static_cast<std::uint64_t>(i);
    log.record(marker);
  }
  alloc.set_log(nullptr);
  const timeline t = log.snapshot();
  // Per round: segment_alloc on the first, then alloc, free_requested,
  // free_completed (the folded free, expanded), and the marker.
  ASSERT_EQ(t.events.size(), 1u + 50u * 4u);
  std::size_t round = 0;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const event& e = t.events[i];
    if (e.kind == event_kind::stall) {
      EXPECT_EQ(e.id, round++) << i;  // every allocator event of a round sorts before its marker
      continue;
    }
    EXPECT_GE(e.t_ns, before[round]) << i;
    EXPECT_LE(e.t_ns, after[round]) << i;
  }
  EXPECT_EQ(round, 50u);
}

TEST(EventLog, FreeThatWaitsForStreamsStaysTwoEvents) {
  recorded_rig rig;
  const stream_id side = rig.dev.create_stream();
  void* p = rig.alloc.allocate(1 * MiB);
  rig.alloc.record_stream(p, side);
  rig.dev.hold_stream(side);
  rig.alloc.deallocate(p);
  rig.tick();
  rig.dev.release_stream(side);
  rig.alloc.empty_cache();
  const timeline t = rig.log.snapshot();
  std::vector<event_kind> kinds;
  for (const event& e : t.events) kinds.push_back(e.kind);
  ASSERT_EQ(kinds, (std::vector<event_kind>{event_kind::segment_alloc, event_kind::alloc, event_kind::free_requested,
                                            event_kind::free_completed, event_kind::device_sync,
                                            event_kind::segment_free}));
  EXPECT_LT(t.events[2].t_ns, t.events[3].t_ns);
  EXPECT_EQ(rig.log.size(), 6u);
}

// Writers on several threads (each its own single-producer writer, as one
// allocator each would have) plus record() from others, while a reader takes
// snapshots: nothing is lost below the cap, each writer's events stay in
// order, and every snapshot is a prefix of each writer's stream.
TEST(EventLog, ConcurrentWritersAndReadersLoseNothing) {
  steady_clock clk;
  event_log::options o;
  o.max_events = 1 << 20;
  o.chunk_events = 256;
  o.spare_chunks = 3;  // the filler thread races the writers for chunks too
  event_log log(clk, o);
  constexpr int writers = 3, recorders = 2, per_thread = 20000;
  std::atomic<bool> done{false};
  std::thread reader([&] {
    while (!done.load()) {
      const timeline t = log.snapshot();
      std::vector<std::uint64_t> last(writers + recorders, 0);
      for (const event& e : t.events) {
        const auto who = static_cast<std::size_t>(e.device);
        EXPECT_EQ(e.id, last[who] + 1) << "a gap in writer " << who;
        last[who] = e.id;
      }
    }
  });
  std::vector<std::thread> threads;
  for (int w = 0; w < writers; ++w) {
    threads.emplace_back([&, w] {
      event_log::writer& out = log.open_writer();
      for (std::uint64_t i = 1; i <= per_thread; ++i) {
        event e;
        e.t_ns = log.now_ns();
        e.device = static_cast<std::int16_t>(w);
        e.id = i;
        out.append(e);
      }
    });
  }
  for (int r = 0; r < recorders; ++r) {
    threads.emplace_back([&, r] {
      for (std::uint64_t i = 1; i <= per_thread; ++i) {
        event e;
        e.device = static_cast<std::int16_t>(writers + r);
        e.id = i;
        log.record(e);
      }
    });
  }
  for (auto& t : threads) t.join();
  done = true;
  reader.join();
  const timeline t = log.snapshot();
  EXPECT_EQ(t.events.size(), std::size_t{(writers + recorders) * per_thread});
  EXPECT_EQ(t.dropped, 0u);
  for (std::size_t i = 1; i < t.events.size(); ++i) ASSERT_LE(t.events[i - 1].t_ns, t.events[i].t_ns);
}

TEST(EventLog, ConcurrentSnapshotsSeeAPrefixOfAnAllocatorsRecords) {
  // The allocator fills chunks of 64 records while a reader snapshots: every
  // snapshot must hold the records in order with none missing, across chunk
  // changes (Note [Allocator log]; allocator_recorder::for_each_published).
  recorded_rig rig(1 << 20);
  constexpr int pairs = 20000;
  const auto requested = [](std::size_t k) { return (1 + k % 7) * 4 * KiB; };
  std::atomic<bool> done{false};
  std::thread reader([&] {
    std::size_t seen = 0;
    while (!done.load()) {
      const timeline t = rig.log.snapshot();
      std::size_t allocs = 0;
      for (std::size_t i = 0; i < t.events.size(); ++i) {
        const event& e = t.events[i];
        if (e.kind != event_kind::alloc) continue;
        ASSERT_EQ(e.detail, static_cast<std::int64_t>(requested(allocs))) << "alloc " << allocs;
        ++allocs;
      }
      ASSERT_GE(allocs, seen);
      seen = allocs;
      ASSERT_EQ(rig.log.dropped(), 0u);
    }
  });
  for (std::size_t k = 0; k < pairs; ++k) rig.alloc.deallocate(rig.alloc.allocate(requested(k)));
  done = true;
  reader.join();
  const timeline t = rig.log.snapshot();
  // One segment, then per pair: alloc, free_requested, free_completed.
  EXPECT_EQ(t.events.size(), 1u + 3u * pairs);
}

TEST(EventLog, ConcurrentWritersPastTheCapDropTheExcessOnly) {
  manual_clock clk;
  event_log::options o;
  o.max_events = 1000;
  o.chunk_events = 64;
  event_log log(clk, o);
  std::vector<std::thread> threads;
  for (int w = 0; w < 4; ++w) {
    threads.emplace_back([&] {
      event_log::writer& out = log.open_writer();
      for (int i = 0; i < 700; ++i) out.append(event{});
    });
  }
  for (auto& t : threads) t.join();
  // Capacity goes to writers a chunk at a time, so a writer that stops early
  // can leave part of its last chunk unused: at most one chunk each.
  EXPECT_LE(log.size(), 1000u);
  EXPECT_GE(log.size(), 1000u - 4u * 64u);
  EXPECT_EQ(log.size() + log.dropped(), 4u * 700u);
}

TEST(TscClock, IsMonotoneAndTracksSteadyClock) {
  if (!tsc_clock::available()) GTEST_SKIP() << "no invariant time-stamp counter on this CPU";
  tsc_clock c;
  steady_clock s;
  const std::int64_t a0 = c.now_ns(), s0 = s.now_ns();
  std::int64_t prev = a0;
  for (int i = 0; i < 100000; ++i) {
    const std::int64_t now = c.now_ns();
    ASSERT_GE(now, prev);
    prev = now;
  }
  std::this_thread::sleep_for(std::chrono::milliseconds(20));
  const double elapsed_tsc = static_cast<double>(c.now_ns() - a0), elapsed = static_cast<double>(s.now_ns() - s0);
  EXPECT_NEAR(elapsed_tsc / elapsed, 1.0, 0.02);
  EXPECT_NE(make_event_clock(), nullptr);
}

}  // namespace
}  // namespace tp::profiler
