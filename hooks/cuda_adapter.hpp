#pragma once
// cuda_adapter: tensorpager's caching allocator as PyTorch's CUDA allocator
// (c10::cuda::CUDACachingAllocator::CUDAAllocator), one tp::caching_allocator
// over one tp::device per GPU, the devices and every other CUDA service taken
// from a cuda_platform (Note [Adapter platform] in cuda_platform.hpp).
// Compiled only with TP_WITH_CUDA; includes torch's CUDA headers. Written
// against torch 2.11's interface (see the version guard below); each virtual,
// its contract and the test that covers it: docs/cuda_adapter_review.md.
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
// installing at import. install() itself makes no CUDA call (Note [No CUDA
// call before the first allocation] in cuda_adapter.cpp). There is no
// uninstall, and an installed adapter is never destroyed (PyTorch holds raw
// pointers to it until exit).

#include <array>
#include <atomic>
#include <cstddef>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include <c10/cuda/CUDACachingAllocator.h>
#include <torch/version.h>

#include "allocator/caching_allocator.hpp"
#include "allocator/pinned_host_pool.hpp"
#include "allocator/segment_listener.hpp"
#include "config/config.hpp"
#include "core/clock.hpp"
#include "hooks/allocator_control.hpp"
#include "hooks/cuda_platform.hpp"
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
// c10/cuda/CUDACachingAllocator.h with 2.11's (docs/cuda_adapter_review.md)
// and guard the differences with TP_TORCH_API.

namespace tp::hooks {

/// PyTorch's CUDA allocator, backed by tensorpager. Devices are opened on
/// first use; each gets the configured budget (a ratio resolved against that
/// device's total memory) unless set_budget() has set one for all.
///
/// Thread-safety: every member may be called from any thread, as PyTorch does.
/// Devices: an allocation is made with its device current (PyTorch's, made
/// current by a guard that does nothing when it is already); see Note
/// [Device guards] in cuda_adapter.cpp.
/// Streams: an allocation belongs to PyTorch's current stream of its device
/// (Note [Stream-ordered reuse] in caching_allocator.hpp); recordStream() adds
/// streams that also use it, of any device (Note [Streams of another device]
/// in cuda_adapter_streams.cpp).
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

  /// Creates an adapter for cfg over `platform` (nullptr: the production
  /// platform, c10_cuda_platform.hpp), not yet installed. Makes no CUDA call.
  /// Never destroyed (leaked on purpose: Note [CUDA adapter installation]).
  static cuda_adapter& create(const config& cfg, std::unique_ptr<cuda_platform> platform = nullptr);
  /// Makes this PyTorch's CUDA allocator; see Note [CUDA adapter
  /// installation]. Throws tp::config_error when PyTorch's own allocator
  /// already holds memory.
  void install();

  /// The platform every CUDA call goes through.
  cuda_platform& platform() noexcept { return *platform_; }

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
  std::pair<std::size_t, std::size_t> getMemoryInfo(c10::DeviceIndex device) override;

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
  std::optional<std::optional<std::size_t>> budget_if_known() override;
  void restore_configured_budget() override;
  void release_cache() override;
  void reset_peaks() override;

  // --- event_log_attachable (the timeline, profiler_glue.hpp) ------------------
  void attach_event_log(profiler::event_log* log) override;

  // --- runtime_host (the budget runtime, budget_session.hpp) --------------------
  /// PyTorch's current device and stream; the device's pinned host pool is
  /// created on first use. Restores allocate on that device and stream
  /// (runtime_resources::allocate_on).
  runtime_resources runtime_resources_now() override;

 private:
  static constexpr std::size_t max_devices = C10_COMPILE_TIME_MAX_GPUS;

  /// Trace trackers' SEGMENT_ALLOC / SEGMENT_FREE entries of one device.
  struct segment_tracer final : segment_listener {
    cuda_adapter* adapter = nullptr;
    c10::DeviceIndex device = 0;
    void on_segment_alloc(std::uintptr_t address, std::size_t bytes, stream_id stream) noexcept override;
    void on_segment_free(std::uintptr_t address, std::size_t bytes, stream_id stream) noexcept override;
  };

