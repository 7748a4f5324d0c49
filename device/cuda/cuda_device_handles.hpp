#pragma once
// What cuda_device.cpp and cuda_device_vmm.cpp share: the device's driver
// handles and the conversions between tensorpager's opaque handles and the
// driver's. Private to device/cuda.

#include <cuda.h>

#include <cstdint>
#include <type_traits>

#include "device/cuda/cuda_device.hpp"
#include "device/cuda/driver_api.hpp"

namespace tp {

/// The driver's handles of one device.
struct cuda_device::handles {
  CUdevice device{};
  CUcontext context = nullptr;  ///< the primary context, retained while the device lives
};

namespace detail {

static_assert(std::is_same_v<CUmemGenericAllocationHandle, unsigned long long> &&
                  sizeof(CUmemGenericAllocationHandle) == sizeof(std::uint64_t),
              "granules_ stores CUmemGenericAllocationHandle as std::uint64_t");
static_assert(sizeof(CUdeviceptr) == sizeof(std::uintptr_t), "CUdeviceptr must hold a pointer");
static_assert(sizeof(CUstream) == sizeof(std::uintptr_t) && sizeof(CUevent) == sizeof(std::uintptr_t),
              "stream_id and event_id hold CUstream and CUevent values");

inline CUstream to_cu_stream(stream_id s) { return reinterpret_cast<CUstream>(to_underlying(s)); }
inline CUevent to_cu_event(event_id e) { return reinterpret_cast<CUevent>(to_underlying(e)); }
inline CUdeviceptr to_cu(std::uintptr_t address) { return static_cast<CUdeviceptr>(address); }
inline CUdeviceptr to_cu(const void* ptr) { return static_cast<CUdeviceptr>(reinterpret_cast<std::uintptr_t>(ptr)); }

/// cuMemUnmap of one granule's mapping, then cuMemRelease of its handle;
/// failures are logged with context (which operation was under way).
/// Requires: the owning device's context current.
void unmap_and_release(const driver_api& api, CUdeviceptr address, std::size_t bytes,
                       CUmemGenericAllocationHandle handle, const char* context) noexcept;

}  // namespace detail
}  // namespace tp
