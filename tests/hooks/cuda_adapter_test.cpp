// The c10 CUDA adapter under real CUDA tensors (label gpu). Installing it is
// irreversible, so every test installs the same configuration (the second
// install is a no-op) and restores the budget it changes. Skips where torch
// sees no CUDA device; on a machine without one it checks that install makes
// no CUDA call and that the first allocation fails cleanly.

#include <algorithm>
#include <string>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/cuda/Sleep.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAGuard.h>
#include <c10/cuda/CUDAStream.h>
#include <gtest/gtest.h>
#include <torch/cuda.h>

#include "core/errors.hpp"
#include "hooks/tensorpager.hpp"
#include "hooks_test_support.hpp"

namespace tp::hooks::testing {
namespace {

namespace cca = c10::cuda::CUDACachingAllocator;
using c10::CachingAllocator::StatType;

constexpr const char* conf = "device:cuda";

TEST(CudaAdapterWithoutDevice, InstallsWithoutCudaAndTheFirstAllocationFailsCleanly) {
  if (torch::cuda::is_available()) GTEST_SKIP() << "a CUDA device is present";
  // Note [No CUDA call before the first allocation] in hooks/cuda_adapter.cpp.
  tensorpager::install(conf);
  EXPECT_TRUE(tensorpager::is_installed());
  EXPECT_EQ(tensorpager::cuda_driver_calls(), 0u);
  EXPECT_THROW((void)cca::raw_alloc(1024), c10::Error);
  try {
    (void)tensorpager::cuda_device_name(0);
    FAIL() << "expected tp::cuda_error";
  } catch (const tp::cuda_error& e) {
    EXPECT_NE(std::string(e.what()).find("no CUDA device"), std::string::npos) << e.what();
  }
}

class CudaAdapter : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!torch::cuda::is_available()) GTEST_SKIP() << "no CUDA device";
    tensorpager::install(conf);
    tensorpager::set_budget(std::nullopt);
    tensorpager::empty_cache();
  }
};

TEST_F(CudaAdapter, IsPyTorchsCudaAllocator) {
  EXPECT_EQ(cca::name(), "tensorpager");
  EXPECT_EQ(tensorpager::device_kind(), "cuda");
  EXPECT_EQ(c10::GetAllocator(c10::DeviceType::CUDA), cca::get());
}

