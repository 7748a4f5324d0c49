// The conformance suite on the simulated device, and the behaviour only the
// simulated device has: holds, the copy-cost model. See Note [Simulated
// stream model] in device/simulated_device.hpp. The same executable runs the
// strict argument checks (simulated_device_checks_test.cpp) and the
// multi-threaded cases (simulated_device_threads_test.cpp).

#include "device/simulated_device.hpp"

#include <gtest/gtest.h>

#include <cstring>
#include <memory>

#include "core/clock.hpp"
#include "core/errors.hpp"
#include "tests/device/device_conformance.hpp"
#include "tests/device/device_factory.hpp"
#include "tests/device/simulated_buffers.hpp"

namespace {

using tp::testing::alloc;
using tp::testing::alloc_host;
using tp::testing::all_equal;
using tp::testing::KiB;
using tp::testing::MiB;

constexpr std::int64_t second_ns = 1'000'000'000;

tp::simulated_device::options conformance_options() {
  tp::simulated_device::options o;
  o.capacity_bytes = 1024 * MiB;
  o.bandwidth_bytes_per_s = 16e9;
  o.latency_ns = 5'000;
  return o;
}

// The factories' clocks outlive every device (blocking waits jump the manual
// one forward; the steady one really sleeps, so copies there are short).
std::unique_ptr<tp::device> make_on_manual_clock() {
  static tp::manual_clock clock;
  return std::make_unique<tp::simulated_device>(conformance_options(), clock);
}

std::unique_ptr<tp::device> make_on_steady_clock() {
  static tp::steady_clock clock;
  tp::simulated_device::options o = conformance_options();
  o.bandwidth_bytes_per_s = 200e9;
  return std::make_unique<tp::simulated_device>(o, clock);
}

INSTANTIATE_TEST_SUITE_P(
    Simulated, DeviceConformance,
    ::testing::Values(tp::testing::device_factory{"simulated", make_on_manual_clock},
                      tp::testing::device_factory{"simulated_steady", make_on_steady_clock}),
    tp::testing::device_factory_name);

}  // namespace

TEST(SimulatedDevice, HeldStreamKeepsCopyInFlightUntilRelease) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  std::byte* src = alloc_host(dev, 4 * KiB, 0xAB);
  std::byte* dst = alloc(dev, 4 * KiB, 0x00);
  const tp::stream_id s = dev.create_stream();
  const tp::event_id e = dev.create_event();
  dev.hold_stream(s);
  dev.copy_async(dst, src, 4 * KiB, s);
  EXPECT_EQ(dev.pending_ops(s), 1u);
  dev.record_event(e, s);
  clock.advance(second_ns);
  dev.poll();
  EXPECT_EQ(dev.pending_ops(s), 2u);
  EXPECT_FALSE(dev.query_event(e));
  EXPECT_TRUE(all_equal(dst, 4 * KiB, 0x00));

  dev.release_stream(s);
  EXPECT_EQ(dev.pending_ops(s), 0u);
  EXPECT_TRUE(dev.query_event(e));
  EXPECT_TRUE(all_equal(dst, 4 * KiB, 0xAB));
}

TEST(SimulatedDevice, CopyCompletesExactlyAtItsModelledFinishTime) {
  tp::manual_clock clock;
  tp::simulated_device::options o;
  o.bandwidth_bytes_per_s = double(std::size_t{1} << 30);
  o.latency_ns = 10'000;
  tp::simulated_device dev(o, clock);
  // 1 MiB at 1 GiB/s is 976562.5 ns, rounded up, plus 10 us of latency.
  const std::int64_t copy_ns = 976'563 + 10'000;
  std::byte* src = alloc_host(dev, MiB, 0x5A);
  std::byte* dst = alloc(dev, MiB, 0x00);
  const tp::stream_id s = dev.create_stream();
  const tp::event_id e = dev.create_event();
  dev.copy_async(dst, src, MiB, s);
  dev.record_event(e, s);

  clock.advance_to(copy_ns - 1);
  EXPECT_FALSE(dev.query_event(e));
  EXPECT_EQ(dev.pending_ops(s), 2u);
  EXPECT_TRUE(all_equal(dst, MiB, 0x00));
  clock.advance_to(copy_ns);
  EXPECT_TRUE(dev.query_event(e));
  EXPECT_TRUE(all_equal(dst, MiB, 0x5A));

  // Queued work starts when the previous op finishes, or when enqueued if later;
  // synchronize moves a manual clock to exactly the finish time.
  dev.copy_async(src, dst, MiB, s);
  dev.copy_async(dst, src, MiB, s);
  dev.synchronize(s);
  EXPECT_EQ(clock.now_ns(), 3 * copy_ns);
  clock.advance_to(10 * second_ns);
  dev.copy_async(dst, src, MiB, s);
  dev.synchronize(s);
  EXPECT_EQ(clock.now_ns(), 10 * second_ns + copy_ns);
}

