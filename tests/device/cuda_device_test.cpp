// tp::cuda_device: the shared conformance suite, plus what only CUDA has
// (opening without a driver, granule-wise unmapping, out-of-memory paths,
// handles created outside tensorpager). Every test that needs a GPU skips,
// with a message, where cuda_device::device_count() is 0; the tests of
// opening run everywhere.

#include "device/cuda/cuda_device.hpp"

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <memory>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "tests/device/device_conformance.hpp"

INSTANTIATE_TEST_SUITE_P(Cuda, DeviceConformance,
                         ::testing::Values(tp::testing::device_factory{
                             "cuda",
                             []() -> std::unique_ptr<tp::device> {
                               return tp::cuda_device::device_count() > 0
                                          ? tp::cuda_device::open(0)
                                          : nullptr;
                             }}),
                         tp::testing::device_factory_name);

namespace {

// --- opening: runs with or without a GPU ---------------------------------------

TEST(CudaDeviceOpen, DeviceCountNeverThrows) { EXPECT_GE(tp::cuda_device::device_count(), 0); }

TEST(CudaDeviceOpen, ThrowsNoCudaDeviceWithoutADevice) {
  if (tp::cuda_device::device_count() > 0) GTEST_SKIP() << "a CUDA device is present";
  try {
    (void)tp::cuda_device::open(0);
    FAIL() << "open() succeeded without a CUDA device";
  } catch (const tp::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
  // A second attempt reports the same, cleanly: nothing was left half-open.
  EXPECT_THROW((void)tp::cuda_device::open(0), tp::cuda_error);
}

TEST(CudaDeviceOpen, RejectsAnOrdinalOutOfRange) {
  const int count = tp::cuda_device::device_count();
  if (count == 0) GTEST_SKIP() << "no CUDA device";
  EXPECT_THROW((void)tp::cuda_device::open(count), tp::invalid_argument);
  EXPECT_THROW((void)tp::cuda_device::open(-1), tp::invalid_argument);
}

// --- on a GPU ------------------------------------------------------------------

class CudaDevice : public ::testing::Test {
 protected:
  void SetUp() override {
    if (tp::cuda_device::device_count() == 0) GTEST_SKIP() << "no CUDA device";
    dev_ = tp::cuda_device::open(0);
  }

  /// Fills [dst, dst + bytes) of device memory with seed + i and waits.
  void fill(void* dst, std::size_t bytes, unsigned char seed) {
    auto* host = static_cast<unsigned char*>(dev_->try_allocate_host(bytes));
    ASSERT_NE(host, nullptr);
    for (std::size_t i = 0; i < bytes; ++i) host[i] = static_cast<unsigned char>(seed + i);
    dev_->copy_async(dst, host, bytes, tp::default_stream);
    dev_->synchronize(tp::default_stream);
    dev_->deallocate_host(host, bytes);
  }

  /// Copies [src, src + bytes) of device memory to the host.
  std::vector<unsigned char> read(const void* src, std::size_t bytes) {
    auto* host = static_cast<unsigned char*>(dev_->try_allocate_host(bytes));
    if (host == nullptr) return {};
    dev_->copy_async(host, src, bytes, tp::default_stream);
    dev_->synchronize(tp::default_stream);
    std::vector<unsigned char> out(host, host + bytes);
    dev_->deallocate_host(host, bytes);
    return out;
  }

  static bool matches(const std::vector<unsigned char>& data, std::size_t from, std::size_t bytes,
                      unsigned char seed) {
    for (std::size_t i = 0; i < bytes; ++i) {
      if (data.at(from + i) != static_cast<unsigned char>(seed + i)) return false;
    }
    return true;
  }

  std::unique_ptr<tp::cuda_device> dev_;
};

TEST_F(CudaDevice, ReportsNameMemoryAndAPowerOfTwoGranularity) {
  EXPECT_FALSE(dev_->name().empty());
  const tp::memory_info info = dev_->memory();
  EXPECT_GT(info.total_bytes, 0u);
  EXPECT_LE(info.free_bytes, info.total_bytes);
  const std::size_t g = dev_->granularity();
  EXPECT_GT(g, 0u);
  EXPECT_EQ(g & (g - 1), 0u) << g;
}

TEST_F(CudaDevice, TryAllocateReturnsNullBeyondDeviceMemoryAndRecovers) {
  const std::size_t too_big = dev_->memory().total_bytes * 2;
  EXPECT_EQ(dev_->try_allocate(too_big), nullptr);
  // The failure left no error behind: the next allocation works.
  void* p = dev_->try_allocate(1 << 20);
  ASSERT_NE(p, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(p) % 256, 0u);
  dev_->deallocate(p, 1 << 20);
}

TEST_F(CudaDevice, UnmapsAnyGranuleAlignedSubRangeAndKeepsTheRest) {
  const std::size_t g = dev_->granularity();
  void* base = dev_->reserve(4 * g);
  ASSERT_NE(base, nullptr);
  EXPECT_EQ(reinterpret_cast<std::uintptr_t>(base) % g, 0u);
  auto* bytes = static_cast<unsigned char*>(base);

  ASSERT_TRUE(dev_->try_map(base, 4 * g));  // one call, four granules
  fill(base, 4 * g, 7);

  dev_->unmap(bytes + g, 2 * g);  // the middle of one earlier map
  ASSERT_TRUE(dev_->try_map(bytes + g, g));
  ASSERT_TRUE(dev_->try_map(bytes + 2 * g, g));
  fill(bytes + g, 2 * g, 99);

  const std::vector<unsigned char> data = read(base, 4 * g);
  ASSERT_EQ(data.size(), 4 * g);
  EXPECT_TRUE(matches(data, 0, g, 7));
  EXPECT_TRUE(matches(data, g, 2 * g, 99));
  EXPECT_TRUE(matches(data, 3 * g, g, static_cast<unsigned char>(7 + 3 * g)));

  dev_->unmap(base, g);
  dev_->unmap(bytes + g, 3 * g);  // spans maps made by three calls
  dev_->release(base, 4 * g);
}

TEST_F(CudaDevice, TryMapRejectsMisalignedOrAlreadyMappedRanges) {
  const std::size_t g = dev_->granularity();
  void* base = dev_->reserve(2 * g);
  auto* bytes = static_cast<unsigned char*>(base);
  EXPECT_THROW((void)dev_->try_map(bytes + 1, g), tp::invalid_argument);
  EXPECT_THROW((void)dev_->try_map(base, g + 1), tp::invalid_argument);
  EXPECT_THROW((void)dev_->reserve(g + 1), tp::invalid_argument);
  ASSERT_TRUE(dev_->try_map(bytes + g, g));
  EXPECT_THROW((void)dev_->try_map(base, 2 * g), tp::invalid_argument);
  // The rejected call mapped nothing: the first granule is still free to map.
  ASSERT_TRUE(dev_->try_map(base, g));
  dev_->unmap(base, 2 * g);
  dev_->release(base, 2 * g);
}

TEST_F(CudaDevice, TryMapReturnsFalseBeyondDeviceMemoryAndRollsBack) {
  const std::size_t g = dev_->granularity();
  const std::size_t total = dev_->memory().total_bytes;
  const std::size_t bytes = (total / g + 2) * g;  // more than the whole device
  void* base = dev_->reserve(bytes);
  const std::size_t free_before = dev_->memory().free_bytes;
  EXPECT_FALSE(dev_->try_map(base, bytes));
  // Rolled back: the memory came back and no granule is left mapped.
  EXPECT_GE(dev_->memory().free_bytes + 64 * g, free_before);
  ASSERT_TRUE(dev_->try_map(base, g));
  dev_->unmap(base, g);
  dev_->release(base, bytes);
}

TEST_F(CudaDevice, CopiesRoundTripThroughStreamsAndEvents) {
  constexpr std::size_t bytes = 3 << 20;
  void* d = dev_->try_allocate(bytes);
  auto* in = static_cast<unsigned char*>(dev_->try_allocate_host(bytes));
  auto* out = static_cast<unsigned char*>(dev_->try_allocate_host(bytes));
  ASSERT_NE(d, nullptr);
  ASSERT_NE(in, nullptr);
  ASSERT_NE(out, nullptr);
  for (std::size_t i = 0; i < bytes; ++i) in[i] = static_cast<unsigned char>(i * 31);
  std::memset(out, 0, bytes);

  const tp::stream_id upload = dev_->create_stream();
  const tp::stream_id download = dev_->create_stream();
  EXPECT_NE(upload, tp::default_stream);
  const tp::event_id uploaded = dev_->create_event();
  EXPECT_TRUE(dev_->query_event(uploaded));  // never recorded counts as done

  dev_->copy_async(d, in, bytes, upload);
  dev_->record_event(uploaded, upload);
  dev_->stream_wait_event(download, uploaded);  // ordering across streams, host not blocked
  dev_->copy_async(out, d, bytes, download);
  const tp::event_id downloaded = dev_->create_event();
  dev_->record_event(downloaded, download);
  dev_->synchronize_event(downloaded);
  EXPECT_TRUE(dev_->query_event(downloaded));
  EXPECT_TRUE(dev_->query_event(uploaded));
  EXPECT_EQ(std::memcmp(in, out, bytes), 0);

  dev_->destroy_event(uploaded);
  dev_->destroy_event(downloaded);
  dev_->destroy_stream(upload);
  dev_->destroy_stream(download);
  dev_->deallocate_host(in, bytes);
  dev_->deallocate_host(out, bytes);
  dev_->deallocate(d, bytes);
}

TEST_F(CudaDevice, AcceptsAnyStreamHandleAndTheDefaultStream) {
  // is_stream cannot tell a foreign cudaStream_t from garbage, so it accepts
  // every handle; see cuda_device.hpp.
  EXPECT_TRUE(dev_->is_stream(tp::default_stream));
  EXPECT_TRUE(dev_->is_stream(tp::stream_id{0x1234}));
  dev_->synchronize(tp::default_stream);
  dev_->destroy_stream(tp::default_stream);  // ignored, not an error
  dev_->synchronize(tp::default_stream);
}

}  // namespace
