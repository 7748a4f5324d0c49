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

TEST(SimulatedDeviceThreads, UnmapWaitsUntilAHeldCopyIsReleased) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  const std::size_t g = dev.granularity();
  auto* base = static_cast<std::byte*>(dev.reserve(g));
  ASSERT_TRUE(dev.try_map(base, g));
  std::memset(base, 0x44, KiB);
  std::byte* out = alloc_host(dev, KiB, 0x00);
  const tp::stream_id s = dev.create_stream();
  dev.hold_stream(s);
  dev.copy_async(out, base, KiB, s);
  std::atomic<bool> unmapped{false};
  std::thread freer([&] {
    dev.unmap(base, g);
    unmapped = true;
  });
  std::this_thread::sleep_for(std::chrono::milliseconds(50));
  EXPECT_FALSE(unmapped.load());
  dev.release_stream(s);
  freer.join();
  EXPECT_TRUE(all_equal(out, KiB, 0x44));
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
