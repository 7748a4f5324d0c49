#pragma once
// tp::cuda_device: the device interface on one CUDA GPU. This header includes
// no CUDA header, so code above the device layer can hold a cuda_device
// without CUDA's include paths; only the .cpp files of device/cuda do
// (see Note [No link against libcuda] in driver_api.hpp).
//
// Note [CUDA current device]
// CUDA's current device is per thread, and PyTorch keeps its own in it. Every
// member that calls CUDA makes this device current for the duration of the
// call and restores the caller's device afterwards, so a cuda_device can be
// used from any thread and never leaves the thread on another device.
// cudaSetDevice is called even when the ordinal is already current: since
// CUDA 12 it also makes the primary context current on the thread, which the
// driver API virtual-memory calls need.

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <string>

#include "device/device.hpp"

namespace tp {

namespace detail {
struct driver_api;
}

/// One CUDA device, through the runtime API (memory, streams, events, copies)
/// and the driver's virtual memory management API (reserve, map, unmap).
///
/// Thread-safety: every member may be called from any thread concurrently.
/// Streams and events: stream_id and event_id hold cudaStream_t and
/// cudaEvent_t values (Note [Stream and event handles] in device.hpp), so
/// handles created by PyTorch or any other CUDA code may be passed in.
/// Errors: failures throw tp::cuda_error naming the call, the CUDA error name
/// and its description; noexcept members print that to stderr and continue.
/// Lifetime: owns the physical memory it mapped; destroying the device
/// releases any still mapped (with a warning). Memory from try_allocate and
/// try_allocate_host, streams and events must be returned before destruction.
class cuda_device final : public device {
 public:
  /// Opens device `ordinal` (as numbered by the CUDA runtime, after
  /// CUDA_VISIBLE_DEVICES). Throws tp::cuda_error "no CUDA device: ..." when
  /// there is no driver or no device, tp::invalid_argument when ordinal is out
  /// of range. A device or driver without virtual memory management still
  /// opens; granularity(), reserve() and try_map() then throw tp::cuda_error.
  static std::unique_ptr<cuda_device> open(int ordinal = 0);
  /// Number of CUDA devices visible to this process; 0 when there is no
  /// driver or no device. Never throws.
  static int device_count() noexcept;

  ~cuda_device() override;
  cuda_device(const cuda_device&) = delete;
  cuda_device& operator=(const cuda_device&) = delete;

  /// The CUDA runtime ordinal this device was opened with.
  int ordinal() const noexcept { return ordinal_; }

  /// The device name from cudaGetDeviceProperties ("NVIDIA H200").
  std::string name() const override;

  /// cudaMalloc. Returns nullptr (and clears CUDA's last error) when the
  /// device is out of memory; throws tp::cuda_error on any other failure.
  void* try_allocate(std::size_t bytes) override;
  /// cudaFree, which waits for all work on the device first.
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
  /// cuda_device.cpp. Throws tp::invalid_argument when the range is not
  /// granule-aligned or a granule in it is already mapped.
  bool try_map(void* ptr, std::size_t bytes) override;
  /// Unmaps and releases each granule of the range: any granule-aligned
  /// sub-range of earlier try_map calls. Waits for all work on the device
  /// first, like cudaFree; see Note [Unmap waits for the device].
  void unmap(void* ptr, std::size_t bytes) noexcept override;

  /// cudaHostAlloc(cudaHostAllocDefault). Returns nullptr (and clears CUDA's
  /// last error) when the host cannot pin more memory.
  void* try_allocate_host(std::size_t bytes) override;
  void deallocate_host(void* ptr, std::size_t bytes) noexcept override;

  /// cudaStreamCreateWithFlags(cudaStreamNonBlocking).
  stream_id create_stream() override;
  /// cudaStreamDestroy. The default stream is ignored.
  void destroy_stream(stream_id stream) noexcept override;
  /// Always true: CUDA offers no cheap, safe way to validate a cudaStream_t
  /// (an invalid handle is undefined behaviour to pass to CUDA, not an
  /// error), and streams created outside tensorpager must be accepted.
  bool is_stream(stream_id stream) const override;
  void synchronize(stream_id stream) override;

  /// cudaEventCreateWithFlags(cudaEventDisableTiming).
  event_id create_event() override;
  void destroy_event(event_id event) noexcept override;
  void record_event(event_id event, stream_id stream) override;
  /// cudaEventQuery; cudaErrorNotReady is reported as false and cleared.
  bool query_event(event_id event) override;
  void synchronize_event(event_id event) override;
  void stream_wait_event(stream_id stream, event_id event) override;

  /// cudaMemcpyAsync(cudaMemcpyDefault): the direction comes from unified
  /// addressing. Host memory that is not page-locked makes the copy
  /// synchronous with respect to the host.
  void copy_async(void* dst, const void* src, std::size_t bytes, stream_id stream) override;

  /// cudaMemGetInfo: free and total memory of the whole device, including
  /// what other processes use.
  memory_info memory() const override;

 private:
  cuda_device(int ordinal, std::string name, std::unique_ptr<const detail::driver_api> driver,
              std::size_t granularity, std::string vmm_unavailable);

  /// Throws tp::cuda_error when virtual memory management is unavailable and
  /// tp::invalid_argument when [ptr, ptr + bytes) is not granule-aligned.
  void check_vmm_range(const void* ptr, std::size_t bytes, const char* caller) const;
  /// Unmaps and releases the granules of [begin, end) found in granules_,
  /// logging failures. Requires: map_mutex_ held.
  void unmap_granules_locked(std::uintptr_t begin, std::uintptr_t end) noexcept;

  const int ordinal_;
  const std::string name_;
  /// Null when the driver lacks the virtual memory management entry points.
  const std::unique_ptr<const detail::driver_api> driver_;
  /// 0 when virtual memory management is unavailable; vmm_unavailable_ says why.
  const std::size_t granularity_;
  const std::string vmm_unavailable_;

  std::mutex map_mutex_;
  /// Granule address -> its CUmemGenericAllocationHandle. Guarded by map_mutex_.
  std::map<std::uintptr_t, std::uint64_t> granules_;
};

}  // namespace tp
