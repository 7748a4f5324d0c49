// Cases every tp::device must pass; see device_conformance.hpp. They touch
// device memory only through copy_async, so they run unchanged on a GPU.

#include "tests/device/device_conformance.hpp"

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>
#include <set>
#include <vector>

#include "core/errors.hpp"

namespace {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Page-locked host memory of one device, freed on scope exit. Callers
// synchronize before a buffer a copy uses goes out of scope.
class host_buffer {
 public:
  host_buffer(tp::device& dev, std::size_t bytes)
      : dev_(dev), bytes_(bytes), ptr_(static_cast<std::byte*>(dev.try_allocate_host(bytes))) {}
  ~host_buffer() {
    if (ptr_ != nullptr) dev_.deallocate_host(ptr_, bytes_);
  }
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;

  std::byte* get() const { return ptr_; }
  std::size_t size() const { return bytes_; }
  void fill_random(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i < bytes_; ++i) ptr_[i] = static_cast<std::byte>(rng());
  }
  void fill(unsigned char value) { std::memset(ptr_, value, bytes_); }
  bool same_as(const host_buffer& other) const {
    return bytes_ == other.bytes_ && std::memcmp(ptr_, other.ptr_, bytes_) == 0;
  }

 private:
  tp::device& dev_;
  std::size_t bytes_;
  std::byte* ptr_;
};

