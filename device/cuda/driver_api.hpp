#pragma once
// How device/cuda calls CUDA: error checks for the runtime API, a guard for
// the current device, and the driver API entry points, resolved at run time.
// Private to device/cuda: only cuda_device.cpp and driver_api.cpp include it.
//
// Note [No link against libcuda]
// tensorpager links only the static CUDA runtime (cudart_static), which opens
// libcuda.so itself when the first runtime call is made. The library therefore
// loads on a machine with no driver and reports "no CUDA device" from
// cuda_device::open instead of failing at load time. The driver API functions
// we need (the virtual-memory calls behind reserve/map) are looked up through
// cudaGetDriverEntryPointByVersion, with the versioned function-pointer types
// of <cudaTypedefs.h>. Each symbol is requested at the CUDA version its
// typedef names (10020 for the virtual-memory calls, 6000 and 2000 for the
// error strings and device queries), so the driver hands back exactly the ABI
// that typedef describes, whatever newer variants later drivers add. cuda.h is included for its types
// only: no function it declares is called directly.

#include <cuda.h>
#include <cudaTypedefs.h>
#include <cuda_runtime_api.h>

#include <cstddef>
#include <new>
#include <string>

namespace tp::detail {

/// Throws tp::cuda_error "call failed: cudaErrorX (description)". Clears the
/// runtime's last error first, so that a failure tensorpager has reported is
/// not reported again to the next caller that checks cudaGetLastError
/// (PyTorch does, after every kernel launch).
void cuda_check(cudaError_t err, const char* call);
/// The noexcept counterpart of cuda_check, for noexcept members: prints the
/// same text to stderr, clears the error and returns whether err was
/// cudaSuccess.
bool cuda_warn(cudaError_t err, const char* call) noexcept;

#define TP_CUDA_CHECK(call) ::tp::detail::cuda_check((call), #call)
#define TP_CUDA_WARN(call) ::tp::detail::cuda_warn((call), #call)

/// Makes a device current for a scope and restores the caller's device; see
/// Note [CUDA current device] in cuda_device.hpp. The plain constructor
/// throws tp::cuda_error on failure; the std::nothrow one, for noexcept
/// members, logs it and carries on (the calls that follow then fail and are
/// logged in turn). Not movable: it restores on the thread that made it.
class device_guard {
 public:
  explicit device_guard(int ordinal);
  device_guard(int ordinal, std::nothrow_t) noexcept;
  ~device_guard();
  device_guard(const device_guard&) = delete;
  device_guard& operator=(const device_guard&) = delete;

 private:
  int previous_ = 0;
  bool restore_ = false;
};

/// Allocation properties of pinned (non-migratable) memory on device
/// ordinal, the only kind tensorpager creates and maps.
CUmemAllocationProp pinned_device_memory(int ordinal) noexcept;

/// Driver API function pointers, resolved once per cuda_device; every member is non-null
/// after load() returns. Immutable after construction, so safe to read from
/// any thread.
struct driver_api {
  PFN_cuGetErrorName_v6000 get_error_name = nullptr;
  PFN_cuGetErrorString_v6000 get_error_string = nullptr;
  PFN_cuDeviceGet_v2000 device_get = nullptr;
  PFN_cuDeviceGetAttribute_v2000 device_get_attribute = nullptr;
  PFN_cuMemAddressReserve_v10020 mem_address_reserve = nullptr;
  PFN_cuMemAddressFree_v10020 mem_address_free = nullptr;
  PFN_cuMemCreate_v10020 mem_create = nullptr;
  PFN_cuMemRelease_v10020 mem_release = nullptr;
  PFN_cuMemMap_v10020 mem_map = nullptr;
  PFN_cuMemUnmap_v10020 mem_unmap = nullptr;
  PFN_cuMemSetAccess_v10020 mem_set_access = nullptr;
  PFN_cuMemGetAllocationGranularity_v10020 mem_get_allocation_granularity = nullptr;

  /// Resolves every entry point through cudaGetDriverEntryPointByVersion.
  /// Throws tp::cuda_error naming the first symbol the driver does not
  /// provide. Requires: the CUDA runtime initialised a driver (a successful
  /// cudaGetDeviceCount).
  static driver_api load();

  /// The recommended granularity of pinned memory on device ordinal, or 0
  /// when the device does not support virtual memory management. Throws
  /// tp::cuda_error when the driver cannot answer.
  std::size_t vmm_granularity(int ordinal) const;
  /// cuMemUnmap of one mapping, then cuMemRelease of its handle; failures
  /// are logged with context (which operation was under way).
  void unmap_and_release(CUdeviceptr address, std::size_t bytes,
                         CUmemGenericAllocationHandle handle, const char* context) const noexcept;

  /// "cuMemCreate(...) failed: CUDA_ERROR_OUT_OF_MEMORY (out of memory)",
  /// for exception messages. Tolerates null members (prints the number).
  std::string describe(CUresult result, const char* call) const;
  /// Writes the same text to stderr, prefixed "tensorpager: ". For noexcept
  /// paths, which must report and continue.
  void log(CUresult result, const char* call) const noexcept;
};

}  // namespace tp::detail
