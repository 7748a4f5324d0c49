// cuda_adapter against torch 2.11's CUDAAllocator, one test per virtual (or
// per group of virtuals with one behaviour), on the CPU: the adapter's real
// code over a fake_cuda_platform. docs/cuda_adapter_review.md is the table
// that names these tests row by row. Streams, trace entries, device guards
// and the no-CUDA-call rule are in cuda_adapter_streams_test.cpp.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "hooks/cuda_adapter.hpp"
#include "tests/hooks/cuda_adapter_fixture.hpp"

namespace tp::hooks::testing {
namespace {

using c10::CachingAllocator::StatType;
constexpr auto all = static_cast<std::size_t>(StatType::AGGREGATE);

using CudaAdapterReview = CudaAdapterOverFakes;

// --- c10::Allocator -----------------------------------------------------------------

TEST_F(CudaAdapterReview, AllocateServesTheCurrentDeviceAndStream) {
  platform_->set_current_device(1);
  adapter_->getMemoryInfo(1);  // opens device 1, so a stream of it can be made current
  const stream_id s = platform_->opened_device(1).create_stream();
  platform_->set_current_stream(1, s);
  c10::DataPtr p = adapter_->allocate(1000);
  ASSERT_NE(p.get(), nullptr);
  EXPECT_EQ(p.get(), p.get_context());
  EXPECT_EQ(p.device(), c10::Device(c10::DeviceType::CUDA, 1));
  EXPECT_EQ(p.get_deleter(), adapter_->raw_deleter());
  EXPECT_EQ(segment_stream(1, p.get()), s);
  EXPECT_EQ(adapter_->getDeviceStats(1).allocated_bytes[all].current, 1024);  // 512-byte rounding
  EXPECT_EQ(adapter_->getDeviceStats(0).allocated_bytes[all].current, 0);
  adapter_->raw_delete(p.release_context());
  EXPECT_EQ(adapter_->getDeviceStats(1).allocated_bytes[all].current, 0);
}

TEST_F(CudaAdapterReview, AllocateOfZeroBytesHoldsNoMemory) {
  c10::DataPtr p = adapter_->allocate(0);
  EXPECT_EQ(p.get(), nullptr);
  EXPECT_EQ(p.device(), c10::Device(c10::DeviceType::CUDA, 0));
}

TEST_F(CudaAdapterReview, RawDeleterIsTheDeleterOfEveryAllocation) {
  ASSERT_NE(adapter_->raw_deleter(), nullptr);
  c10::DataPtr a = adapter_->allocate(64);
  c10::DataPtr b = adapter_->allocate(1 << 22);
  EXPECT_EQ(a.get_deleter(), adapter_->raw_deleter());
  EXPECT_EQ(b.get_deleter(), adapter_->raw_deleter());
  EXPECT_TRUE(adapter_->is_simple_data_ptr(a));  // inherited: ptr == context
  adapter_->raw_delete(a.release_context());
  adapter_->raw_delete(b.release_context());
}

TEST_F(CudaAdapterReview, CopyDataCopiesSynchronously) {
  void* src = adapter_->raw_alloc(4096);
  void* dst = adapter_->raw_alloc(4096);
  fill(src, 4096, 17);
  adapter_->copy_data(dst, src, 4096);
  EXPECT_TRUE(holds(read(dst, 4096), 17));
  EXPECT_THROW(adapter_->copy_data(dst, &platform_, 8), c10::Error);  // not tensorpager's memory
  adapter_->raw_delete(src);
  adapter_->raw_delete(dst);
}

// --- c10::DeviceAllocator -----------------------------------------------------------

TEST_F(CudaAdapterReview, InitializedOnlyAfterInit) {
  cuda_adapter& fresh = cuda_adapter::create(parse_config("device:cuda", "test"),
                                             std::make_unique<fake_cuda_platform>(1));
  EXPECT_FALSE(fresh.initialized());
  fresh.init(1);
  EXPECT_TRUE(fresh.initialized());
}

TEST_F(CudaAdapterReview, InitRefusesMoreDevicesThanItCanServe) {
  EXPECT_THROW(adapter_->init(C10_COMPILE_TIME_MAX_GPUS + 1), c10::Error);
  EXPECT_THROW(adapter_->init(-1), c10::Error);
}

TEST_F(CudaAdapterReview, EmptyCacheReturnsFreeSegmentsOfTheDefaultPoolOnly) {
  void* p = adapter_->raw_alloc(8 * MiB);
  adapter_->raw_delete(p);
  EXPECT_GT(adapter_->getDeviceStats(0).reserved_bytes[all].current, 0);
  adapter_->emptyCache({1, 0});  // a private pool: tensorpager has none, nothing to release
  EXPECT_GT(adapter_->getDeviceStats(0).reserved_bytes[all].current, 0);
  adapter_->emptyCache({0, 0});
  EXPECT_EQ(adapter_->getDeviceStats(0).reserved_bytes[all].current, 0);
}

TEST_F(CudaAdapterReview, GetDeviceStatsOfAnUnusedDeviceIsZeroAndAsksNothing) {
  make("device:cuda,budget:1GiB,max_split_size:64MiB");
  const std::uint64_t before = platform_->calls();
  const auto s = adapter_->getDeviceStats(1);
  EXPECT_EQ(s.allocated_bytes[all].current, 0);
  EXPECT_EQ(s.reserved_bytes[all].current, 0);
  EXPECT_EQ(s.max_split_size, std::int64_t{64} << 20);
  EXPECT_EQ(platform_->calls(), before);
  EXPECT_THROW(adapter_->getDeviceStats(2), c10::Error);  // PyTorch: "Invalid device argument"
  EXPECT_THROW(adapter_->getDeviceStats(-1), c10::Error);
}

TEST_F(CudaAdapterReview, ResetAccumulatedStatsZeroesCountersNotCurrentValues) {
  void* p = adapter_->raw_alloc(1 << 20);
  adapter_->raw_delete(adapter_->raw_alloc(1 << 20));
  ASSERT_GT(adapter_->getDeviceStats(0).allocation[all].allocated, 0);
  adapter_->resetAccumulatedStats(0);
  const auto s = adapter_->getDeviceStats(0);
  EXPECT_EQ(s.allocation[all].allocated, 0);
  EXPECT_EQ(s.allocation[all].freed, 0);
  EXPECT_EQ(s.allocation[all].current, 1);
  adapter_->raw_delete(p);
}

TEST_F(CudaAdapterReview, ResetPeakStatsSetsPeaksToCurrent) {
  void* big = adapter_->raw_alloc(4 * MiB);
  void* small = adapter_->raw_alloc(1 * MiB);
  adapter_->raw_delete(big);
  EXPECT_EQ(adapter_->getDeviceStats(0).allocated_bytes[all].peak, std::int64_t(5 * MiB));
  adapter_->resetPeakStats(0);
  EXPECT_EQ(adapter_->getDeviceStats(0).allocated_bytes[all].peak, std::int64_t(1 * MiB));
  adapter_->raw_delete(small);
}

TEST_F(CudaAdapterReview, GetMemoryInfoIsTheDevicesFreeAndTotal) {
  const auto [free, total] = adapter_->getMemoryInfo(1);
  EXPECT_EQ(total, std::size_t{1} << 30);
  EXPECT_LE(free, total);
  EXPECT_THROW(adapter_->getMemoryInfo(5), c10::Error);
}

// --- CUDAAllocator: allocation ---------------------------------------------------------

TEST_F(CudaAdapterReview, RawAllocUsesTheCurrentDeviceAndStream) {
  EXPECT_EQ(adapter_->raw_alloc(0), nullptr);
  adapter_->getMemoryInfo(0);
  const stream_id s = platform_->opened_device(0).create_stream();
  platform_->set_current_stream(0, s);
  void* p = adapter_->raw_alloc(3000);
  EXPECT_EQ(segment_stream(0, p), s);
  adapter_->raw_delete(p);
}

TEST_F(CudaAdapterReview, RawAllocWithStreamUsesThatStreamOnTheCurrentDevice) {
  EXPECT_EQ(adapter_->raw_alloc_with_stream(0, nullptr), nullptr);
  adapter_->getMemoryInfo(0);
  const stream_id s = platform_->opened_device(0).create_stream();
  void* p = adapter_->raw_alloc_with_stream(3000, raw(s));
  EXPECT_EQ(segment_stream(0, p), s);
  adapter_->raw_delete(p);
}

TEST_F(CudaAdapterReview, RawDeleteFreesAndRefusesForeignPointers) {
  void* p = adapter_->raw_alloc(1 << 20);
  adapter_->raw_delete(p);
  EXPECT_EQ(adapter_->getDeviceStats(0).allocated_bytes[all].current, 0);
  adapter_->raw_delete(nullptr);  // ignored, as PyTorch's
  int local = 0;
  EXPECT_THROW(adapter_->raw_delete(&local), c10::Error);
  EXPECT_THROW(adapter_->raw_delete(p), c10::Error);  // a double free
}

TEST_F(CudaAdapterReview, OutOfMemoryIsTorchsErrorWithTensorpagersFigures) {
  make("device:cuda,budget:64MiB");
  try {
    (void)adapter_->raw_alloc(100 * MiB);
    FAIL() << "expected c10::OutOfMemoryError";
  } catch (const c10::OutOfMemoryError& e) {
    const std::string msg = e.what_without_backtrace();
    EXPECT_NE(msg.find("tried to allocate"), std::string::npos) << msg;
  }
  EXPECT_EQ(adapter_->getDeviceStats(0).num_ooms, 1);
}

// --- CUDAAllocator: fractions, caching, segments ---------------------------------------

TEST_F(CudaAdapterReview, MemoryFractionIsTheBudgetAsAShareOfTheDevice) {
  EXPECT_EQ(adapter_->getMemoryFraction(0), 1.0);
  adapter_->setMemoryFraction(0.25, 0);
  EXPECT_NEAR(adapter_->getMemoryFraction(0), 0.25, 1e-9);
  EXPECT_EQ(adapter_->getDeviceStats(0).reserved_bytes[all].current, 0);
  EXPECT_THROW((void)adapter_->raw_alloc(300 * MiB), c10::OutOfMemoryError);  // over 256 MiB
  EXPECT_THROW(adapter_->setMemoryFraction(1.5, 0), c10::ValueError);
  EXPECT_THROW(adapter_->setMemoryFraction(0.5, 7), c10::Error);
  EXPECT_NEAR(adapter_->getMemoryFraction(0), 0.25, 1e-9);  // unchanged by the refusals
}

TEST_F(CudaAdapterReview, NoExpandableSegments) { EXPECT_TRUE(adapter_->getExpandableSegmentSizes(0).empty()); }

TEST_F(CudaAdapterReview, DisabledCachingReturnsFreedMemoryAtOnce) {
  EXPECT_TRUE(adapter_->isEnabled());
  adapter_->enable(false);
  EXPECT_FALSE(adapter_->isEnabled());
  adapter_->raw_delete(adapter_->raw_alloc(8 * MiB));
  EXPECT_EQ(adapter_->getDeviceStats(0).reserved_bytes[all].current, 0);
  adapter_->enable(true);
  adapter_->raw_delete(adapter_->raw_alloc(8 * MiB));
  EXPECT_GT(adapter_->getDeviceStats(0).reserved_bytes[all].current, 0);
}

TEST_F(CudaAdapterReview, CacheInfoIsTheLargestBlockAnAllocationCouldGet) {
  make("device:cuda,budget:256MiB");
  void* p = adapter_->raw_alloc(64 * MiB);
  adapter_->raw_delete(p);
  std::size_t largest = 0;  // 0: the headroom under the budget counts too
  adapter_->cacheInfo(0, &largest);
  EXPECT_EQ(largest, 256 * MiB - 64 * MiB);
  largest = 1;  // non-zero: only cached blocks, at least the given value
  adapter_->cacheInfo(0, &largest);
  EXPECT_EQ(largest, 64 * MiB);
}

TEST_F(CudaAdapterReview, GetBaseAllocationFindsTheSegment) {
  void* a = adapter_->raw_alloc(4096);
  void* b = adapter_->raw_alloc(4096);  // split from the same small segment
  std::size_t size = 0;
  void* base = adapter_->getBaseAllocation(b, &size);
  EXPECT_EQ(base, adapter_->getBaseAllocation(a, nullptr));
  EXPECT_EQ(size, std::size_t{2} << 20);
  EXPECT_LE(base, b);
  int local = 0;
  EXPECT_THROW(adapter_->getBaseAllocation(&local, &size), c10::Error);
  adapter_->raw_delete(a);
  adapter_->raw_delete(b);
}

TEST_F(CudaAdapterReview, SnapshotListsSegmentsOfTheDefaultPoolAndTheSettings) {
  make("device:cuda,max_split_size:128MiB,expandable_segments:False");
  void* p = adapter_->raw_alloc(3 * MiB);
  const auto info = adapter_->snapshot({0, 0}, true);
  ASSERT_EQ(info.segments.size(), 1u);
  EXPECT_EQ(info.segments[0].device, 0);
  EXPECT_EQ(info.segments[0].allocated_size, 3 * MiB);
  EXPECT_EQ(info.device_traces.size(), 2u);  // one (empty) trace per device PyTorch sees
  EXPECT_EQ(info.config_metadata.max_split_size, 128 * MiB);
  EXPECT_FALSE(info.config_metadata.expandable_segments);
  EXPECT_NE(info.config_metadata.last_allocator_settings.find("backend:tensorpager"), std::string::npos);
  EXPECT_TRUE(adapter_->snapshot({1, 0}, true).segments.empty());  // a private pool: none exist
  adapter_->raw_delete(p);
}

// --- CUDAAllocator: observers, peers, copies, names --------------------------------------

TEST_F(CudaAdapterReview, OutOfMemoryObserversHearTheRequestTheBudgetAndFreeBytes) {
  make("device:cuda,budget:32MiB");
  std::vector<std::int64_t> seen;
  adapter_->attachOutOfMemoryObserver([&](std::int64_t device, std::size_t requested, std::size_t limit,
                                          std::size_t free) {
    seen = {device, static_cast<std::int64_t>(requested), static_cast<std::int64_t>(limit),
            static_cast<std::int64_t>(free)};
  });
  EXPECT_THROW((void)adapter_->raw_alloc(40 * MiB), c10::OutOfMemoryError);
  ASSERT_EQ(seen.size(), 4u);
  EXPECT_EQ(seen[0], 0);
  EXPECT_EQ(seen[1], std::int64_t(40 * MiB));
  EXPECT_EQ(seen[2], std::int64_t(32 * MiB));
  EXPECT_EQ(seen[3], std::int64_t{1} << 30);  // nothing else allocated on the fake device
}

TEST_F(CudaAdapterReview, EnablePeerAccessAsksThePlatformForBothDevices) {
  adapter_->enablePeerAccess(0, 1);
  ASSERT_EQ(platform_->peer_access().size(), 1u);
  EXPECT_EQ(platform_->peer_access()[0], std::make_pair(0, 1));
}

TEST_F(CudaAdapterReview, MemcpyAsyncCopiesAcrossDevicesOnTheGivenStream) {
  void* src = adapter_->raw_alloc(8192);
  platform_->set_current_device(1);
  void* dst = adapter_->raw_alloc(8192);
  fill(src, 8192, 3);
  // PyTorch calls it with the source's device current and a stream of it.
  platform_->set_current_device(0);
  const stream_id s = platform_->opened_device(0).create_stream();
  EXPECT_EQ(adapter_->memcpyAsync(dst, 1, src, 0, 8192, raw(s), /*p2p_enabled=*/false), cudaSuccess);
  platform_->opened_device(0).synchronize(s);
  EXPECT_TRUE(holds(read(dst, 8192), 3));
  // Without peer access the copy is a peer copy (mapped memory is not
  // reachable from the other device otherwise); with it, a plain one.
  ASSERT_EQ(platform_->peer_copies().size(), 1u);
  EXPECT_EQ(platform_->peer_copies()[0], std::make_pair(0, 1));
  fill(src, 8192, 4);
  EXPECT_EQ(adapter_->memcpyAsync(dst, 1, src, 0, 8192, raw(s), /*p2p_enabled=*/true), cudaSuccess);
  platform_->opened_device(0).synchronize(s);
  EXPECT_TRUE(holds(read(dst, 8192), 4));
  EXPECT_EQ(platform_->peer_copies().size(), 1u);
  adapter_->raw_delete(src);
  adapter_->raw_delete(dst);
}

TEST_F(CudaAdapterReview, NameIsTensorpager) { EXPECT_EQ(adapter_->name(), "tensorpager"); }

TEST_F(CudaAdapterReview, HistoryIsOffAndTurningItOnSaysSo) {
  EXPECT_FALSE(adapter_->isHistoryEnabled());
  adapter_->recordHistory(false, nullptr, 0, c10::CachingDeviceAllocator::RecordContext::NEVER, false, {});
  EXPECT_THROW(adapter_->recordHistory(true, nullptr, 100, c10::CachingDeviceAllocator::RecordContext::ALL, false, {}),
               c10::NotImplementedError);
}

TEST_F(CudaAdapterReview, AnnotationsAndMetadataAreInheritedNoOps) {
  adapter_->recordAnnotation({{"name", "step"}});
  std::string context = "compile";
  adapter_->pushCompileContext(context);
  adapter_->popCompileContext();
  adapter_->setUserMetadata("user");
  EXPECT_EQ(adapter_->getUserMetadata(), "");
}

TEST_F(CudaAdapterReview, PoolsGraphsAndIpcRaiseNotImplementedNamingTheWayOut) {
  const c10::MempoolId_t pool{1, 0};
  const auto expect_unsupported = [](const auto& call, const char* what) {
    try {
      call();
      ADD_FAILURE() << what << " did not throw";
    } catch (const c10::NotImplementedError& e) {
      const std::string msg = e.what_without_backtrace();
      EXPECT_NE(msg.find("tensorpager does not support"), std::string::npos) << what << ": " << msg;
      EXPECT_NE(msg.find("unset backend:tensorpager"), std::string::npos) << what << ": " << msg;
    }
  };
  expect_unsupported([&] { adapter_->beginAllocateToPool(0, pool, [](cudaStream_t) { return true; }); },
                     "beginAllocateToPool");
  expect_unsupported([&] { adapter_->endAllocateToPool(0, pool); }, "endAllocateToPool");
  expect_unsupported([&] { adapter_->releasePool(0, pool); }, "releasePool");
  expect_unsupported([&] { (void)adapter_->getPoolUseCount(0, pool); }, "getPoolUseCount");
  expect_unsupported([&] { adapter_->createOrIncrefPool(0, pool, nullptr); }, "createOrIncrefPool");
  expect_unsupported([&] { adapter_->setUseOnOOM(0, pool, true); }, "setUseOnOOM");
  expect_unsupported([&] { adapter_->setNoSplit(0, pool); }, "setNoSplit");
  expect_unsupported([&] { (void)adapter_->checkPoolLiveAllocations(0, pool, {}); }, "checkPoolLiveAllocations");
  expect_unsupported([&] { (void)adapter_->getCheckpointState(0, pool); }, "getCheckpointState");
  expect_unsupported([&] { (void)adapter_->setCheckpointPoolState(0, nullptr); }, "setCheckpointPoolState");
  expect_unsupported([&] { (void)adapter_->shareIpcHandle(nullptr); }, "shareIpcHandle");
  expect_unsupported([&] { (void)adapter_->getIpcDevPtr("handle"); }, "getIpcDevPtr");
}

}  // namespace
}  // namespace tp::hooks::testing
