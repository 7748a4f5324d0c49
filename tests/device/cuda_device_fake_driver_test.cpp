// tp::cuda_driver and tp::cuda_device on a machine without a GPU: the real
// loader and device code over a stand-in driver library (fake_libcuda.cpp),
// which enforces CUDA's per-context rules. The device and allocator
// conformance suites run over it, and the driver-specific behaviour is
// checked here: loading, errors, the context guard (and that it skips the
// switch when the context is current), primary-context references, and the
// rule that made cross-device record_stream need an event of the stream's own
// device. The same code on a real driver: cuda_device_test (label gpu).

#include <dlfcn.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <gtest/gtest.h>

#include "core/errors.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/cuda/cuda_driver.hpp"
#include "tests/allocator/allocator_conformance.hpp"
#include "tests/device/device_conformance.hpp"

namespace {

// The library's path, from CMake (TP_FAKE_LIBCUDA).
const char* const fake_library = TP_FAKE_LIBCUDA;

std::shared_ptr<const tp::cuda_driver> fake_driver() {
  static const auto driver = tp::cuda_driver::load(fake_library);
  return driver;
}

/// The fake's inspection functions (tp_fake_cuda_* in fake_libcuda.cpp).
struct fake_inspection {
  int (*current_device)() = nullptr;
  void (*make_current)(int) = nullptr;
  std::size_t (*live_objects)() = nullptr;

  fake_inspection() {
    (void)fake_driver();  // loaded
    void* h = dlopen(fake_library, RTLD_NOW | RTLD_NOLOAD);
    EXPECT_NE(h, nullptr);
    current_device = reinterpret_cast<int (*)()>(dlsym(h, "tp_fake_cuda_current_device"));
    make_current = reinterpret_cast<void (*)(int)>(dlsym(h, "tp_fake_cuda_make_current"));
    live_objects = reinterpret_cast<std::size_t (*)()>(dlsym(h, "tp_fake_cuda_live_objects"));
  }
};

const fake_inspection& fake() {
  static const fake_inspection f;
  return f;
}

std::unique_ptr<tp::device> open_fake(int ordinal) { return tp::cuda_device::open(fake_driver(), ordinal); }

}  // namespace

INSTANTIATE_TEST_SUITE_P(CudaOverFakeDriver, DeviceConformance,
                         ::testing::Values(tp::testing::device_factory{"cuda_fake_driver", [] { return open_fake(0); }}),
                         tp::testing::device_factory_name);

namespace tp::testing {
INSTANTIATE_TEST_SUITE_P(CudaOverFakeDriver, AllocatorConformance,
                         ::testing::Values(device_factory{"cuda_fake_driver", [] { return open_fake(1); }}),
                         device_factory_name);
}  // namespace tp::testing

namespace {

TEST(CudaDriverLoad, ResolvesEveryEntryPointAndInitialises) {
  const auto driver = fake_driver();
  EXPECT_EQ(driver->device_count(), 2);
  EXPECT_EQ(driver->version(), 13000);
  EXPECT_GT(driver->calls(), 0u);  // cuInit at least
  EXPECT_EQ(driver->library(), fake_library);
}

TEST(CudaDriverLoad, AMissingLibraryIsNoCudaDevice) {
  try {
    (void)tp::cuda_driver::load("libtp_no_such_cuda_driver.so.1");
    FAIL() << "loaded a library that does not exist";
  } catch (const tp::cuda_error& e) {
    const std::string msg = e.what();
    EXPECT_EQ(msg.rfind("no CUDA device: ", 0), 0u) << msg;
    EXPECT_NE(msg.find("could not be loaded"), std::string::npos) << msg;
  }
}

TEST(CudaDriverLoad, ALibraryThatIsNoDriverIsNoCudaDevice) {
  try {
    (void)tp::cuda_driver::load("libm.so.6");
    FAIL() << "took libm for a CUDA driver";
  } catch (const tp::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("has no cuGetProcAddress"), std::string::npos) << e.what();
  }
}

