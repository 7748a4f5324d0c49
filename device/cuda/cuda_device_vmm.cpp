// tp::cuda_device, virtual memory: reserve address space, map and unmap
// physical granules (the driver's virtual memory management API).
//
// Note [One handle per granule]
// cuMemUnmap must be given exactly a range that one cuMemMap mapped; it cannot
// unmap part of a mapping. The device interface lets unmap take any
// granule-aligned sub-range of earlier maps (that is how a segment gives back
// its free middle), so try_map creates and maps one physical allocation per
// granule and granules_ remembers each handle by address. cuMemSetAccess, by
// contrast, may span several mappings, so it is called once per try_map.
// This is the layout PyTorch's expandable segments use.
//
// Note [Peers of mapped memory]
// Memory from cuMemAlloc is reachable from every device that has peer access
// to its owner (cuCtxEnablePeerAccess). Mapped memory is not: each device
// that may touch it needs read-write access set on the mapping itself
// (cuMemSetAccess), or a kernel or copy on that device faults. So when a
// device is given peer access to this one (enable_peer_access), this one
// grants it access to every granule mapped now, and try_map grants it to
// every granule mapped later, as PyTorch's expandable segments do
// (addPeerAccess). Without peer access a copy between devices goes through
// cuMemcpyPeerAsync (copy_to_peer_async), which needs none.

#include <algorithm>
#include <cstdio>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "core/format_bytes.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/cuda/cuda_device_handles.hpp"
#include "device/cuda/driver_api.hpp"

namespace tp {

using detail::context_guard;
using detail::driver_api;
using detail::to_cu;

namespace detail {

void unmap_and_release(const driver_api& api, CUdeviceptr address, std::size_t bytes,
                       CUmemGenericAllocationHandle handle, const char* context) noexcept {
  if (const CUresult r = api.call<&driver_api::mem_unmap>(address, bytes); r != CUDA_SUCCESS) {
    api.log(r, "cuMemUnmap");
    std::fprintf(stderr, "tensorpager:   while %s, at %#llx\n", context, address);
  }
  if (const CUresult r = api.call<&driver_api::mem_release>(handle); r != CUDA_SUCCESS) {
    api.log(r, "cuMemRelease");
    std::fprintf(stderr, "tensorpager:   while %s, at %#llx\n", context, address);
  }
}

}  // namespace detail

std::size_t cuda_device::granularity() const {
  if (granularity_ == 0) throw cuda_error(vmm_unavailable_);
  return granularity_;
}

void cuda_device::check_vmm_range(const void* ptr, std::size_t bytes, const char* caller) const {
  const std::size_t g = granularity();
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (bytes == 0 || bytes % g != 0 || address % g != 0) {
    throw invalid_argument(fmt::format(
        "cuda_device::{}: address {} and size {} bytes must be non-zero multiples of the granularity, {} bytes ({})",
        caller, ptr, bytes, g, format_bytes(g)));
  }
}

void* cuda_device::reserve(std::size_t bytes) {
  const std::size_t g = granularity();
  if (bytes == 0 || bytes % g != 0) {
    throw invalid_argument(fmt::format(
        "cuda_device::reserve: {} bytes is not a positive multiple of the granularity, {} bytes", bytes, g));
  }
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  CUdeviceptr base = 0;
  const CUresult r = api.call<&driver_api::mem_address_reserve>(&base, bytes, g, CUdeviceptr{0}, 0ull);
  if (r != CUDA_SUCCESS) {
    throw cuda_error(api.describe(r, fmt::format("cuMemAddressReserve({})", format_bytes(bytes)).c_str()));
  }
  return reinterpret_cast<void*>(base);
}

void cuda_device::release(void* base, std::size_t bytes) noexcept {
  if (base == nullptr || granularity_ == 0) return;
  const driver_api& api = driver_->api();
  const auto begin = reinterpret_cast<std::uintptr_t>(base);
  const context_guard guard(api, handles_->context, std::nothrow);
  {
    const std::lock_guard lock(map_mutex_);
    const auto first = granules_.lower_bound(begin);
    if (first != granules_.end() && first->first < begin + bytes) {
      std::fprintf(stderr,
                   "tensorpager: cuda_device::release(%p, %zu) with granules still mapped; unmapping them first\n",
                   base, bytes);
      if (const CUresult r = api.call<&driver_api::ctx_synchronize>(); r != CUDA_SUCCESS) {
        api.log(r, "cuCtxSynchronize");
      }
      unmap_granules_locked(begin, begin + bytes);
    }
  }
  if (const CUresult r = api.call<&driver_api::mem_address_free>(to_cu(begin), bytes); r != CUDA_SUCCESS) {
    api.log(r, "cuMemAddressFree");
  }
}

bool cuda_device::try_map(void* ptr, std::size_t bytes) {
  check_vmm_range(ptr, bytes, "try_map");
  const std::size_t g = granularity_;
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  const std::uintptr_t end = begin + bytes;
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  const std::lock_guard lock(map_mutex_);

  if (const auto it = granules_.lower_bound(begin); it != granules_.end() && it->first < end) {
    throw invalid_argument(fmt::format("cuda_device::try_map({}, {} bytes): the granule at {:#x} is already mapped",
                                       ptr, bytes, it->first));
  }

  // What this call has mapped so far, rolled back on any failure.
  std::vector<std::pair<std::uintptr_t, CUmemGenericAllocationHandle>> mapped;
  mapped.reserve(bytes / g);
  const auto roll_back = [&]() noexcept {
    for (const auto& [address, handle] : mapped) {
      granules_.erase(address);
      detail::unmap_and_release(api, to_cu(address), g, handle, "rolling back try_map");
    }
  };

  const CUmemAllocationProp prop = detail::pinned_device_memory(handles_->device);
  // This device and its peers: Note [Peers of mapped memory].
  std::vector<CUmemAccessDesc> access(1 + accessors_.size());
  for (std::size_t i = 0; i < access.size(); ++i) {
    access[i].location.type = CU_MEM_LOCATION_TYPE_DEVICE;
    access[i].location.id = i == 0 ? handles_->device : accessors_[i - 1];
    access[i].flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  }
  CUresult failure = CUDA_SUCCESS;
  const char* failed_call = nullptr;
  try {
    for (std::uintptr_t address = begin; address < end; address += g) {
      CUmemGenericAllocationHandle handle{};
      if (const CUresult r = api.call<&driver_api::mem_create>(&handle, g, &prop, 0ull); r != CUDA_SUCCESS) {
        failure = r;
        failed_call = "cuMemCreate";
        break;
      }
      if (const CUresult r = api.call<&driver_api::mem_map>(to_cu(address), g, std::size_t{0}, handle, 0ull);
          r != CUDA_SUCCESS) {
        (void)api.call<&driver_api::mem_release>(handle);
        failure = r;
        failed_call = "cuMemMap";
        break;
      }
      mapped.emplace_back(address, handle);
      granules_.emplace(address, handle);  // may throw: caught below
    }
    if (failure == CUDA_SUCCESS) {
      if (const CUresult r = api.call<&driver_api::mem_set_access>(to_cu(begin), bytes, access.data(), access.size());
          r != CUDA_SUCCESS) {
        failure = r;
        failed_call = "cuMemSetAccess";
      }
    }
  } catch (...) {
    roll_back();
    throw;
  }
  if (failure == CUDA_SUCCESS) return true;

  roll_back();
  if (failure == CUDA_ERROR_OUT_OF_MEMORY) return false;
  throw cuda_error(
      api.describe(failure, fmt::format("{} (try_map of {} at {})", failed_call, format_bytes(bytes), ptr).c_str()));
}

void cuda_device::unmap(void* ptr, std::size_t bytes) noexcept {
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  if (granularity_ == 0 || begin % granularity_ != 0 || bytes % granularity_ != 0) {
    std::fprintf(stderr,
                 "tensorpager: cuda_device::unmap(%p, %zu): not a granule-aligned range of a "
                 "virtual-memory-capable device; nothing unmapped\n",
                 ptr, bytes);
    return;
  }
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context, std::nothrow);
  // No wait here: the range is idle (device::unmap; Note [Free waits for the
  // device] in cuda_device.cpp).
  const std::lock_guard lock(map_mutex_);
  unmap_granules_locked(begin, begin + bytes);
}