  struct device_state {
    std::unique_ptr<device> dev;
    std::unique_ptr<caching_allocator> allocator;
    std::size_t total_bytes = 0;
    segment_tracer tracer;
    profiler::allocator_recorder* recorder = nullptr;  // while a timeline records; the log owns it
    std::unique_ptr<pinned_host_pool> host;  // for the runtime; created by runtime_resources_now()
    /// Waits for other devices' streams (Note [Streams of another device]);
    /// created on first use, never destroyed. Guarded by open_mutex_.
    std::optional<stream_id> cross_device_waits;
  };

  cuda_adapter(const config& cfg, std::unique_ptr<cuda_platform> platform);
  ~cuda_adapter() override = default;

  /// The allocator of `device`, opening the device on first use. Throws
  /// tp::invalid_argument for an index out of range, tp::cuda_error.
  caching_allocator& allocator_for(c10::DeviceIndex device);
  /// The allocator of `device` if it has been opened, else nullptr.
  caching_allocator* opened(c10::DeviceIndex device) const noexcept;
  /// The opened state of `device`. Requires: allocator_for(device) returned.
  device_state& state_of(c10::DeviceIndex device);
  /// The allocator of PyTorch's current device if it has been opened, else
  /// nullptr; asks nothing of CUDA while no device is opened.
  caching_allocator* opened_current();
  std::size_t total_bytes(c10::DeviceIndex device);
  /// Allocates n bytes on `device` for `stream`, with `device` current
  /// (device_request says what life and may_reclaim mean).
  void* allocate_on(c10::DeviceIndex device, std::size_t n, cudaStream_t stream, lifetime life = lifetime::transient,
                    bool may_reclaim = true);
  /// The device and size of an allocation of this adapter, or nullopt.
  std::optional<std::pair<c10::DeviceIndex, std::size_t>> owner_of(const void* ptr) const;
  /// Frees ptr through whichever device's allocator holds it. Throws
  /// tp::invalid_argument when none does.
  void free_anywhere(void* ptr);
  /// The DeleterFnPtr of every DataPtr: free_anywhere() on the installed adapter.
  static void free_ptr(void* ptr) noexcept;
  /// Note [Streams of another device]: turns ptr's uses by other devices'
  /// streams into one use of `device`'s cross_device_waits stream. Called
  /// just before ptr is freed.
  void settle_cross_device_uses(c10::DeviceIndex device, caching_allocator& a, void* ptr);
  void notify_oom(c10::DeviceIndex device, std::size_t requested);
  /// Calls every trace tracker with one entry.
  void trace(c10::CachingDeviceAllocator::TraceEntry::Action action, c10::DeviceIndex device,
             std::size_t address, std::size_t size, void* stream);
  /// Statistics for a device not opened yet: zeros, with the configuration's
  /// max_split_size and (unless it is a ratio) budget.
  allocator_stats unopened_stats();
  /// Throws c10::Error unless device indexes a device PyTorch sees (once
  /// init() has told how many), as PyTorch's allocator does.
  void check_device(c10::DeviceIndex device) const;

  const config config_;
  const std::unique_ptr<cuda_platform> platform_;
  steady_clock clock_;
  std::atomic<bool> enabled_{true};
  std::atomic<bool> initialized_{false};
  std::atomic<int> device_count_{0};
  /// One past the highest opened device index.
  std::atomic<std::size_t> device_limit_{0};
  std::array<std::atomic<caching_allocator*>, max_devices> allocators_{};

  std::mutex open_mutex_;  // guards states_, budget_override_, event_log_
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

  /// Note [Streams of another device]: allocation -> (device, stream) of
  /// each use recorded by a stream of another device than the allocation's.
  std::mutex cross_device_mutex_;
  std::unordered_map<const void*, std::vector<std::pair<c10::DeviceIndex, stream_id>>> cross_device_uses_;
  std::atomic<std::size_t> cross_device_count_{0};  // entries in cross_device_uses_, read on every free
};

}  // namespace tp::hooks