// synchronize waits for its own stream alone: with work due later on one
// stream (on the manual clock) and another stream held, synchronizing an idle
// stream or the default stream returns at once (the clock does not move,
// nothing else retires) and blocks on neither.
TEST(SimulatedDevice, SynchronizingAnIdleStreamWaitsForNoOtherStream) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  const tp::stream_id busy = dev.create_stream(), held = dev.create_stream(), idle = dev.create_stream();
  const tp::event_id worked = dev.create_event(), released = dev.create_event(), done = dev.create_event();
  dev.enqueue_work(busy, 1'000);
  dev.record_event(worked, busy);
  dev.hold_stream(held);
  dev.record_event(released, held);
  dev.record_event(done, idle);  // retires at once: nothing before it
  for (const tp::stream_id s : {idle, tp::default_stream}) dev.synchronize(s);
  EXPECT_EQ(clock.now_ns(), 0);
  EXPECT_TRUE(dev.query_event(done));
  EXPECT_FALSE(dev.query_event(worked));
  EXPECT_FALSE(dev.query_event(released));
  dev.release_stream(held);
  dev.synchronize(busy);
  EXPECT_EQ(clock.now_ns(), 1'000);
  EXPECT_TRUE(dev.query_event(worked));
  EXPECT_TRUE(dev.query_event(released));
}

TEST(SimulatedDevice, WorkStartsNoEarlierThanWhatItWaitsForOrItsRelease) {
  tp::manual_clock clock;
  tp::simulated_device::options o;
  o.latency_ns = 1'000;  // every copy takes exactly 1 us
  tp::simulated_device dev(o, clock);
  std::byte* a = alloc(dev, KiB, 0x01);
  std::byte* b = alloc(dev, KiB, 0x02);
  const tp::stream_id s1 = dev.create_stream(), s2 = dev.create_stream();
  const tp::event_id e = dev.create_event();
  dev.copy_async(b, a, KiB, s1);
  dev.record_event(e, s1);
  dev.stream_wait_event(s2, e);
  dev.copy_async(a, b, KiB, s2);  // starts when s1's copy finishes, at 1 us
  dev.synchronize(s2);
  EXPECT_EQ(clock.now_ns(), 2'000);

  dev.hold_stream(s1);
  dev.copy_async(b, a, KiB, s1);
  clock.advance_to(5'000);
  dev.release_stream(s1);  // the copy starts now, not when it was enqueued
  EXPECT_EQ(dev.pending_ops(s1), 1u);
  dev.synchronize(s1);
  EXPECT_EQ(clock.now_ns(), 6'000);
}

TEST(SimulatedDevice, WaitOnAHeldStreamsEventBlocksTheWaitingStream) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  std::byte* src = alloc_host(dev, 64 * KiB, 0x11);
  std::byte* out = alloc_host(dev, 64 * KiB, 0x00);
  std::byte* d = alloc(dev, 64 * KiB, 0x00);
  const tp::stream_id s1 = dev.create_stream(), s2 = dev.create_stream();
  const tp::event_id e1 = dev.create_event(), e2 = dev.create_event();
  dev.hold_stream(s1);
  dev.copy_async(d, src, 64 * KiB, s1);
  dev.record_event(e1, s1);
  dev.stream_wait_event(s2, e1);
  dev.copy_async(out, d, 64 * KiB, s2);
  dev.record_event(e2, s2);
  clock.advance(second_ns);
  EXPECT_EQ(dev.pending_ops(s2), 3u);
  EXPECT_FALSE(dev.query_event(e2));
  EXPECT_TRUE(all_equal(out, 64 * KiB, 0x00));

  dev.release_stream(s1);
  dev.synchronize(s2);
  EXPECT_TRUE(dev.query_event(e2));
  EXPECT_TRUE(all_equal(out, 64 * KiB, 0x11));
}

TEST(SimulatedDevice, WaitCapturesTheRecordCurrentAtCallTime) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  const tp::stream_id s1 = dev.create_stream(), s2 = dev.create_stream(), s3 = dev.create_stream();
  const tp::event_id e = dev.create_event();
  dev.hold_stream(s1);
  dev.record_event(e, s1);
  dev.stream_wait_event(s3, e);
  dev.record_event(e, s2);  // retires at once; the event now tracks it
  EXPECT_TRUE(dev.query_event(e));
  EXPECT_EQ(dev.pending_ops(s3), 1u);  // still waiting on the record on s1
  dev.stream_wait_event(s2, e);        // on a retired record: nothing to wait for
  EXPECT_EQ(dev.pending_ops(s2), 0u);
  dev.release_stream(s1);
  EXPECT_EQ(dev.pending_ops(s3), 0u);
}

TEST(SimulatedDevice, PlainAllocationsAndMappingsShareCapacity) {
  tp::manual_clock clock;
  tp::simulated_device::options o;
  o.capacity_bytes = 8 * o.granularity;
  tp::simulated_device dev(o, clock);
  const std::size_t g = dev.granularity();
  auto* base = static_cast<std::byte*>(dev.reserve(16 * g));
  ASSERT_TRUE(dev.try_map(base, 6 * g));
  EXPECT_EQ(dev.memory().free_bytes, 2 * g);
  EXPECT_EQ(dev.memory().total_bytes, 8 * g);
  EXPECT_EQ(dev.try_allocate(2 * g + 1), nullptr);
  void* p = dev.try_allocate(g);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(dev.memory().free_bytes, g);
  EXPECT_FALSE(dev.try_map(base + 6 * g, 2 * g));  // maps nothing
  EXPECT_EQ(dev.memory().free_bytes, g);
  std::memset(base + 2 * g, 0x77, g);
  dev.unmap(base + 2 * g, 3 * g);
  EXPECT_EQ(dev.memory().free_bytes, 4 * g);
  ASSERT_TRUE(dev.try_map(base + 2 * g, 2 * g));
  EXPECT_TRUE(all_equal(base + 2 * g, g, 0x00));  // re-mapped memory reads as zeros
  EXPECT_EQ(dev.memory().free_bytes, 2 * g);
  dev.deallocate(p, g);
  dev.unmap(base, 4 * g);
  dev.unmap(base + 5 * g, g);
  EXPECT_EQ(dev.memory().free_bytes, 8 * g);
  dev.release(base, 16 * g);
}

TEST(SimulatedDevice, HostAllocationsCountAgainstHostCapacity) {
  tp::manual_clock clock;
  tp::simulated_device::options o;
  o.host_capacity_bytes = MiB;
  tp::simulated_device dev(o, clock);
  void* a = dev.try_allocate_host(600 * KiB);
  ASSERT_NE(a, nullptr);
  EXPECT_EQ(dev.try_allocate_host(600 * KiB), nullptr);
  EXPECT_EQ(dev.memory().free_bytes, o.capacity_bytes);  // host memory is not device memory
  dev.deallocate_host(a, 600 * KiB);
  void* b = dev.try_allocate_host(MiB);
  EXPECT_NE(b, nullptr);
  dev.deallocate_host(b, MiB);
}

TEST(SimulatedDevice, DestroyedStreamDrainsBeforeItsIdDisappears) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  std::byte* src = alloc_host(dev, KiB, 0x42);
  std::byte* dst = alloc(dev, KiB, 0x00);
  const tp::stream_id s = dev.create_stream();
  const tp::event_id e = dev.create_event();
  dev.hold_stream(s);
  dev.copy_async(dst, src, KiB, s);
  dev.record_event(e, s);
  dev.destroy_stream(s);
  EXPECT_FALSE(dev.is_stream(s));
  EXPECT_THROW(dev.copy_async(dst, src, KiB, s), tp::invalid_argument);
  EXPECT_EQ(dev.pending_ops(s), 2u);  // the hooks still see it
  dev.release_stream(s);
  EXPECT_TRUE(dev.query_event(e));
  EXPECT_TRUE(all_equal(dst, KiB, 0x42));
  EXPECT_THROW((void)dev.pending_ops(s), tp::invalid_argument);
}

TEST(SimulatedDevice, FreeingMemoryWaitsForTheCopiesThatUseIt) {
  tp::manual_clock clock;
  tp::simulated_device::options o;
  o.latency_ns = 1'000;
  tp::simulated_device dev(o, clock);
  std::byte* src = alloc_host(dev, KiB, 0x21);
  std::byte* dst = alloc(dev, KiB, 0x00);
  const tp::stream_id s = dev.create_stream();
  dev.copy_async(dst, src, KiB, s);
  dev.deallocate_host(src, KiB);  // as cudaFreeHost, waits for the copy
  EXPECT_EQ(clock.now_ns(), 1'000);
  EXPECT_EQ(dev.pending_ops(s), 0u);
  EXPECT_TRUE(all_equal(dst, KiB, 0x21));
  dev.deallocate(nullptr, 0);  // nothing, as cudaFree(nullptr)
  dev.deallocate(dst, KiB);
}
