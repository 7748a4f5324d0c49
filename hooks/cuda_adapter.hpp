#pragma once
// cuda_adapter: tensorpager's caching allocator as PyTorch's CUDA allocator
// (c10::cuda::CUDACachingAllocator::CUDAAllocator), one tp::caching_allocator
// over one tp::cuda_device per GPU. Compiled only with TP_WITH_CUDA; includes
// torch's CUDA headers. Written against torch 2.11's interface; see the
// version guard below.
//
// Note [CUDA adapter installation]
// PyTorch reads its CUDA allocator from the atomic
// c10::cuda::CUDACachingAllocator::allocator (every torch.cuda.* memory call
// and every CUDA tensor) and from c10::GetAllocator(DeviceType::CUDA)
// (device-generic code such as torch.accelerator), so install() sets both.
// Memory PyTorch's own allocator handed out before would be freed through
// CUDACachingAllocator::raw_delete, which now reaches tensorpager, so install()
// refuses once PyTorch's allocator has reserved memory on any device: it must
// run before the first CUDA tensor, which the Python package arranges by
// installing at import. There is no uninstall, and an adapter is never
// destroyed (PyTorch holds raw pointers to it until exit).

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/version.h>

#include "allocator/caching_allocator.hpp"
#include "allocator/pinned_host_pool.hpp"
#include "core/clock.hpp"
#include "device/cuda/cuda_device.hpp"
#include "hooks/allocator_control.hpp"
#include "config/config.hpp"
#include "hooks/profiler_glue.hpp"
#include "hooks/runtime_host.hpp"
#include "profiler/allocator_recorder.hpp"

#define TP_TORCH_API (TORCH_VERSION_MAJOR * 100 + TORCH_VERSION_MINOR)
#if TP_TORCH_API < 211
#error "cuda_adapter implements the CUDAAllocator interface of torch 2.11; this torch is older"
#endif
// A newer torch may add pure virtuals (the class then fails to compile as
// abstract), drop ones overridden here ("marked override, but does not
// override") or change AllocatorConfigInfo (filled in snapshot()): compare
// c10/cuda/CUDACachingAllocator.h with 2.11's and guard the differences with
// TP_TORCH_API.

