// The simulated device's strict argument checks: unknown and stale ids,
// bad reservations, mappings and copies, impossible options, and the frees
// that abort. The same executable as simulated_device_test.cpp.

#include "device/simulated_device.hpp"

#include <gtest/gtest.h>

#include <functional>
#include <string>
#include <vector>

#include "core/clock.hpp"
#include "core/errors.hpp"
#include "tests/device/simulated_buffers.hpp"

namespace {

using tp::testing::all_equal;
using tp::testing::KiB;

void expect_invalid_argument_naming(const std::function<void()>& call, const std::string& needle) {
  try {
    call();
    ADD_FAILURE() << "expected tp::invalid_argument naming " << needle;
  } catch (const tp::invalid_argument& e) {
    EXPECT_NE(std::string(e.what()).find(needle), std::string::npos) << e.what();
  }
}

}  // namespace

TEST(SimulatedDevice, UnknownStreamIdsThrowNamingTheId) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  void* p = dev.try_allocate(KiB);
  const tp::stream_id bad{4242};
  const tp::event_id e = dev.create_event();
  EXPECT_FALSE(dev.is_stream(bad));
  expect_invalid_argument_naming([&] { dev.synchronize(bad); }, "4242");
  expect_invalid_argument_naming([&] { dev.copy_async(p, p, KiB, bad); }, "4242");
  expect_invalid_argument_naming([&] { dev.record_event(e, bad); }, "4242");
  expect_invalid_argument_naming([&] { dev.stream_wait_event(bad, e); }, "4242");
  expect_invalid_argument_naming([&] { dev.hold_stream(bad); }, "4242");
  expect_invalid_argument_naming([&] { dev.release_stream(bad); }, "4242");
  expect_invalid_argument_naming([&] { (void)dev.pending_ops(bad); }, "4242");
  dev.deallocate(p, KiB);
}

TEST(SimulatedDevice, UnknownEventIdsThrowNamingTheId) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  const tp::event_id bad{777};
  expect_invalid_argument_naming([&] { (void)dev.query_event(bad); }, "777");
  expect_invalid_argument_naming([&] { dev.record_event(bad, tp::default_stream); }, "777");
  expect_invalid_argument_naming([&] { dev.synchronize_event(bad); }, "777");
  expect_invalid_argument_naming([&] { dev.stream_wait_event(tp::default_stream, bad); }, "777");
}

TEST(SimulatedDevice, IdsAreNeverReusedSoStaleHandlesThrow) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  const tp::stream_id s = dev.create_stream();
  const tp::event_id e = dev.create_event();
  dev.destroy_stream(s);
  dev.destroy_event(e);
  EXPECT_NE(dev.create_stream(), s);
  EXPECT_NE(dev.create_event(), e);
  EXPECT_FALSE(dev.is_stream(s));
  EXPECT_THROW(dev.synchronize(s), tp::invalid_argument);
  EXPECT_THROW((void)dev.query_event(e), tp::invalid_argument);
  dev.destroy_stream(tp::default_stream);  // ignored
  EXPECT_TRUE(dev.is_stream(tp::default_stream));
}

TEST(SimulatedDevice, BadReserveArgumentsThrow) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  const std::size_t g = dev.granularity();
  EXPECT_THROW(dev.reserve(0), tp::invalid_argument);
  EXPECT_THROW(dev.reserve(g + 1), tp::invalid_argument);
  EXPECT_THROW(dev.reserve(g / 2), tp::invalid_argument);
}

TEST(SimulatedDevice, BadMapArgumentsThrowAndChangeNothing) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  const std::size_t g = dev.granularity();
  auto* base = static_cast<std::byte*>(dev.reserve(4 * g));
  void* plain = dev.try_allocate(g);
  ASSERT_TRUE(dev.try_map(base + g, g));
  const std::size_t free_before = dev.memory().free_bytes;
  EXPECT_THROW(dev.try_map(base, 0), tp::invalid_argument);
  EXPECT_THROW(dev.try_map(base + 1, g), tp::invalid_argument);
  EXPECT_THROW(dev.try_map(base, g + 4096), tp::invalid_argument);
  EXPECT_THROW(dev.try_map(base + 3 * g, 2 * g), tp::invalid_argument);  // past the end
  EXPECT_THROW(dev.try_map(plain, g), tp::invalid_argument);             // not reserved
  EXPECT_THROW(dev.try_map(base, 2 * g), tp::invalid_argument);          // overlaps a mapping
  EXPECT_EQ(dev.memory().free_bytes, free_before);
  dev.unmap(base + g, g);
  dev.release(base, 4 * g);
  dev.deallocate(plain, g);
}

TEST(SimulatedDevice, CopiesPastAnAllocationOrIntoUnmappedMemoryThrow) {
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  const std::size_t g = dev.granularity();
  void* d = dev.try_allocate(KiB);
  auto* base = static_cast<std::byte*>(dev.reserve(2 * g));
  ASSERT_TRUE(dev.try_map(base, g));
  EXPECT_THROW(dev.copy_async(d, d, KiB + 1, tp::default_stream), tp::invalid_argument);
  EXPECT_THROW(dev.copy_async(base + g - 16, d, 32, tp::default_stream), tp::invalid_argument);
  EXPECT_THROW(dev.copy_async(d, base + g, 16, tp::default_stream), tp::invalid_argument);
  EXPECT_EQ(dev.pending_ops(tp::default_stream), 0u);
  // Pageable host memory is accepted, as on CUDA.
  std::vector<std::byte> pageable(KiB, std::byte{0x66});
  dev.copy_async(base + g - 16, pageable.data(), 16, tp::default_stream);
  dev.copy_async(d, base + g - 16, 16, tp::default_stream);
  dev.synchronize(tp::default_stream);
  EXPECT_TRUE(all_equal(static_cast<std::byte*>(d), 16, 0x66));
  dev.unmap(base, g);
  dev.release(base, 2 * g);
  dev.deallocate(d, KiB);
}

TEST(SimulatedDevice, RejectsImpossibleOptions) {
  tp::manual_clock clock;
  tp::simulated_device::options o;
  o.granularity = 3 * 4096;
  EXPECT_THROW((void)tp::simulated_device(o, clock), tp::invalid_argument);
  o = {};
  o.latency_ns = -1;
  EXPECT_THROW((void)tp::simulated_device(o, clock), tp::invalid_argument);
  o = {};
  o.bandwidth_bytes_per_s = -1.0;
  EXPECT_THROW((void)tp::simulated_device(o, clock), tp::invalid_argument);
}

TEST(SimulatedDeviceDeathTest, FreeingWithTheWrongSizeAborts) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  tp::manual_clock clock;
  tp::simulated_device dev(clock);
  void* a = dev.try_allocate(KiB);
  EXPECT_DEATH(dev.deallocate(a, KiB + 1), "allocated with 1024 bytes");
  int local = 0;
  EXPECT_DEATH(dev.deallocate_host(&local, sizeof local), "not allocated by this device");
  dev.deallocate(a, KiB);
}