void cuda_device::grant_access(int peer) {
  if (granularity_ == 0 || peer == ordinal_) return;
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  const std::lock_guard lock(map_mutex_);
  if (std::find(accessors_.begin(), accessors_.end(), peer) != accessors_.end()) return;
  CUmemAccessDesc access{};
  access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  access.location.id = peer;
  access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
  // One call per run of adjacent granules: cuMemSetAccess may span mappings.
  for (auto it = granules_.begin(); it != granules_.end();) {
    const std::uintptr_t begin = it->first;
    std::uintptr_t end = begin + granularity_;
    for (++it; it != granules_.end() && it->first == end; ++it) end += granularity_;
    if (const CUresult r = api.call<&driver_api::mem_set_access>(to_cu(begin), end - begin, &access, std::size_t{1});
        r != CUDA_SUCCESS) {
      throw cuda_error(api.describe(
          r, fmt::format("cuMemSetAccess (read-write for cuda:{} on {} of cuda:{} at {:#x})", peer,
                         format_bytes(end - begin), ordinal_, begin).c_str()));
    }
  }
  accessors_.push_back(peer);
}

void cuda_device::unmap_granules_locked(std::uintptr_t begin, std::uintptr_t end) noexcept {
  const driver_api& api = driver_->api();
  std::size_t found = 0;
  auto it = granules_.lower_bound(begin);
  while (it != granules_.end() && it->first < end) {
    detail::unmap_and_release(api, to_cu(it->first), granularity_, it->second, "unmapping");
    it = granules_.erase(it);
    ++found;
  }
  if (const std::size_t expected = (end - begin) / granularity_; found != expected) {
    std::fprintf(stderr, "tensorpager: cuda_device::unmap: %zu of the %zu granule(s) at %#zx were not mapped\n",
                 expected - found, expected, static_cast<std::size_t>(begin));
  }
}

}  // namespace tp
