// The simulated device from several threads: blocking calls that another
// thread releases, and concurrent copies and events. Part of
// simulated_device_test; its suite SimulatedDeviceThreads is also labelled
// "tsan" (see CMakeLists.txt), for the ThreadSanitizer build.

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <cstring>
#include <thread>
#include <vector>

#include "core/clock.hpp"
#include "device/simulated_device.hpp"
#include "tests/device/simulated_buffers.hpp"

namespace {

using tp::testing::alloc;
using tp::testing::alloc_host;
using tp::testing::all_equal;
using tp::testing::KiB;

}  // namespace

TEST(SimulatedDeviceThreads, SynchronizeBlocksUntilAnotherThreadReleasesTheStream) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  std::byte* src = alloc_host(dev, KiB, 0x33);
  std::byte* dst = alloc(dev, KiB, 0x00);
  const tp::stream_id s1 = dev.create_stream(), s2 = dev.create_stream();
  const tp::event_id e = dev.create_event();
  dev.hold_stream(s1);
  dev.copy_async(dst, src, KiB, s1);
  dev.record_event(e, s1);
  dev.stream_wait_event(s2, e);
  std::atomic<bool> done{false};
  std::thread waiter([&] {
    dev.synchronize(s2);  // blocked through the wait on held s1
    done = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(done.load());
  dev.release_stream(s1);
  waiter.join();
  EXPECT_TRUE(done.load());
  EXPECT_TRUE(all_equal(dst, KiB, 0x33));
}

// cuda_device's unmap does not wait for copies that use the range (its
// caller waits for their streams: Note [Free waits for the device] in
// device/cuda/cuda_device.cpp), so the simulated device does not forgive it
// either: an unmap that would have to wait ends the process, as the fault it
// would be on a GPU. The allocator's own unmaps wait first (every allocator,
// runtime and Python test runs with this check).
TEST(SimulatedDeviceDeathTest, UnmapOfARangeAQueuedCopyStillUsesAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  tp::manual_clock clock;
  tp::simulated_device::options opts;
  opts.latency_ns = 1'000'000;  // a copy takes 1 ms, and the manual clock stands still
  tp::simulated_device dev(opts, clock);
  const std::size_t g = dev.granularity();
  auto* base = static_cast<std::byte*>(dev.reserve(g));
  ASSERT_TRUE(dev.try_map(base, g));
  std::byte* out = alloc_host(dev, KiB, 0x00);
  const tp::stream_id s = dev.create_stream();
  dev.copy_async(out, base, KiB, s);
  EXPECT_DEATH(dev.unmap(base, g), "while a queued copy still uses the range");
  dev.synchronize(s);
  dev.unmap(base, g);  // the copy has finished: nothing to wait for
  EXPECT_EQ(dev.memory().free_bytes, dev.memory().total_bytes);
  dev.release(base, g);
}

namespace {

// Four threads copy through their own stream, each waiting on a neighbour's
// event, and check every byte after each round.
void run_concurrent_copies(tp::clock& clock) {
  tp::simulated_device::options o;
  o.bandwidth_bytes_per_s = 20e9;
  o.latency_ns = 2'000;
  tp::simulated_device dev(o, clock);
  constexpr int threads = 4;
  constexpr std::size_t bytes = 64 * KiB;
  std::vector<tp::event_id> events;
  for (int t = 0; t < threads; ++t) events.push_back(dev.create_event());
  std::vector<std::thread> workers;
  std::atomic<int> failures{0};
  for (int t = 0; t < threads; ++t) {
    workers.emplace_back([&, t] {
      const tp::stream_id s = dev.create_stream();
      std::byte* src = alloc_host(dev, bytes, 0);
      std::byte* out = alloc_host(dev, bytes, 0);
      std::byte* d = alloc(dev, bytes, 0);
      for (int round = 0; round < 100; ++round) {
        const auto value = static_cast<unsigned char>(t * 50 + round);
        std::memset(src, value, bytes);
        dev.copy_async(d, src, bytes, s);
        dev.record_event(events[static_cast<std::size_t>(t)], s);
        dev.stream_wait_event(s, events[static_cast<std::size_t>((t + 1) % threads)]);
        dev.copy_async(out, d, bytes, s);
        (void)dev.query_event(events[static_cast<std::size_t>((t + 2) % threads)]);
        if (round % 2 == 0) {
          dev.synchronize(s);
        } else {
          dev.record_event(events[static_cast<std::size_t>(t)], s);
          dev.synchronize_event(events[static_cast<std::size_t>(t)]);
        }
        if (!all_equal(out, bytes, value)) ++failures;
        (void)dev.memory();
      }
      dev.deallocate(d, bytes);
      dev.deallocate_host(out, bytes);
      dev.deallocate_host(src, bytes);
      dev.destroy_stream(s);
    });
  }
  for (std::thread& w : workers) w.join();
  EXPECT_EQ(failures.load(), 0);
}

}  // namespace

TEST(SimulatedDeviceThreads, ConcurrentCopiesAndEventsOnAManualClock) {
  tp::manual_clock clock;
  run_concurrent_copies(clock);
}

TEST(SimulatedDeviceThreads, ConcurrentCopiesAndEventsOnASteadyClock) {
  tp::steady_clock clock;
  run_concurrent_copies(clock);
}