TEST(CudaDriverLoadDeathTest, ADriverWithoutDevicesIsNoCudaDevice) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // In a child: the fake reads the device count at cuInit, once per process.
  EXPECT_EXIT(
      {
        setenv("TP_FAKE_CUDA_DEVICES", "0", 1);
        try {
          (void)tp::cuda_driver::load(fake_library);
        } catch (const tp::cuda_error& e) {
          const std::string msg = e.what();
          std::exit(msg.find("no CUDA device: cuInit failed: CUDA_ERROR_NO_DEVICE") == 0 ? 0 : 2);
        }
        std::exit(1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST(CudaDeviceOverFakeDriver, OpensEveryOrdinalAndRefusesOthers) {
  EXPECT_EQ(open_fake(0)->name(), "Fake CUDA device 0");
  EXPECT_EQ(open_fake(1)->name(), "Fake CUDA device 1");
  EXPECT_THROW((void)open_fake(2), tp::invalid_argument);
  EXPECT_THROW((void)open_fake(-1), tp::invalid_argument);
}

TEST(CudaDeviceOverFakeDriver, EveryCallRestoresTheCallersContext) {
  auto dev0 = open_fake(0);
  for (const int callers : {1, -1}) {  // PyTorch on cuda:1, or a thread with no context at all
    fake().make_current(callers);
    void* p = dev0->try_allocate(1 << 20);  // the fake refuses it without cuda:0's context current
    ASSERT_NE(p, nullptr);
    EXPECT_EQ(fake().current_device(), callers);
    const tp::stream_id s = dev0->create_stream();
    const tp::event_id e = dev0->create_event();
    dev0->record_event(e, s);
    EXPECT_TRUE(dev0->query_event(e));
    dev0->synchronize(s);
    (void)dev0->memory();
    dev0->destroy_event(e);
    dev0->destroy_stream(s);
    dev0->deallocate(p, 1 << 20);  // the fake refuses a free from another device's context
    EXPECT_EQ(fake().current_device(), callers);
  }
  fake().make_current(-1);
}

TEST(CudaDeviceOverFakeDriver, TheGuardSkipsTheSwitchWhenTheContextIsCurrent) {
  auto dev0 = open_fake(0);
  const tp::cuda_driver& driver = *fake_driver();
  fake().make_current(0);
  std::uint64_t before = driver.calls();
  (void)dev0->memory();
  EXPECT_EQ(driver.calls() - before, 2u) << "cuCtxGetCurrent, cuMemGetInfo";
  fake().make_current(1);
  before = driver.calls();
  (void)dev0->memory();
  EXPECT_EQ(driver.calls() - before, 4u) << "cuCtxGetCurrent, cuCtxSetCurrent, cuMemGetInfo, cuCtxSetCurrent";
  fake().make_current(-1);
}

TEST(CudaDeviceOverFakeDriver, AnEventIsRecordedOnlyOnAStreamOfItsDevice) {
  // CUDA's rule behind Note [Streams of another device] in
  // hooks/cuda_adapter_streams.cpp: record on the stream's own device, wait
  // from any device.
  auto dev0 = open_fake(0);
  auto dev1 = open_fake(1);
  const tp::stream_id s0 = dev0->create_stream();
  const tp::stream_id s1 = dev1->create_stream();
  const tp::event_id e0 = dev0->create_event();
  const tp::event_id e1 = dev1->create_event();
  EXPECT_THROW(dev0->record_event(e0, s1), tp::cuda_error);
  dev1->record_event(e1, s1);
  dev0->stream_wait_event(s0, e1);
  dev0->synchronize(s0);
  dev0->destroy_event(e0);
  dev1->destroy_event(e1);
  dev0->destroy_stream(s0);
  dev1->destroy_stream(s1);
}

// Note [Copy cost model]: copies are timed with events that keep time; an
// allocator event (CU_EVENT_DISABLE_TIMING) cannot be, as on CUDA.
TEST(CudaDeviceOverFakeDriver, TimingEventsKeepTimeAndOthersDoNot) {
  auto dev = open_fake(0);
  const tp::stream_id s = dev->create_stream();
  const tp::event_id a = dev->create_timing_event();
  const tp::event_id b = dev->create_timing_event();
  const tp::event_id plain = dev->create_event();
  for (const tp::event_id e : {a, b, plain}) dev->record_event(e, s);
  dev->synchronize(s);
  EXPECT_EQ(dev->elapsed_ns(a, b), std::optional<std::int64_t>{0});  // the fake's calls complete at once
  EXPECT_THROW((void)dev->elapsed_ns(a, plain), tp::cuda_error);
  for (const tp::event_id e : {a, b, plain}) dev->destroy_event(e);
  dev->destroy_stream(s);
}

TEST(CudaDeviceOverFakeDriver, PeerAccessIsEnabledOnceAndAgainIsNotAnError) {
  auto dev0 = open_fake(0);
  auto dev1 = open_fake(1);
  auto& cuda0 = static_cast<tp::cuda_device&>(*dev0);
  cuda0.enable_peer_access(static_cast<tp::cuda_device&>(*dev1));
  cuda0.enable_peer_access(static_cast<tp::cuda_device&>(*dev1));
}

// Note [Peers of mapped memory]: a copy on cuda:0 that touches memory cuda:1
// mapped faults until cuda:0 has peer access, which grants it access to the
// granules mapped before and after; a peer copy needs no access.
TEST(CudaDeviceOverFakeDriver, MappedMemoryOfAPeerIsReachedWithPeerAccessOrByAPeerCopy) {
  const auto dev0 = open_fake(0), dev1 = open_fake(1);
  auto& cuda0 = static_cast<tp::cuda_device&>(*dev0);
  auto& cuda1 = static_cast<tp::cuda_device&>(*dev1);
  const std::size_t g = dev1->granularity();
  auto* base = static_cast<std::byte*>(dev1->reserve(2 * g));
  ASSERT_TRUE(dev1->try_map(base, g));
  void* own = dev0->try_allocate(g);
  std::vector<unsigned char> pattern(g), back(g, 0);
  for (std::size_t i = 0; i < g; ++i) pattern[i] = static_cast<unsigned char>(i * 13 + 1);
  dev0->copy_async(own, pattern.data(), g, tp::default_stream);

  // Before peer access: a plain copy on cuda:0 into cuda:1's mapping faults ...
  try {
    dev0->copy_async(base, own, g, tp::default_stream);
    ADD_FAILURE() << "a copy on cuda:0 reached cuda:1's mapped memory without access";
  } catch (const tp::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("CUDA_ERROR_ILLEGAL_ADDRESS"), std::string::npos) << e.what();
  }
  // ... and a peer copy does not.
  cuda0.copy_to_peer_async(base, cuda1, own, g, tp::default_stream);
  dev1->copy_async(back.data(), base, g, tp::default_stream);
  EXPECT_EQ(back, pattern);

  // With peer access, cuda:0 reaches the granule mapped before and one mapped after.
  cuda0.enable_peer_access(cuda1);
  ASSERT_TRUE(dev1->try_map(base + g, g));
  dev0->copy_async(base + g, base, g, tp::default_stream);
  std::fill(back.begin(), back.end(), 0);
  dev0->copy_async(back.data(), base + g, g, tp::default_stream);
  EXPECT_EQ(back, pattern);

  dev0->deallocate(own, g);
  dev1->unmap(base, 2 * g);
  dev1->release(base, 2 * g);
}

TEST(CudaDeviceOverFakeDriver, GivesBackEverythingItTook) {
  const std::size_t before = fake().live_objects();
  {
    auto dev = open_fake(1);  // retains the primary context
    EXPECT_GT(fake().live_objects(), before);
    void* p = dev->try_allocate(3 << 20);
    void* h = dev->try_allocate_host(4096);
    const std::size_t g = dev->granularity();
    void* base = dev->reserve(2 * g);
    ASSERT_TRUE(dev->try_map(base, 2 * g));
    dev->unmap(base, 2 * g);
    dev->release(base, 2 * g);
    dev->deallocate_host(h, 4096);
    dev->deallocate(p, 3 << 20);
  }
  EXPECT_EQ(fake().live_objects(), before) << "a leak, or the primary context not released";
}

TEST(CudaDeviceOverFakeDriver, MappedGranulesLeftAtDestructionAreReleased) {
  const std::size_t before = fake().live_objects();
  void* base = nullptr;
  std::size_t g = 0;
  {
    auto dev = open_fake(0);
    g = dev->granularity();
    base = dev->reserve(2 * g);
    ASSERT_TRUE(dev->try_map(base, 2 * g));
    // destroyed with both granules mapped: it warns and releases them
  }
  // The reservation itself is the caller's to release; everything else is gone.
  EXPECT_EQ(fake().live_objects(), before + 1);
  open_fake(0)->release(base, 2 * g);
  EXPECT_EQ(fake().live_objects(), before);
}

}  // namespace
