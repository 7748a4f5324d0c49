// The stand-in CUDA driver's virtual memory: reserve, create, map, set
// access, unmap, release, address free, in CUDA's order (fake_libcuda.cpp says
// what the library models). Reserved ranges are real address space (mmap,
// PROT_NONE until cuMemSetAccess), so device code may copy through them.

#include <sys/mman.h>

#include <cstdint>
#include <iterator>

#include "tests/device/fake_libcuda_state.hpp"

namespace tp_fake_cuda {
namespace {

bool in_reservation(const state_t& s, std::uintptr_t address, std::size_t bytes) {
  auto it = s.reservations.upper_bound(address);
  if (it == s.reservations.begin()) return false;
  --it;
  return address >= it->first && address + bytes <= it->first + it->second;
}

}  // namespace

bool accessible(const state_t& s, std::uintptr_t address, std::size_t bytes, int d) {
  auto m = s.mappings.upper_bound(address);
  if (m != s.mappings.begin()) --m;
  for (; m != s.mappings.end() && m->first < address + bytes; ++m) {
    if (m->first + m->second.second <= address) continue;
    const auto a = s.access.find(m->first);
    if (a == s.access.end() || a->second.count(d) == 0) return false;
  }
  return true;
}

CUresult CUDAAPI mem_get_allocation_granularity(std::size_t* g, const CUmemAllocationProp* prop,
                                                CUmemAllocationGranularity_flags /*flags*/) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  if (prop == nullptr || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE || prop->location.id < 0 ||
      prop->location.id >= s.devices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  *g = granule;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_address_reserve(CUdeviceptr* base, std::size_t bytes, std::size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  if (bytes == 0 || bytes % granule != 0 || addr != 0 || flags != 0 || (alignment != 0 && alignment != granule)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  // Over-reserve to align, as a driver would place it.
  void* p = mmap(nullptr, bytes + granule, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
  if (p == MAP_FAILED) return CUDA_ERROR_OUT_OF_MEMORY;
  const auto raw = reinterpret_cast<std::uintptr_t>(p);
  const std::uintptr_t aligned = (raw + granule - 1) / granule * granule;
  lock l(s.mutex);
  s.reservations[aligned] = bytes;
  *base = aligned;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_address_free(CUdeviceptr base, std::size_t bytes) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  const auto it = s.reservations.find(static_cast<std::uintptr_t>(base));
  if (it == s.reservations.end() || it->second != bytes) return CUDA_ERROR_INVALID_VALUE;
  const auto m = s.mappings.lower_bound(static_cast<std::uintptr_t>(base));
  if (m != s.mappings.end() && m->first < base + bytes) return CUDA_ERROR_INVALID_VALUE;  // still mapped
  s.reservations.erase(it);  // the address space itself is left reserved: no reuse, no surprises
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_create(CUmemGenericAllocationHandle* h, std::size_t bytes, const CUmemAllocationProp* prop,
                            unsigned long long flags) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  if (bytes == 0 || bytes % granule != 0 || flags != 0 || prop == nullptr ||
      prop->type != CU_MEM_ALLOCATION_TYPE_PINNED || prop->location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
      prop->location.id < 0 || prop->location.id >= s.devices) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  lock l(s.mutex);
  std::size_t& used = s.used[static_cast<std::size_t>(prop->location.id)];
  if (bytes > capacity - used) return CUDA_ERROR_OUT_OF_MEMORY;
  used += bytes;
  *h = s.next_handle++;
  s.handles[*h] = {prop->location.id, bytes};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_release(CUmemGenericAllocationHandle h) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  const auto it = s.handles.find(h);
  if (it == s.handles.end()) return CUDA_ERROR_INVALID_VALUE;
  for (const auto& [address, m] : s.mappings) {
    if (m.first == h) return CUDA_ERROR_INVALID_VALUE;  // tensorpager unmaps before it releases
  }
  s.used[static_cast<std::size_t>(it->second.first)] -= it->second.second;
  s.handles.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_map(CUdeviceptr ptr, std::size_t bytes, std::size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long flags) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  const auto address = static_cast<std::uintptr_t>(ptr);
  const auto it = s.handles.find(h);
  if (it == s.handles.end() || offset != 0 || flags != 0 || bytes != it->second.second ||
      !in_reservation(s, address, bytes)) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  const auto m = s.mappings.lower_bound(address);
  if (m != s.mappings.end() && m->first < address + bytes) return CUDA_ERROR_INVALID_VALUE;
  if (m != s.mappings.begin() && std::prev(m)->first + std::prev(m)->second.second > address) {
    return CUDA_ERROR_INVALID_VALUE;
  }
  s.mappings[address] = {h, bytes};
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_set_access(CUdeviceptr ptr, std::size_t bytes, const CUmemAccessDesc* desc, std::size_t count) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  if (desc == nullptr || count == 0) return CUDA_ERROR_INVALID_VALUE;
  for (std::size_t i = 0; i < count; ++i) {
    if (desc[i].flags != CU_MEM_ACCESS_FLAGS_PROT_READWRITE || desc[i].location.type != CU_MEM_LOCATION_TYPE_DEVICE ||
        desc[i].location.id < 0 || desc[i].location.id >= s.devices) {
      return CUDA_ERROR_INVALID_VALUE;
    }
  }
  lock l(s.mutex);
  // Every byte of the range must be mapped.
  for (std::uintptr_t a = static_cast<std::uintptr_t>(ptr); a < ptr + bytes;) {
    const auto m = s.mappings.find(a);
    if (m == s.mappings.end()) return CUDA_ERROR_INVALID_VALUE;
    a += m->second.second;
  }
  for (std::uintptr_t a = static_cast<std::uintptr_t>(ptr); a < ptr + bytes; a += s.mappings.at(a).second) {
    for (std::size_t i = 0; i < count; ++i) s.access[a].insert(desc[i].location.id);
  }
  if (mprotect(reinterpret_cast<void*>(ptr), bytes, PROT_READ | PROT_WRITE) != 0) return CUDA_ERROR_UNKNOWN;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_unmap(CUdeviceptr ptr, std::size_t bytes) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  const auto m = s.mappings.find(static_cast<std::uintptr_t>(ptr));
  // CUDA unmaps whole mappings only (Note [One handle per granule]).
  if (m == s.mappings.end() || m->second.second != bytes) return CUDA_ERROR_INVALID_VALUE;
  s.mappings.erase(m);
  s.access.erase(static_cast<std::uintptr_t>(ptr));
  madvise(reinterpret_cast<void*>(ptr), bytes, MADV_DONTNEED);
  mprotect(reinterpret_cast<void*>(ptr), bytes, PROT_NONE);
  return CUDA_SUCCESS;
}

}  // namespace tp_fake_cuda