namespace tp::hooks {

/// PyTorch's CUDA allocator, backed by tensorpager. Devices are opened on
/// first use; each gets the configured budget (a ratio resolved against that
/// device's total memory) unless set_budget() has set one for all.
///
/// Thread-safety: every member may be called from any thread, as PyTorch does.
/// Streams: an allocation belongs to PyTorch's current stream of its device
/// (Note [Stream-ordered reuse] in caching_allocator.hpp); recordStream() adds
/// streams that also use it.
/// Errors: out of memory throws c10::OutOfMemoryError with tensorpager's
/// message; unsupported features throw c10::NotImplementedError, see Note
/// [Unsupported features] in cuda_adapter_unsupported.cpp.
class cuda_adapter final : public c10::cuda::CUDACachingAllocator::CUDAAllocator,
                           public allocator_control,
                           public event_log_attachable,
                           public runtime_host {
 public:
  using OutOfMemoryObserver = c10::cuda::CUDACachingAllocator::OutOfMemoryObserver;
  using AllocatorTraceTracker = c10::CachingDeviceAllocator::AllocatorTraceTracker;
  using SnapshotInfo = c10::cuda::CUDACachingAllocator::SnapshotInfo;
  using StreamSegmentSize = c10::cuda::CUDACachingAllocator::StreamSegmentSize;
  using ShareableHandle = c10::cuda::CUDACachingAllocator::ShareableHandle;
  using AllocatorState = c10::cuda::CUDACachingAllocator::AllocatorState;
  using CheckpointDelta = c10::cuda::CUDACachingAllocator::CheckpointDelta;

  /// Creates an adapter for cfg, not yet installed. Never destroyed.
  static cuda_adapter& create(const config& cfg);
  /// Makes this PyTorch's CUDA allocator; see Note [CUDA adapter
  /// installation]. Throws tp::config_error when PyTorch's own allocator
  /// already holds memory.
  void install();

  // --- c10::Allocator ----------------------------------------------------------
  c10::DataPtr allocate(std::size_t n) override;
  c10::DeleterFnPtr raw_deleter() const override;
  void copy_data(void* dest, const void* src, std::size_t count) const override;

  // --- c10::DeviceAllocator -----------------------------------------------------
  bool initialized() override;
  void emptyCache(c10::MempoolId_t mempool_id) override;
  c10::CachingDeviceAllocator::DeviceStats getDeviceStats(c10::DeviceIndex device) override;
  void resetAccumulatedStats(c10::DeviceIndex device) override;
  void resetPeakStats(c10::DeviceIndex device) override;

  // --- CUDAAllocator: supported -------------------------------------------------
  void* raw_alloc(std::size_t nbytes) override;
  void* raw_alloc_with_stream(std::size_t nbytes, cudaStream_t stream) override;
  void raw_delete(void* ptr) override;
  void init(int device_count) override;
  double getMemoryFraction(c10::DeviceIndex device) override;
  void setMemoryFraction(double fraction, c10::DeviceIndex device) override;
  std::vector<StreamSegmentSize> getExpandableSegmentSizes(c10::DeviceIndex device) override;
  void enable(bool value) override;
  bool isEnabled() const override;
  void cacheInfo(c10::DeviceIndex device, std::size_t* largestBlock) override;
  void* getBaseAllocation(void* ptr, std::size_t* size) override;
  using CUDAAllocator::recordStream;
  void recordStream(const c10::DataPtr& ptr, c10::cuda::CUDAStream stream) override;
  SnapshotInfo snapshot(c10::MempoolId_t mempool_id, bool include_traces) override;
  bool isHistoryEnabled() override;
  void attachOutOfMemoryObserver(OutOfMemoryObserver observer) override;
  void attachAllocatorTraceTracker(AllocatorTraceTracker tracker) override;
  void enablePeerAccess(c10::DeviceIndex dev, c10::DeviceIndex dev_to_access) override;
  cudaError_t memcpyAsync(void* dst, int dstDevice, const void* src, int srcDevice, std::size_t count,
                          cudaStream_t stream, bool p2p_enabled) override;
  std::string name() override;

  // --- CUDAAllocator: unsupported (cuda_adapter_unsupported.cpp) -----------------
  void beginAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                           std::function<bool(cudaStream_t)> filter) override;
  void endAllocateToPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void releasePool(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  int getPoolUseCount(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  void createOrIncrefPool(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                          std::shared_ptr<CUDAAllocator> allocator) override;
  void setUseOnOOM(c10::DeviceIndex device, c10::MempoolId_t mempool_id, bool use_on_oom) override;
  void setNoSplit(c10::DeviceIndex device, c10::MempoolId_t mempool_id) override;
  bool checkPoolLiveAllocations(c10::DeviceIndex device, c10::MempoolId_t mempool_id,
                                const std::unordered_set<void*>& expected_live_allocations) override;
  ShareableHandle shareIpcHandle(void* ptr) override;
  std::shared_ptr<void> getIpcDevPtr(std::string handle) override;
  void recordHistory(bool enabled, c10::CachingDeviceAllocator::CreateContextFn context_recorder,
                     std::size_t alloc_trace_max_entries, c10::CachingDeviceAllocator::RecordContext when,
                     bool clearHistory, const std::vector<std::string>& skip_actions) override;
  std::shared_ptr<AllocatorState> getCheckpointState(c10::DeviceIndex device, c10::MempoolId_t id) override;
  CheckpointDelta setCheckpointPoolState(c10::DeviceIndex device, std::shared_ptr<AllocatorState> pps) override;

  // --- allocator_control --------------------------------------------------------
  device_kind kind() const override { return device_kind::cuda; }
  std::string device_description() override;
  allocator_stats memory_stats() override;
  std::vector<segment_snapshot> segments() override;
  void change_budget(std::optional<std::size_t> bytes) override;
  std::optional<std::size_t> budget_bytes() override;
  void release_cache() override;
  void reset_peaks() override;

  // --- event_log_attachable (the timeline, profiler_glue.hpp) ------------------
  void attach_event_log(profiler::event_log* log) override;

  // --- runtime_host (the budget runtime, budget_session.hpp) --------------------
  /// PyTorch's current device and stream; the device's pinned host pool is
  /// created on first use.
  runtime_resources runtime_resources_now() override;

 private:
  static constexpr std::size_t max_devices = C10_COMPILE_TIME_MAX_GPUS;

  struct device_state {
    std::unique_ptr<cuda_device> device;
    std::unique_ptr<caching_allocator> allocator;
    std::size_t total_bytes = 0;
    profiler::allocator_recorder* recorder = nullptr;  // while a timeline records; the log owns it
    std::unique_ptr<pinned_host_pool> host;  // for the runtime; created by runtime_resources_now()
  };

  explicit cuda_adapter(const config& cfg);
  ~cuda_adapter() override = default;

  /// The allocator of `device`, opening the device on first use. Throws
  /// tp::invalid_argument for an index out of range, tp::cuda_error.
  caching_allocator& allocator_for(c10::DeviceIndex device);
  /// The allocator of `device` if it has been opened, else nullptr.
  caching_allocator* opened(c10::DeviceIndex device) const noexcept;
  std::size_t total_bytes(c10::DeviceIndex device);
  void* allocate_on(c10::DeviceIndex device, std::size_t n, cudaStream_t stream);
  /// Frees ptr through whichever device's allocator holds it. Throws
  /// tp::invalid_argument when none does.
  void free_anywhere(void* ptr);
  /// The DeleterFnPtr of every DataPtr: free_anywhere() on the installed adapter.
  static void free_ptr(void* ptr) noexcept;
  void notify_oom(c10::DeviceIndex device, std::size_t requested);
  /// Calls every trace tracker with one entry (ALLOC, FREE_REQUESTED or OOM).
  void trace(c10::CachingDeviceAllocator::TraceEntry::Action action, c10::DeviceIndex device,
             std::size_t address, std::size_t size, cudaStream_t stream);
  /// Statistics for a device not opened yet: zeros, with the configuration's
  /// max_split_size and (unless it is a ratio) budget.
  allocator_stats unopened_stats();

  const config config_;
  steady_clock clock_;
  std::atomic<bool> enabled_{true};
  std::atomic<bool> initialized_{false};
  std::atomic<int> device_count_{0};
  /// One past the highest opened device index.
  std::atomic<std::size_t> device_limit_{0};
  std::array<std::atomic<caching_allocator*>, max_devices> allocators_{};

  std::mutex open_mutex_;  // guards states_ and budget_override_
  std::array<std::unique_ptr<device_state>, max_devices> states_;
  /// Set by change_budget(): the budget for every device, opened or not.
  std::optional<std::optional<std::size_t>> budget_override_;
  /// The timeline's log, attached to devices as they open. Guarded by open_mutex_.
  profiler::event_log* event_log_ = nullptr;
  /// Records device i's allocator into event_log_ (or stops, when it is
  /// null). Requires: open_mutex_ held, states_[i] set.
  void attach_recorder(std::size_t i);

  std::mutex observers_mutex_;  // guards the two lists
  std::vector<OutOfMemoryObserver> oom_observers_;
  std::vector<AllocatorTraceTracker> trace_trackers_;
  std::atomic<bool> has_trackers_{false};
};

}  // namespace tp::hooks