TEST_F(CudaAdapter, EmptyOfKnownSizeShowsInBothStatistics) {
  const std::int64_t base = allocated_bytes();
  {
    const at::Tensor t = at::empty({1024}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
    EXPECT_EQ(allocated_bytes(), base + 4096);
    const auto d = cca::getDeviceStats(t.device().index());
    EXPECT_EQ(d.allocated_bytes[static_cast<std::size_t>(StatType::AGGREGATE)].current, base + 4096);
  }
  EXPECT_EQ(allocated_bytes(), base);
}

TEST_F(CudaAdapter, KernelsComputeOnItsMemory) {
  const at::Tensor x = at::arange(0, 1 << 20, at::TensorOptions().dtype(at::kDouble).device(at::kCUDA));
  const double n = 1 << 20;
  EXPECT_EQ((x * 2).sum().item<double>(), n * (n - 1));
}

TEST_F(CudaAdapter, BudgetBelowOneTensorThrowsOutOfMemory) {
  tensorpager::set_budget(std::size_t{64} << 20);
  try {
    const at::Tensor t = at::empty({100 << 20}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
    FAIL() << "expected c10::OutOfMemoryError";
  } catch (const c10::OutOfMemoryError& e) {
    EXPECT_NE(std::string(e.what_without_backtrace()).find("tried to allocate"), std::string::npos);
  }
  tensorpager::set_budget(std::nullopt);
}

TEST_F(CudaAdapter, SnapshotListsTheTensorsSegment) {
  const at::Tensor t = at::empty({1024}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA));
  const auto info = cca::snapshot();
  const auto address = reinterpret_cast<std::size_t>(t.data_ptr());
  bool found = false;
  for (const auto& seg : info.segments) {
    if (address >= seg.address && address < seg.address + seg.total_size) found = true;
  }
  EXPECT_TRUE(found);
}

TEST_F(CudaAdapter, RecordStreamDelaysReuseUntilTheOtherStreamIsDone) {
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(at::kCUDA);
  at::Tensor t = at::empty({1 << 20}, opts);
  const void* first = t.data_ptr();
  const c10::cuda::CUDAStream side = c10::cuda::getStreamFromPool();
  {
    const c10::cuda::CUDAStreamGuard guard(side);
    at::cuda::sleep(std::int64_t{1} << 30);  // keeps `side` busy for a while
  }
  t.record_stream(side);
  t = at::Tensor();
  const at::Tensor u = at::empty({1 << 20}, opts);  // same size, same stream
  EXPECT_NE(u.data_ptr(), first) << "reused memory that work on another stream may still use";
  side.synchronize();
}

TEST_F(CudaAdapter, EmptyCacheReturnsFreeSegments) {
  { const at::Tensor t = at::empty({8 << 20}, at::TensorOptions().dtype(at::kFloat).device(at::kCUDA)); }
  EXPECT_GT(reserved_bytes(), 0);
  cca::emptyCache();
  EXPECT_EQ(reserved_bytes(), 0);
}

TEST_F(CudaAdapter, MemoryFractionSetsTheBudget) {
  const c10::DeviceIndex device = 0;
  cca::setMemoryFraction(0.5, device);
  EXPECT_NEAR(cca::getMemoryFraction(device), 0.5, 1e-6);
  ASSERT_TRUE(tensorpager::budget().has_value());
  tensorpager::set_budget(std::nullopt);
  EXPECT_EQ(cca::getMemoryFraction(device), 1.0);
}

TEST_F(CudaAdapter, UnsupportedFeaturesSaySoAndHowToLeave) {
  try {
    cca::beginAllocateToPool(0, {1, 0}, [](cudaStream_t) { return true; });
    FAIL() << "expected c10::NotImplementedError";
  } catch (const c10::NotImplementedError& e) {
    const std::string msg = e.what_without_backtrace();
    EXPECT_NE(msg.find("tensorpager does not support"), std::string::npos) << msg;
    EXPECT_NE(msg.find("unset backend:tensorpager"), std::string::npos) << msg;
  }
  EXPECT_THROW(cca::shareIpcHandle(nullptr), c10::NotImplementedError);
}

TEST_F(CudaAdapter, UninstallIsRefused) { EXPECT_THROW(tensorpager::uninstall(), tp::error); }

TEST_F(CudaAdapter, TraceTrackersSeeSegmentAllocAndFree) {
  // NCCL's buffer registration listens for these.
  static std::vector<std::pair<c10::CachingDeviceAllocator::TraceEntry::Action, std::size_t>> seen;
  static bool attached = false;
  if (!attached) {
    cca::attachAllocatorTraceTracker([](const c10::CachingDeviceAllocator::TraceEntry& e) {
      seen.emplace_back(e.action_, e.addr_);
    });
    attached = true;
  }
  seen.clear();
  std::size_t address = 0;
  {
    const at::Tensor t = at::empty({64 << 20}, at::TensorOptions().dtype(at::kByte).device(at::kCUDA));
    address = reinterpret_cast<std::size_t>(t.data_ptr());
  }
  cca::emptyCache();
  using Action = c10::CachingDeviceAllocator::TraceEntry::Action;
  const auto has = [&](Action a) {
    return std::find(seen.begin(), seen.end(), std::make_pair(a, address)) != seen.end();
  };
  EXPECT_TRUE(has(Action::SEGMENT_ALLOC));
  EXPECT_TRUE(has(Action::ALLOC));
  EXPECT_TRUE(has(Action::FREE_REQUESTED));
  EXPECT_TRUE(has(Action::SEGMENT_FREE));
}

TEST_F(CudaAdapter, DriverCallsAreMadeOnlyOnceDevicesAreUsed) {
  (void)at::empty({1}, at::TensorOptions().device(at::kCUDA));
  EXPECT_GT(tensorpager::cuda_driver_calls(), 0u);
  EXPECT_FALSE(tensorpager::cuda_device_name(0).empty());
}

TEST_F(CudaAdapter, RecordStreamWithAStreamOfAnotherDevice) {
  if (c10::cuda::device_count() < 2) GTEST_SKIP() << "needs two GPUs";
  const auto opts = at::TensorOptions().dtype(at::kFloat).device(at::Device(at::kCUDA, 0));
  at::Tensor t = at::empty({1 << 20}, opts);
  const void* first = t.data_ptr();
  const c10::cuda::CUDAStream other = c10::cuda::getStreamFromPool(false, 1);
  {
    const c10::cuda::CUDAStreamGuard guard(other);
    at::cuda::sleep(std::int64_t{1} << 30);
  }
  t.record_stream(other);
  t = at::Tensor();
  const at::Tensor u = at::empty({1 << 20}, opts);
  EXPECT_NE(u.data_ptr(), first) << "reused memory that work on cuda:1 may still use";
  other.synchronize();
}

}  // namespace
}  // namespace tp::hooks::testing
