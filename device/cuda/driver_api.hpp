#pragma once
// The CUDA driver's entry points as device/cuda calls them: a table of
// function pointers resolved at run time, a counter of the calls made through
// it, error texts, and a guard for the current context. Private to
// device/cuda: only its .cpp files include it.
//
// Note [Driver API only]
// tensorpager links no CUDA library at all: not libcuda (the library must
// load, and report "no CUDA device", where there is no driver) and not the
// CUDA runtime, static or shared. PyTorch brings its own shared runtime, and
// a second, static copy inside tensorpager would keep its own per-thread state
// (current device, last error, a primary-context reference of its own); the
// two would have to agree on every handle that crosses between them. The
// driver API has no such state besides the current context, which both
// PyTorch and tensorpager take from the driver itself. So:
//   - cuda_driver::load() dlopens libcuda.so.1 (the library PyTorch's runtime
//     has already loaded, when there is one: the same driver instance), looks
//     up cuGetProcAddress with dlsym and every other entry point through it;
//   - each symbol is requested at the CUDA version its typedef in
//     <cudaTypedefs.h> names (cuMemAlloc at 3020 is cuMemAlloc_v2, and so
//     on), with CU_GET_PROC_ADDRESS_LEGACY_STREAM, so that stream 0 is the
//     legacy default stream PyTorch's default stream also is;
//   - every device works on its primary context (cuDevicePrimaryCtxRetain),
//     the context PyTorch's runtime uses, so memory, streams and events are
//     shared with PyTorch without translation: a cudaStream_t is a CUstream.
// cuda.h and cudaTypedefs.h are included for their types only: no function
// declared there is called directly (the symbols check,
// scripts/check_cuda_symbols.py, ctest Layers.NoCudaLibraryLinked, fails if
// one is, or if a CUDA library is linked).

#include <cuda.h>
#include <cudaTypedefs.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <new>
#include <string>

namespace tp::detail {

/// The entry points device/cuda uses, each at the ABI its typedef names.
/// Immutable after cuda_driver::load() fills it, except the call counter.
/// Thread-safety: any thread.
struct driver_api {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuInit_v2000 init = nullptr;
  PFN_cuDriverGetVersion_v2020 driver_get_version = nullptr;
  PFN_cuDeviceGetCount_v2000 device_get_count = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetName_v2000 device_get_name = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuDeviceTotalMem_v3020 device_total_mem = nullptr;
  PFN_cuDevicePrimaryCtxRetain_v7000 primary_ctx_retain = nullptr;
  PFN_cuDevicePrimaryCtxRelease_v11000 primary_ctx_release = nullptr;
  PFN_cuCtxGetCurrent_v4000 ctx_get_current = nullptr;
  PFN_cuCtxSetCurrent_v4000 ctx_set_current = nullptr;
  PFN_cuCtxSynchronize_v2000 ctx_synchronize = nullptr;
  PFN_cuCtxEnablePeerAccess_v4000 ctx_enable_peer_access = nullptr;
  PFN_cuMemGetInfo_v3020 mem_get_info = nullptr;
  PFN_cuMemAlloc_v3020 mem_alloc = nullptr;
  PFN_cuMemFree_v3020 mem_free = nullptr;
  PFN_cuMemHostAlloc_v2020 mem_host_alloc = nullptr;
  PFN_cuMemFreeHost_v2000 mem_free_host = nullptr;
  PFN_cuMemcpyAsync_v4000 memcpy_async = nullptr;
  PFN_cuMemcpyPeerAsync_v4000 memcpy_peer_async = nullptr;
  PFN_cuStreamCreate_v2000 stream_create = nullptr;
  PFN_cuStreamDestroy_v4000 stream_destroy = nullptr;
  PFN_cuStreamSynchronize_v2000 stream_synchronize = nullptr;
  PFN_cuStreamWaitEvent_v3020 stream_wait_event = nullptr;
  PFN_cuEventCreate_v2000 event_create = nullptr;
  PFN_cuEventDestroy_v4000 event_destroy = nullptr;
  PFN_cuEventRecord_v2000 event_record = nullptr;
  PFN_cuEventQuery_v2000 event_query = nullptr;
  PFN_cuEventSynchronize_v2000 event_synchronize = nullptr;
  // Optional: null when the driver lacks it (copies are then not timed).
  PFN_cuEventElapsedTime_v2000 event_elapsed_time = nullptr;
  // Virtual memory management: optional (null when the driver lacks them).
  PFN_cuMemAddressReserve_v10020 mem_address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 mem_address_free = nullptr;
  PFN_cuMemCreate_v10020 mem_create = nullptr;
  PFN_cuMemRelease_v10020 mem_release = nullptr;
  PFN_cuMemMap_v10020 mem_map = nullptr;
  PFN_cuMemUnmap_v10020 mem_unmap = nullptr;
  PFN_cuMemSetAccess_v10020 mem_set_access = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 mem_get_allocation_granularity = nullptr;

  /// Driver calls made through call() (and cuInit), for the checks that
  /// something made none (tensorpager's import makes no CUDA call).
  mutable std::atomic<std::uint64_t> calls{0};

  /// Calls entry point `Fn` with args, counting the call.
  /// Usage: api.call<&driver_api::mem_alloc>(&ptr, bytes).
  template <auto Fn, class... Args>
  CUresult call(Args... args) const noexcept {
    calls.fetch_add(1, std::memory_order_relaxed);
    return (this->*Fn)(args...);
  }

  /// Whether the virtual memory management entry points were all found.
  bool has_vmm() const noexcept;

  /// "cuMemCreate(...) failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)",
  /// for exception messages. Tolerates a driver without error names.
  std::string describe(CUresult result, const char* call) const;
  /// Writes the same text to stderr, prefixed "tensorpager: ". For noexcept
  /// paths, which must report and continue.
  void log(CUresult result, const char* call) const noexcept;
  /// Throws tp::cuda_error describe(result, call) unless result is
  /// CUDA_SUCCESS.
  void check(CUresult result, const char* call) const;
};

/// Makes `context` current on this thread for a scope and restores the
/// caller's context afterwards (the driver's device guard): the driver API
/// acts on the current context, and PyTorch keeps its current device there.
/// Skips both cuCtxSetCurrent calls when `context` is already current, which
/// is the common case (PyTorch's current device), so the guard costs one
/// cuCtxGetCurrent (a thread-local read in the driver). The plain constructor
/// throws tp::cuda_error on failure; the std::nothrow one, for noexcept
/// members, logs it (the calls that follow then fail and are logged in turn).
/// Not movable: it restores on the thread that made it.
class context_guard {
 public:
  context_guard(const driver_api& api, CUcontext context);
  context_guard(const driver_api& api, CUcontext context, std::nothrow_t) noexcept;
  ~context_guard();
  context_guard(const context_guard&) = delete;
  context_guard& operator=(const context_guard&) = delete;

 private:
  const driver_api& api_;
  CUcontext previous_ = nullptr;
  bool restore_ = false;
};

/// Allocation properties of pinned (non-migratable) memory on `device`, the
/// only kind tensorpager creates and maps.
CUmemAllocationProp pinned_device_memory(CUdevice device) noexcept;

}  // namespace tp::detail
