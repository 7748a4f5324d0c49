#pragma once
// tp::cuda_device: the device interface on one CUDA GPU, through the driver
// API only (Note [Driver API only] in driver_api.hpp). This header includes
// no CUDA header, so code above the device layer can hold a cuda_device
// without CUDA's include paths.
//
// Note [CUDA current context]
// The driver API acts on the thread's current context, and PyTorch keeps its
// current device there too (its runtime makes the device's primary context
// current). Every member that calls the driver makes this device's primary
// context current for the duration of the call and restores the caller's
// afterwards (detail::context_guard), so a cuda_device can be used from any
// thread, whatever device PyTorch has current, and never leaves the thread on
// another device. When the device's context is already current, the guard
// does nothing but read it.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "device/cuda/cuda_driver.hpp"
#include "device/device.hpp"

namespace tp {

/// One CUDA device: memory, streams, events and copies on its primary
/// context, and the driver's virtual memory management API (reserve, map,
/// unmap).
///
/// Thread-safety: every member may be called from any thread concurrently.
/// Streams and events: stream_id and event_id hold CUstream and CUevent
/// values, which are also PyTorch's cudaStream_t and cudaEvent_t (Note
/// [Stream and event handles] in device.hpp), so handles created by PyTorch
/// or any other CUDA code on the same device may be passed in.
/// Errors: failures throw tp::cuda_error naming the call, the CUDA error name
/// and its description; noexcept members print that to stderr and continue.
/// Lifetime: holds its driver and a reference on the device's primary context
/// (released when destroyed). Owns the physical memory it mapped; destroying
/// the device releases any still mapped (with a warning). Memory from
/// try_allocate and try_allocate_host, streams and events must be returned
/// before destruction.
class cuda_device final : public device {
 public:
  /// Opens device `ordinal` (as numbered after CUDA_VISIBLE_DEVICES) over
  /// `driver`. Throws tp::cuda_error "no CUDA device: ..." when the driver
  /// sees no device, tp::invalid_argument when ordinal is out of range. A
  /// device or driver without virtual memory management still opens;
  /// granularity(), reserve() and try_map() then throw tp::cuda_error.
  static std::unique_ptr<cuda_device> open(std::shared_ptr<const cuda_driver> driver, int ordinal);
  /// The same over a driver loaded here (cuda_driver::load()); for tests and
  /// programs that hold no driver of their own. Throws what load() throws.
  static std::unique_ptr<cuda_device> open(int ordinal = 0);
  /// Number of CUDA devices visible to this process; 0 when there is no
  /// driver or no device. Loads the driver (Fork in cuda_driver.hpp). Never
  /// throws.
  static int device_count() noexcept;

  ~cuda_device() override;
  cuda_device(const cuda_device&) = delete;
  cuda_device& operator=(const cuda_device&) = delete;

  /// The ordinal this device was opened with.
  int ordinal() const noexcept { return ordinal_; }
  /// The driver it calls through.
  const cuda_driver& driver() const noexcept { return *driver_; }

  /// The device name from cuDeviceGetName ("NVIDIA H200").
  std::string name() const override;

  /// cuMemAlloc. Returns nullptr when the device is out of memory; throws
  /// tp::cuda_error on any other failure.
  void* try_allocate(std::size_t bytes) override;
  /// Waits for the device (cuCtxSynchronize), then cuMemFree; see Note [Free
  /// waits for the device] in cuda_device.cpp.
  void deallocate(void* ptr, std::size_t bytes) noexcept override;

  /// The recommended granularity of pinned device allocations on this device
  /// (cuMemGetAllocationGranularity), queried once at open.
  std::size_t granularity() const override;
  /// cuMemAddressReserve, aligned to granularity(). Throws
  /// tp::invalid_argument when bytes is not a positive multiple of it.
  void* reserve(std::size_t bytes) override;
  void release(void* base, std::size_t bytes) noexcept override;
  /// One physical allocation (cuMemCreate) per granule, mapped and made
  /// read-write for this device; see Note [One handle per granule] in
  /// cuda_device_vmm.cpp. Throws tp::invalid_argument when the range is not
  /// granule-aligned or a granule in it is already mapped.
  bool try_map(void* ptr, std::size_t bytes) override;
  /// Unmaps and releases each granule of the range: any granule-aligned
  /// sub-range of earlier try_map calls. The range must be idle: unlike
  /// deallocate it does not wait (Note [Free waits for the device]).
  void unmap(void* ptr, std::size_t bytes) noexcept override;