// Plain device memory, freed on scope exit.
class device_buffer {
 public:
  device_buffer(tp::device& dev, std::size_t bytes)
      : dev_(dev), bytes_(bytes), ptr_(dev.try_allocate(bytes)) {}
  ~device_buffer() {
    if (ptr_ != nullptr) dev_.deallocate(ptr_, bytes_);
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void* get() const { return ptr_; }

 private:
  tp::device& dev_;
  std::size_t bytes_;
  void* ptr_;
};

std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace

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

TEST_P(DeviceConformance, RoundTripsHostDeviceHostBitIdentical) {
  const tp::stream_id s = dev_->create_stream();
  for (std::size_t bytes : {std::size_t{1}, std::size_t{4099}, 3 * MiB + 123}) {
    host_buffer src(*dev_, bytes), out(*dev_, bytes);
    device_buffer d(*dev_, bytes);
    ASSERT_NE(src.get(), nullptr);
    ASSERT_NE(out.get(), nullptr);
    ASSERT_NE(d.get(), nullptr);
    src.fill_random(bytes);
    out.fill(0);
    dev_->copy_async(d.get(), src.get(), bytes, s);
    dev_->copy_async(out.get(), d.get(), bytes, s);
    dev_->synchronize(s);
    EXPECT_TRUE(out.same_as(src)) << bytes << " bytes";
  }
  dev_->destroy_stream(s);
}

TEST_P(DeviceConformance, CopiesDeviceToDeviceOnTheDefaultStream) {
  const std::size_t bytes = 5 * MiB + 7;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer a(*dev_, bytes), b(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && a.get() && b.get());
  src.fill_random(3);
  dev_->copy_async(a.get(), src.get(), bytes, tp::default_stream);
  dev_->copy_async(b.get(), a.get(), bytes, tp::default_stream);
  dev_->copy_async(out.get(), b.get(), bytes, tp::default_stream);
  dev_->synchronize(tp::default_stream);
  EXPECT_TRUE(out.same_as(src));
}

TEST_P(DeviceConformance, RunsCopiesOnOneStreamInOrder) {
  const std::size_t bytes = 16 * MiB;
  host_buffer a(*dev_, bytes), b(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(a.get() && b.get() && out.get() && d.get());
  a.fill(0xAA);
  b.fill(0xBB);
  const tp::stream_id s = dev_->create_stream();
  dev_->copy_async(d.get(), a.get(), bytes, s);
  dev_->copy_async(d.get(), b.get(), bytes, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->synchronize(s);
  EXPECT_TRUE(out.same_as(b));
  dev_->destroy_stream(s);
}

TEST_P(DeviceConformance, CompletesEventAfterSynchronize) {
  const std::size_t bytes = 8 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(4);
  const tp::stream_id s = dev_->create_stream();
  const tp::event_id e = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->record_event(e, s);
  dev_->synchronize_event(e);
  EXPECT_TRUE(dev_->query_event(e));
  EXPECT_TRUE(out.same_as(src));

  // Re-recording moves the event to the new point; synchronize(stream) covers it.
  dev_->copy_async(d.get(), out.get(), bytes, s);
  dev_->record_event(e, s);
  dev_->synchronize(s);
  EXPECT_TRUE(dev_->query_event(e));
  dev_->destroy_event(e);
  dev_->destroy_stream(s);
}

TEST_P(DeviceConformance, TreatsANeverRecordedEventAsComplete) {
  const tp::event_id e = dev_->create_event();
  EXPECT_TRUE(dev_->query_event(e));
  dev_->synchronize_event(e);
  dev_->stream_wait_event(tp::default_stream, e);
  dev_->synchronize(tp::default_stream);
  dev_->destroy_event(e);
}

TEST_P(DeviceConformance, StreamWaitEventOrdersWorkAcrossStreams) {
  const std::size_t bytes = 32 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(5);
  out.fill(0);
  const tp::stream_id s1 = dev_->create_stream(), s2 = dev_->create_stream();
  const tp::event_id e = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s1);
  dev_->record_event(e, s1);
  dev_->stream_wait_event(s2, e);
  dev_->copy_async(out.get(), d.get(), bytes, s2);
  dev_->synchronize(s2);  // covers s1's copy through the wait
  EXPECT_TRUE(out.same_as(src));
  EXPECT_TRUE(dev_->query_event(e));
  dev_->destroy_event(e);
  dev_->destroy_stream(s1);
  dev_->destroy_stream(s2);
}

TEST_P(DeviceConformance, DestroyingAStreamLetsItsPendingWorkFinish) {
  const std::size_t bytes = 8 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(6);
  const tp::stream_id s = dev_->create_stream();
  const tp::event_id e = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->record_event(e, s);
  dev_->destroy_stream(s);
  dev_->synchronize_event(e);
  EXPECT_TRUE(out.same_as(src));
  dev_->destroy_event(e);
}

TEST_P(DeviceConformance, CreatesAndDestroysManyStreamsAndEvents) {
  std::vector<tp::stream_id> streams;
  std::vector<tp::event_id> events;
  for (int i = 0; i < 64; ++i) {
    streams.push_back(dev_->create_stream());
    EXPECT_TRUE(dev_->is_stream(streams.back()));
    EXPECT_NE(streams.back(), tp::default_stream);
  }
  for (int i = 0; i < 256; ++i) events.push_back(dev_->create_event());
  EXPECT_EQ(std::set<tp::stream_id>(streams.begin(), streams.end()).size(), streams.size());
  EXPECT_EQ(std::set<tp::event_id>(events.begin(), events.end()).size(), events.size());
  for (std::size_t i = 0; i < events.size(); ++i)
    dev_->record_event(events[i], streams[i % streams.size()]);
  for (tp::stream_id s : streams) dev_->synchronize(s);
  for (tp::event_id e : events) EXPECT_TRUE(dev_->query_event(e));
  for (tp::event_id e : events) dev_->destroy_event(e);
  for (tp::stream_id s : streams) dev_->destroy_stream(s);
  EXPECT_TRUE(dev_->is_stream(tp::default_stream));
}

// synchronize(stream) returns with every op queued on that stream done: both
// records completed (no wait on either event) and the bytes are in place. On
// the simulated device's manual clock nothing retires until a blocking call
// moves time, so a synchronize that returned early fails here.
TEST_P(DeviceConformance, SynchronizeCompletesTheWorkQueuedOnItsStream) {
  const std::size_t bytes = 8 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(8);
  out.fill(0);
  const tp::stream_id s = dev_->create_stream();
  const tp::event_id copied_in = dev_->create_event(), copied_out = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s);
  dev_->record_event(copied_in, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->record_event(copied_out, s);
  dev_->synchronize(s);
  EXPECT_TRUE(dev_->query_event(copied_in));
  EXPECT_TRUE(dev_->query_event(copied_out));
  EXPECT_TRUE(out.same_as(src));
  dev_->destroy_event(copied_in);
  dev_->destroy_event(copied_out);
  dev_->destroy_stream(s);
}

// synchronize_device waits for every stream, one destroyed with work still
// queued included: what the allocator relies on when it unmaps the granules
// of a stream that is gone (Note [Giving memory back waits]).
TEST_P(DeviceConformance, SynchronizeDeviceCompletesTheWorkOfEveryStream) {
  const std::size_t bytes = 8 * MiB;
  host_buffer src(*dev_, bytes), out_a(*dev_, bytes), out_b(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out_a.get() && out_b.get() && d.get());
  src.fill_random(11);
  out_a.fill(0);
  out_b.fill(0);
  const tp::stream_id a = dev_->create_stream(), b = dev_->create_stream();
  const tp::event_id done_a = dev_->create_event(), done_b = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, a);
  dev_->record_event(done_a, a);
  dev_->stream_wait_event(b, done_a);
  dev_->copy_async(out_a.get(), d.get(), bytes, a);
  dev_->copy_async(out_b.get(), d.get(), bytes, b);
  dev_->record_event(done_b, b);
  dev_->destroy_stream(b);
  dev_->synchronize_device();
  EXPECT_TRUE(dev_->query_event(done_a));
  EXPECT_TRUE(dev_->query_event(done_b)) << "the destroyed stream's work was not waited for";
  EXPECT_TRUE(out_a.same_as(src));
  EXPECT_TRUE(out_b.same_as(src));
  dev_->destroy_event(done_a);
  dev_->destroy_event(done_b);
  dev_->destroy_stream(a);
}

// A stream with nothing pending (drained, never used, or the default stream)
// synchronizes without waiting on anything, leaves an event completed
// earlier completed and the bytes it covered as they were, and runs work
// queued on it afterwards. (That it returns at once, whatever other streams
// hold, is checked on the simulated device, whose clock shows it:
// SimulatedDevice.SynchronizingAnIdleStreamWaitsForNoOtherStream.)
TEST_P(DeviceConformance, SynchronizesAnIdleStream) {
  const std::size_t bytes = 4 * MiB;
  host_buffer src(*dev_, bytes), out(*dev_, bytes);
  device_buffer d(*dev_, bytes);
  ASSERT_TRUE(src.get() && out.get() && d.get());
  src.fill_random(9);
  out.fill(0);
  const tp::stream_id s = dev_->create_stream(), unused = dev_->create_stream();
  const tp::event_id e = dev_->create_event();
  dev_->copy_async(d.get(), src.get(), bytes, s);
  dev_->copy_async(out.get(), d.get(), bytes, s);
  dev_->record_event(e, s);
  dev_->synchronize_event(e);
  ASSERT_TRUE(out.same_as(src));
  for (const tp::stream_id idle : {s, unused, tp::default_stream}) {
    dev_->synchronize(idle);
    EXPECT_TRUE(dev_->query_event(e)) << "after synchronizing stream " << tp::to_underlying(idle);
  }
  EXPECT_TRUE(out.same_as(src));

  // Each still runs what is queued next: the bytes go back through the
  // stream never used, then out again on the default stream.
  src.fill_random(10);
  dev_->copy_async(d.get(), src.get(), bytes, unused);
  dev_->synchronize(unused);
  dev_->copy_async(out.get(), d.get(), bytes, tp::default_stream);
  dev_->synchronize(tp::default_stream);
  EXPECT_TRUE(out.same_as(src));
  dev_->destroy_event(e);
  dev_->destroy_stream(s);
  dev_->destroy_stream(unused);
}
