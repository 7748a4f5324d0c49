// Cases every tp::device must pass; see device_conformance.hpp. They touch
// device memory only through copy_async, so they run unchanged on a GPU.
// Here memory: allocation, the memory report, virtual memory; copies,
// streams and events are in device_conformance_copies.cpp.

#include "tests/device/device_conformance.hpp"

#include <cstddef>
#include <cstdint>
#include <set>
#include <vector>

#include "core/errors.hpp"
#include "tests/device/conformance_buffers.hpp"

using namespace tp::testing::conformance;

TEST_P(DeviceConformance, ReportsAName) { EXPECT_FALSE(dev_->name().empty()); }

TEST_P(DeviceConformance, AllocatesAndFrees) {
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4096}, 3 * MiB + 17}) {
    void* p = dev_->try_allocate(bytes);
    ASSERT_NE(p, nullptr) << bytes << " bytes";
    dev_->deallocate(p, bytes);
  }
}

TEST_P(DeviceConformance, AlignsAllocationsTo256Bytes) {
  const std::vector<std::size_t> sizes = {1, 255, 257, 4097, MiB + 3, 2 * MiB};
  std::vector<void*> ptrs;
  for (std::size_t bytes : sizes) {
    ptrs.push_back(dev_->try_allocate(bytes));
    ASSERT_NE(ptrs.back(), nullptr);
    EXPECT_EQ(address(ptrs.back()) % 256, 0u) << bytes << " bytes";
  }
  EXPECT_EQ(std::set<void*>(ptrs.begin(), ptrs.end()).size(), ptrs.size());
  for (std::size_t i = 0; i < sizes.size(); ++i) dev_->deallocate(ptrs[i], sizes[i]);
}

TEST_P(DeviceConformance, MemoryReportsAllocationAndFree) {
  const std::size_t bytes = 64 * MiB;
  const tp::memory_info before = dev_->memory();
  EXPECT_GT(before.total_bytes, 0u);
  EXPECT_LE(before.free_bytes, before.total_bytes);
  void* p = dev_->try_allocate(bytes);
  ASSERT_NE(p, nullptr);
  const tp::memory_info during = dev_->memory();
  EXPECT_EQ(during.total_bytes, before.total_bytes);
  EXPECT_LE(during.free_bytes + bytes, before.free_bytes);
  dev_->deallocate(p, bytes);
  EXPECT_GT(dev_->memory().free_bytes, during.free_bytes);
}

TEST_P(DeviceConformance, TryAllocateBeyondTotalReturnsNull) {
  const std::size_t too_much = dev_->memory().total_bytes + 1024 * MiB;
  void* p = dev_->try_allocate(too_much);
  EXPECT_EQ(p, nullptr);
  if (p != nullptr) dev_->deallocate(p, too_much);
}

TEST_P(DeviceConformance, ReservesMapsRemapsAndReleases) {
  const std::size_t g = dev_->granularity();
  ASSERT_GT(g, 0u);
  auto* base = static_cast<std::byte*>(dev_->reserve(4 * g));
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(address(base) % g, 0u);
  host_buffer src(*dev_, 2 * g), out(*dev_, 2 * g);
  ASSERT_NE(src.get(), nullptr);
  ASSERT_NE(out.get(), nullptr);

  ASSERT_TRUE(dev_->try_map(base + g, 2 * g));
  src.fill_random(1);
  dev_->copy_async(base + g, src.get(), 2 * g, tp::default_stream);
  dev_->copy_async(out.get(), base + g, 2 * g, tp::default_stream);
  dev_->synchronize(tp::default_stream);
  EXPECT_TRUE(out.same_as(src));
  dev_->unmap(base + g, 2 * g);

  // Re-mapping the same range, and mapping its neighbours separately, gives
  // one contiguous range that a single copy may span.
  ASSERT_TRUE(dev_->try_map(base + g, 2 * g));
  ASSERT_TRUE(dev_->try_map(base, g));
  ASSERT_TRUE(dev_->try_map(base + 3 * g, g));
  src.fill_random(2);
  out.fill(0);
  dev_->copy_async(base + g / 2, src.get(), 2 * g, tp::default_stream);
  dev_->copy_async(out.get(), base + g / 2, 2 * g, tp::default_stream);
  dev_->synchronize(tp::default_stream);
  EXPECT_TRUE(out.same_as(src));
  dev_->unmap(base, g);
  dev_->unmap(base + g, 2 * g);
  dev_->unmap(base + 3 * g, g);
  dev_->release(base, 4 * g);
}

// What expandable segments (Note [Expandable segments] in
// allocator/caching_allocator.hpp) rely on: unmapping a granule-aligned part
// of an earlier mapping leaves the rest mapped with its contents, and the
// physical memory comes back as free memory that can be mapped elsewhere.
TEST_P(DeviceConformance, UnmapsPartOfAMappingAndKeepsTheRest) {
  const std::size_t g = dev_->granularity();
  auto* base = static_cast<std::byte*>(dev_->reserve(4 * g));
  host_buffer src(*dev_, g), out(*dev_, g);
  ASSERT_TRUE(src.get() && out.get());
  ASSERT_TRUE(dev_->try_map(base, 4 * g));
  src.fill_random(11);
  dev_->copy_async(base + 3 * g, src.get(), g, tp::default_stream);
  dev_->synchronize(tp::default_stream);
  const tp::memory_info mapped = dev_->memory();
  dev_->unmap(base + g, 2 * g);  // the middle of one mapping
  // Another process may use a real GPU meanwhile: allow 1% of the total.
  EXPECT_GE(dev_->memory().free_bytes + mapped.total_bytes / 100, mapped.free_bytes + 2 * g);
  dev_->copy_async(out.get(), base + 3 * g, g, tp::default_stream);
  dev_->synchronize(tp::default_stream);
  EXPECT_TRUE(out.same_as(src)) << "the granules after the unmapped range lost their contents";
  // The middle maps again, and a copy spans all four granules.
  ASSERT_TRUE(dev_->try_map(base + g, 2 * g));
  host_buffer big(*dev_, 4 * g), big_out(*dev_, 4 * g);
  ASSERT_TRUE(big.get() && big_out.get());
  big.fill_random(12);
  dev_->copy_async(base, big.get(), 4 * g, tp::default_stream);
  dev_->copy_async(big_out.get(), base, 4 * g, tp::default_stream);
  dev_->synchronize(tp::default_stream);
  EXPECT_TRUE(big_out.same_as(big));
  dev_->unmap(base, g);
  dev_->unmap(base + g, 3 * g);  // across the two mappings
  dev_->release(base, 4 * g);
}

TEST_P(DeviceConformance, TryMapBeyondTheDeviceReturnsFalseAndMapsNothing) {
  const std::size_t g = dev_->granularity();
  const std::size_t total = dev_->memory().total_bytes;
  const std::size_t bytes = (total / g + 2) * g;
  void* base = dev_->reserve(bytes);
  const std::size_t free_before = dev_->memory().free_bytes;
  EXPECT_FALSE(dev_->try_map(base, bytes));
  EXPECT_GE(dev_->memory().free_bytes + total / 100, free_before);
  // The range is still unmapped: a granule of it maps.
  ASSERT_TRUE(dev_->try_map(base, g));
  dev_->unmap(base, g);
  dev_->release(base, bytes);
}