  /// cuMemHostAlloc(CU_MEMHOSTALLOC_PORTABLE): usable from every device's
  /// context. Returns nullptr when the host cannot pin more memory.
  void* try_allocate_host(std::size_t bytes) override;
  void deallocate_host(void* ptr, std::size_t bytes) noexcept override;

  /// cuStreamCreate(CU_STREAM_NON_BLOCKING).
  stream_id create_stream() override;
  /// cuStreamDestroy. The default stream is ignored.
  void destroy_stream(stream_id stream) noexcept override;
  /// Always true: CUDA offers no cheap, safe way to validate a CUstream (an
  /// invalid handle is undefined behaviour to pass to CUDA, not an error), and
  /// streams created outside tensorpager must be accepted.
  bool is_stream(stream_id stream) const override;
  void synchronize(stream_id stream) override;
  /// cuCtxSynchronize.
  void synchronize_device() override;

  /// cuEventCreate(CU_EVENT_DISABLE_TIMING).
  event_id create_event() override;
  void destroy_event(event_id event) noexcept override;
  /// cuEventRecord. The stream must belong to this device (CUDA requires
  /// event and stream to share a context).
  void record_event(event_id event, stream_id stream) override;
  /// cuEventQuery; CUDA_ERROR_NOT_READY is reported as false.
  bool query_event(event_id event) override;
  void synchronize_event(event_id event) override;
  /// cuStreamWaitEvent. The event may belong to another device.
  void stream_wait_event(stream_id stream, event_id event) override;
  /// cuEventCreate(CU_EVENT_DEFAULT): an event that keeps its time.
  event_id create_timing_event() override;
  /// cuEventElapsedTime (resolution about 0.5 us); nullopt when the driver
  /// lacks it. Throws tp::cuda_error for an event without timing or not
  /// complete.
  std::optional<std::int64_t> elapsed_ns(event_id start, event_id end) override;

  /// cuMemcpyAsync: the direction comes from unified addressing. Host memory
  /// that is not page-locked makes the copy synchronous with respect to the
  /// host.
  void copy_async(void* dst, const void* src, std::size_t bytes, stream_id stream) override;

  /// cuMemGetInfo: free and total memory of the whole device, including what
  /// other processes use.
  memory_info memory() const override;

  // --- CUDA only: between devices ----------------------------------------------

  /// Lets kernels and copies on this device read and write memory of `peer`:
  /// cuCtxEnablePeerAccess with this device's context current, and access
  /// for this device to every granule `peer` maps, now and later (Note
  /// [Peers of mapped memory] in cuda_device_vmm.cpp). Enabling it twice is
  /// not an error.
  void enable_peer_access(cuda_device& peer);
  /// Enqueues on `stream` (this device's) a copy of bytes from src, memory of
  /// this device, to dst, memory of `dst_device` (cuMemcpyPeerAsync): works
  /// without peer access, mapped memory included.
  void copy_to_peer_async(void* dst, const cuda_device& dst_device, const void* src, std::size_t bytes,
                          stream_id stream);

 private:
  struct handles;  // the CUdevice and the primary CUcontext, kept out of this header

  cuda_device(std::shared_ptr<const cuda_driver> driver, int ordinal, std::unique_ptr<handles> h,
              std::string name, std::size_t granularity, std::string vmm_unavailable);

  /// Throws tp::cuda_error when virtual memory management is unavailable and
  /// tp::invalid_argument when [ptr, ptr + bytes) is not granule-aligned.
  void check_vmm_range(const void* ptr, std::size_t bytes, const char* caller) const;
  /// Unmaps and releases the granules of [begin, end) found in granules_,
  /// logging failures. Requires: map_mutex_ held, this device's context current.
  void unmap_granules_locked(std::uintptr_t begin, std::uintptr_t end) noexcept;
  /// Gives device `peer` read-write access to every granule mapped now and
  /// mapped later (Note [Peers of mapped memory]).
  void grant_access(int peer);

  const std::shared_ptr<const cuda_driver> driver_;
  const int ordinal_;
  const std::unique_ptr<handles> handles_;
  const std::string name_;
  /// 0 when virtual memory management is unavailable; vmm_unavailable_ says why.
  const std::size_t granularity_;
  const std::string vmm_unavailable_;

  std::mutex map_mutex_;
  /// Granule address -> its CUmemGenericAllocationHandle. Guarded by map_mutex_.
  std::map<std::uintptr_t, std::uint64_t> granules_;
  /// Devices given access to this device's mapped memory (Note [Peers of
  /// mapped memory]), besides itself. Guarded by map_mutex_.
  std::vector<int> accessors_;
};

}  // namespace tp
