// cuda_adapter on the CPU, over a fake_cuda_platform: record_stream with
// streams of the same and of another device, the entries trace trackers
// receive, the device guard around allocations, restores that allocate for
// the tensor's device and stream, and no CUDA call before the first
// allocation (in this process and, for install(), in a child).

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <memory>
#include <optional>
#include <string>
#include <tuple>
#include <vector>

#include <c10/core/Allocator.h>
#include <c10/cuda/CUDACachingAllocator.h>
#include <c10/util/Exception.h>
#include <gtest/gtest.h>

#include "hooks/cuda_adapter.hpp"
#include "hooks/budget/budget_api.hpp"
#include "hooks/tensorpager.hpp"
#include "tests/hooks/cuda_adapter_fixture.hpp"

namespace tp::hooks::testing {
namespace {

using c10::CachingDeviceAllocator::TraceEntry;
using CudaAdapterStreams = CudaAdapterOverFakes;

// --- record_stream ------------------------------------------------------------------

TEST_F(CudaAdapterStreams, RecordStreamOfTheSameDeviceDelaysReuse) {
  c10::DataPtr dp = adapter_->allocate(1 * MiB);
  fake_cuda_device& dev0 = platform_->opened_device(0);
  const stream_id side = dev0.create_stream();
  platform_->hold(side);  // work queued on `side` has not run yet
  adapter_->recordStream(dp, cuda_stream(side, 0));
  void* first = dp.release_context();
  adapter_->raw_delete(first);
  void* second = adapter_->raw_alloc(1 * MiB);
  EXPECT_NE(second, first) << "reused memory that queued work on another stream may still use";
  platform_->release(side);
  void* third = adapter_->raw_alloc(1 * MiB);
  EXPECT_EQ(third, first);
  adapter_->raw_delete(second);
  adapter_->raw_delete(third);
}

TEST_F(CudaAdapterStreams, AFreeWhoseEventCannotBeRecordedKeepsTheBlockOutOfUse) {
  // Note [A free that cannot record its events]: after a sticky fault the
  // free (noexcept) neither ends the process nor hands the block out again.
  c10::DataPtr dp = adapter_->allocate(1 * MiB);
  fake_cuda_device& dev0 = platform_->opened_device(0);
  const stream_id side = dev0.create_stream();
  adapter_->recordStream(dp, cuda_stream(side, 0));
  dev0.fault();
  void* first = dp.release_context();
  adapter_->raw_delete(first);  // would std::terminate if the failure escaped
  void* second = adapter_->raw_alloc(1 * MiB);
  EXPECT_NE(second, first) << "handed out a block whose other stream's use is unknown";
  adapter_->raw_delete(second);
}

TEST_F(CudaAdapterStreams, VirtualMemoryThatFailsFallsBackToPlainSegmentsOnce) {
  // Note [Virtual memory that fails] in allocator/caching_allocator_blocks.cpp.
  make("device:cuda");  // expandable segments, the default
  c10::DataPtr first = adapter_->allocate(4 * MiB);  // granules mapped
  platform_->opened_device(0).break_vmm();
  c10::DataPtr second = adapter_->allocate(64 * MiB);  // would throw on every allocation before
  c10::DataPtr third = adapter_->allocate(64 * MiB);
  EXPECT_NE(second.get(), nullptr);
  EXPECT_NE(third.get(), nullptr);
  const auto segments = adapter_->snapshot({0, 0}, false).segments;
  EXPECT_EQ(segments.size(), 3u) << "the expandable segment and two plain ones";
  adapter_->raw_delete(first.release_context());
  adapter_->raw_delete(second.release_context());
  adapter_->raw_delete(third.release_context());
}

TEST_F(CudaAdapterStreams, RecordStreamOfAnotherDeviceDelaysReuseUntilThatStreamIsDone) {
  c10::DataPtr dp = adapter_->allocate(1 * MiB);  // on cuda:0
  (void)adapter_->getMemoryInfo(1);
  fake_cuda_device& dev1 = platform_->opened_device(1);
  const stream_id other = dev1.create_stream();
  platform_->hold(other);
  // The fake refuses an event of cuda:0 recorded on a stream of cuda:1, as
  // CUDA does: the adapter must record on cuda:1 and wait on cuda:0.
  adapter_->recordStream(dp, cuda_stream(other, 1));
  void* first = dp.release_context();
  adapter_->raw_delete(first);
  void* second = adapter_->raw_alloc(1 * MiB);
  EXPECT_NE(second, first) << "reused memory that queued work on cuda:1 may still use";
  adapter_->raw_delete(second);
  // (empty_cache here would wait for `other`, as PyTorch's does: it
  // synchronizes pending events before it releases anything.)
  platform_->release(other);
  void* third = adapter_->raw_alloc(1 * MiB);
  EXPECT_EQ(third, first);
  adapter_->raw_delete(third);
}

TEST_F(CudaAdapterStreams, RecordStreamIgnoresMemoryThatIsNotTensorpagers) {
  int local = 0;
  const c10::DataPtr foreign(&local, c10::Device(c10::DeviceType::CUDA, 0));
  adapter_->recordStream(foreign, cuda_stream(default_stream, 0));  // as PyTorch's: skipped
  adapter_->recordStream(c10::DataPtr(nullptr, c10::Device(c10::DeviceType::CUDA, 0)), cuda_stream(default_stream, 0));
}

TEST_F(CudaAdapterStreams, RecordStreamThroughTheDeviceGenericOverload) {
  c10::DataPtr dp = adapter_->allocate(1 * MiB);
  const stream_id side = platform_->opened_device(0).create_stream();
  platform_->hold(side);
  const c10::Stream generic = cuda_stream(side, 0);  // what at::Tensor::record_stream passes
  static_cast<c10::DeviceAllocator*>(adapter_)->recordStream(dp, generic);
  void* first = dp.release_context();
  adapter_->raw_delete(first);
  void* second = adapter_->raw_alloc(1 * MiB);
  EXPECT_NE(second, first);
  platform_->release(side);
  adapter_->raw_delete(second);
}

// --- trace trackers -----------------------------------------------------------------

TEST_F(CudaAdapterStreams, TraceTrackersSeeAnExpandableSegmentsMappedRangesAsSegments) {
  make("device:cuda,budget:64MiB,expandable_segments:True");
  std::vector<std::tuple<TraceEntry::Action, int, std::size_t, std::size_t>> seen;
  adapter_->attachAllocatorTraceTracker([&](const TraceEntry& e) {
    seen.emplace_back(e.action_, e.device_, e.addr_, e.size_);
  });
  platform_->set_current_device(1);
  void* p = adapter_->raw_alloc(4 * MiB);
  adapter_->raw_delete(p);
  adapter_->emptyCache({0, 0});
  ASSERT_EQ(seen.size(), 4u);
  const auto address = reinterpret_cast<std::size_t>(p);
  EXPECT_EQ(seen[0], std::make_tuple(TraceEntry::SEGMENT_ALLOC, 1, address, 4 * MiB));  // the granules mapped
  EXPECT_EQ(seen[1], std::make_tuple(TraceEntry::ALLOC, 1, address, 4 * MiB));
  EXPECT_EQ(seen[2], std::make_tuple(TraceEntry::FREE_REQUESTED, 1, address, 4 * MiB));
  EXPECT_EQ(seen[3], std::make_tuple(TraceEntry::SEGMENT_FREE, 1, address, 4 * MiB));  // unmapped
}

TEST_F(CudaAdapterStreams, TraceTrackersSeeSegmentsAllocationsFreesAndOutOfMemory) {
  make("device:cuda,budget:64MiB,expandable_segments:False");
  std::vector<std::tuple<TraceEntry::Action, int, std::size_t, std::size_t>> seen;
  adapter_->attachAllocatorTraceTracker([&](const TraceEntry& e) {
    seen.emplace_back(e.action_, e.device_, e.addr_, e.size_);
  });
  platform_->set_current_device(1);
  void* p = adapter_->raw_alloc(4 * MiB);
  adapter_->raw_delete(p);
  adapter_->emptyCache({0, 0});
  EXPECT_THROW((void)adapter_->raw_alloc(100 * MiB), c10::OutOfMemoryError);

  ASSERT_EQ(seen.size(), 5u);
  const auto address = reinterpret_cast<std::size_t>(p);
  const std::size_t segment = 20 * MiB;  // 1-10 MiB requests get a 20 MiB segment, as PyTorch's
  EXPECT_EQ(seen[0], std::make_tuple(TraceEntry::SEGMENT_ALLOC, 1, address, segment));
  EXPECT_EQ(seen[1], std::make_tuple(TraceEntry::ALLOC, 1, address, 4 * MiB));
  EXPECT_EQ(seen[2], std::make_tuple(TraceEntry::FREE_REQUESTED, 1, address, 4 * MiB));
  EXPECT_EQ(seen[3], std::make_tuple(TraceEntry::SEGMENT_FREE, 1, address, segment));
  EXPECT_EQ(std::get<0>(seen[4]), TraceEntry::OOM);
  EXPECT_EQ(std::get<3>(seen[4]), 100 * MiB);
}

TEST_F(CudaAdapterStreams, SegmentEntriesCarryTheSegmentsStream) {
  (void)adapter_->getMemoryInfo(0);
  const stream_id s = platform_->opened_device(0).create_stream();
  std::vector<void*> streams;
  adapter_->attachAllocatorTraceTracker([&](const TraceEntry& e) {
    if (e.action_ == TraceEntry::SEGMENT_ALLOC || e.action_ == TraceEntry::SEGMENT_FREE) streams.push_back(e.stream_);
  });
  adapter_->raw_delete(adapter_->raw_alloc_with_stream(4096, raw(s)));
  adapter_->emptyCache({0, 0});
  ASSERT_EQ(streams.size(), 2u);
  EXPECT_EQ(streams[0], raw(s));
  EXPECT_EQ(streams[1], raw(s));
}

// --- device guards and restores -------------------------------------------------------

TEST_F(CudaAdapterStreams, AllocationOnTheCurrentDeviceSetsNoDevice) {
  platform_->set_current_device(1);
  const std::uint64_t sets = platform_->set_device_calls();
  adapter_->raw_delete(adapter_->raw_alloc(4096));
  c10::DataPtr dp = adapter_->allocate(4096);
  adapter_->raw_delete(dp.release_context());
  EXPECT_EQ(platform_->set_device_calls(), sets);
}

TEST_F(CudaAdapterStreams, AGuardLeavesNoContextOnADeviceTheThreadNeverUsed) {
  // Work for cuda:1 switches there and back while the thread's device is
  // cuda:0, which it never used: going back must not make cuda:0 a context
  // (about 0.5 GB of that GPU), as PyTorch's guards do not (MaybeSetDevice).
  platform_->set_current_device(1);
  const runtime_resources res1 = adapter_->runtime_resources_now();  // opens cuda:1
  platform_->set_current_device(0);
  ASSERT_FALSE(platform_->has_context(0));
  void* q = res1.allocate_on({1 * MiB, default_stream});  // a guard: to cuda:1 and back
  EXPECT_EQ(platform_->current_device(), 0);
  adapter_->raw_delete(q);  // the same, to free it
  EXPECT_FALSE(platform_->has_context(0)) << "restoring the thread's device created a context there";
}

TEST_F(CudaAdapterStreams, RestoreAllocatesForTheTensorsDeviceAndStreamWithThatDeviceCurrent) {
  // The runtime starts on cuda:1 with a side stream current ...
  platform_->set_current_device(1);
  (void)adapter_->getMemoryInfo(1);
  const stream_id tracked = platform_->opened_device(1).create_stream();
  platform_->set_current_stream(1, tracked);
  const runtime_resources res = adapter_->runtime_resources_now();
  EXPECT_EQ(res.device_index, 1);
  EXPECT_EQ(res.compute, tracked);
  ASSERT_TRUE(res.allocate_on);
  ASSERT_TRUE(res.current_stream);
  EXPECT_EQ(res.current_stream(), tracked);
  // ... and a restore runs while cuda:0 and its default stream are current.
  platform_->set_current_device(0);
  platform_->set_current_stream(1, default_stream);
  EXPECT_EQ(res.current_stream(), default_stream) << "cuda:1's current stream, whatever device is current";
  void* p = res.allocate_on({3 * MiB, tracked});
  EXPECT_EQ(segment_stream(1, p), tracked);
  EXPECT_EQ(platform_->opened_device(1).current_device_at_allocation().back(), 1) << "allocated without cuda:1 current";
  EXPECT_EQ(platform_->current_device(), 0) << "the caller's device was not restored";
  EXPECT_EQ(adapter_->getDeviceStats(0).allocated_bytes[0].current, 0);
  adapter_->raw_delete(p);
}

// --- no CUDA call before the first allocation -------------------------------------------

TEST_F(CudaAdapterStreams, NothingBeforeTheFirstAllocationCallsCuda) {
  cuda_adapter& fresh = cuda_adapter::create(parse_config("device:cuda,budget:1GiB", "test"),
                                             std::make_unique<fake_cuda_platform>(2));
  const auto& platform = static_cast<const fake_cuda_platform&>(fresh.platform());
  fresh.init(2);
  (void)fresh.initialized();
  (void)fresh.getDeviceStats(0);
  (void)fresh.getDeviceStats(1);
  fresh.resetPeakStats(0);
  fresh.resetAccumulatedStats(1);
  (void)fresh.snapshot({0, 0}, true);
  fresh.emptyCache({0, 0});
  (void)fresh.memory_stats();
  (void)fresh.segments();
  (void)fresh.device_description();
  (void)fresh.budget_bytes();
  fresh.reset_peaks();
  fresh.release_cache();
  fresh.change_budget(std::size_t{512} << 20);
  fresh.attachOutOfMemoryObserver([](std::int64_t, std::size_t, std::size_t, std::size_t) {});
  fresh.attachAllocatorTraceTracker([](const TraceEntry&) {});
  (void)fresh.name();
  (void)fresh.isEnabled();
  EXPECT_EQ(platform.calls(), 0u);
  fresh.raw_delete(fresh.raw_alloc(1));
  EXPECT_GT(platform.calls(), 0u);
}

TEST(CudaAdapterInstallDeathTest, InstallingMakesNoCudaCall) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  // Installing is process-wide and cannot be undone: children do it.
  EXPECT_EXIT(
      {
        auto platform = std::make_unique<fake_cuda_platform>(1);
        const fake_cuda_platform* fake = platform.get();
        cuda_adapter& a = cuda_adapter::create(parse_config("device:cuda", "test"), std::move(platform));
        a.install();
        const bool ok = c10::cuda::CUDACachingAllocator::get() == &a &&
                        c10::GetAllocator(c10::DeviceType::CUDA) == &a && fake->calls() == 0;
        std::exit(ok ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
  // The production path: the C++ API with its real platform and driver loader.
  EXPECT_EXIT(
      {
        tensorpager::install("device:cuda");
        std::exit(tensorpager::is_installed() && tensorpager::device_kind() == "cuda" &&
                          tensorpager::cuda_driver_calls() == 0
                      ? 0
                      : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

// Issue 29: manage:* with budget:0.9device began its session at import by
// asking the budget, which opened cuda:0 (a share of a device has no size
// before the device is open). A session that changes no budget now asks for
// none that would open it (the production path: the real platform and
// driver loader, which this machine has no GPU for).
TEST(CudaAdapterInstallDeathTest, ASessionThatChangesNoBudgetOpensNoDeviceForAShareOfIt) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        tensorpager::install("device:cuda,budget:0.9device");
        const std::optional<std::size_t> previous = begin_session({});
        const bool begun = tensorpager::cuda_driver_calls() == 0;
        (void)end_session(previous);
        std::exit(begun && tensorpager::cuda_driver_calls() == 0 ? 0 : 1);
      },
      ::testing::ExitedWithCode(0), "");
}

TEST_F(CudaAdapterStreams, RestoringTheConfiguredBudgetGivesEachOpenedDeviceItsShareAgain) {
  make("device:cuda,budget:0.9device");
  adapter_->raw_delete(adapter_->raw_alloc(1 << 20));  // opens cuda:0
  const std::optional<std::size_t> share = adapter_->budget_bytes();
  const auto total = static_cast<double>(platform_->opened_device(0).memory().total_bytes);
  ASSERT_TRUE(share.has_value());
  EXPECT_NEAR(static_cast<double>(*share), 0.9 * total, 1 << 20);
  adapter_->change_budget(64 << 20);
  EXPECT_EQ(adapter_->budget_bytes(), std::optional<std::size_t>(64 << 20));
  adapter_->restore_configured_budget();
  EXPECT_EQ(adapter_->budget_bytes(), share);
  // And a device opened afterwards gets the share too, not the override.
  adapter_->change_budget(64 << 20);
  adapter_->restore_configured_budget();
  platform_->set_current_device(1);
  adapter_->raw_delete(adapter_->raw_alloc(1 << 20));
  EXPECT_EQ(adapter_->budget_bytes(), share);
}

}  // namespace
}  // namespace tp::hooks::testing
