// A stand-in for the CUDA driver library, for running tp::cuda_driver and
// tp::cuda_device on a machine without a GPU (cuda_device_fake_driver_test).
// Built as its own shared library, loaded by path with cuda_driver::load().
//
// It exports what a driver exports for tensorpager's loader
// (cuGetProcAddress_v2, Note [Driver API only] in device/cuda/driver_api.hpp)
// and hands out the entry points by name. Devices are host memory; every call
// completes before it returns (a copy is a memcpy, an event is complete when
// recorded), so it models CUDA's bookkeeping, not its asynchrony. What it
// checks is what tensorpager's code must get right and CUDA enforces:
//   - cuInit before anything else;
//   - a current context for every call that acts on one, and the right one:
//     memory is allocated for, freed by, and copied within its own device's
//     context, a stream is used in its own context, an event is recorded
//     only on a stream of its own context (cuStreamWaitEvent may wait on an
//     event of another context);
//   - primary-context reference counts (retain / release balance);
//   - virtual memory: reserve, create, map, set access, unmap, release,
//     address free, in CUDA's order; a copy touching mapped memory faults
//     (CUDA_ERROR_ILLEGAL_ADDRESS) unless cuMemSetAccess gave the copying
//     device access (cuMemcpyPeerAsync: each side's own device).
// A broken rule returns the error CUDA would (CUDA_ERROR_INVALID_CONTEXT,
// CUDA_ERROR_INVALID_HANDLE, ...). The environment variable
// TP_FAKE_CUDA_DEVICES (default 2) sets the device count; 0 makes cuInit fail
// with CUDA_ERROR_NO_DEVICE. tp_fake_cuda_* functions let tests look inside.
// Virtual memory is in fake_libcuda_vmm.cpp, streams and events in
// fake_libcuda_streams.cpp; the shared state in fake_libcuda_state.hpp.

#include <cuda.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "tests/device/fake_libcuda_state.hpp"

namespace tp_fake_cuda {
namespace {

CUresult CUDAAPI get_error_name(CUresult r, const char** out) {
  static const std::map<int, const char*> names = {
      {CUDA_SUCCESS, "CUDA_SUCCESS"}, {CUDA_ERROR_INVALID_VALUE, "CUDA_ERROR_INVALID_VALUE"},
      {CUDA_ERROR_OUT_OF_MEMORY, "CUDA_ERROR_OUT_OF_MEMORY"}, {CUDA_ERROR_NOT_INITIALIZED, "CUDA_ERROR_NOT_INITIALIZED"},
      {CUDA_ERROR_NO_DEVICE, "CUDA_ERROR_NO_DEVICE"}, {CUDA_ERROR_INVALID_DEVICE, "CUDA_ERROR_INVALID_DEVICE"},
      {CUDA_ERROR_INVALID_CONTEXT, "CUDA_ERROR_INVALID_CONTEXT"}, {CUDA_ERROR_INVALID_HANDLE, "CUDA_ERROR_INVALID_HANDLE"},
      {CUDA_ERROR_NOT_READY, "CUDA_ERROR_NOT_READY"}, {CUDA_ERROR_ILLEGAL_ADDRESS, "CUDA_ERROR_ILLEGAL_ADDRESS"},
      {CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED, "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED"}};
  const auto it = names.find(r);
  if (it == names.end()) return CUDA_ERROR_INVALID_VALUE;
  *out = it->second;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI get_error_string(CUresult r, const char** out) {
  const char* name = nullptr;
  if (get_error_name(r, &name) != CUDA_SUCCESS) return CUDA_ERROR_INVALID_VALUE;
  *out = "(fake driver)";
  return CUDA_SUCCESS;
}

CUresult CUDAAPI init(unsigned int flags) {
  state_t& s = state();
  s.calls.fetch_add(1);
  if (flags != 0) return CUDA_ERROR_INVALID_VALUE;
  lock l(s.mutex);
  if (const char* n = std::getenv("TP_FAKE_CUDA_DEVICES")) s.devices = std::atoi(n);
  if (s.devices <= 0) return CUDA_ERROR_NO_DEVICE;
  if (!s.initialized) {
    for (int d = 0; d < s.devices; ++d) {
      s.primary.push_back(std::make_unique<context_st>());
      s.primary.back()->device = d;
      s.used.push_back(0);
    }
  }
  s.initialized = true;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI driver_get_version(int* v) {
  state().calls.fetch_add(1);
  *v = 13000;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI device_get_count(int* n) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  *n = s.devices;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI device_get(CUdevice* d, int ordinal) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  if (ordinal < 0 || ordinal >= s.devices) return CUDA_ERROR_INVALID_DEVICE;
  *d = ordinal;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI device_get_name(char* name, int len, CUdevice d) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  if (d < 0 || d >= s.devices) return CUDA_ERROR_INVALID_DEVICE;
  std::snprintf(name, static_cast<std::size_t>(len), "Fake CUDA device %d", d);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI device_get_attribute(int* value, CUdevice_attribute a, CUdevice d) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  if (d < 0 || d >= s.devices) return CUDA_ERROR_INVALID_DEVICE;
  *value = a == CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED ? 1 : 0;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI device_total_mem(std::size_t* bytes, CUdevice d) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  if (d < 0 || d >= s.devices) return CUDA_ERROR_INVALID_DEVICE;
  *bytes = capacity;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI primary_ctx_retain(CUcontext* ctx, CUdevice d) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  if (d < 0 || d >= s.devices) return CUDA_ERROR_INVALID_DEVICE;
  ++s.primary[static_cast<std::size_t>(d)]->refs;
  *ctx = reinterpret_cast<CUcontext>(s.primary[static_cast<std::size_t>(d)].get());
  return CUDA_SUCCESS;
}

CUresult CUDAAPI primary_ctx_release(CUdevice d) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  if (d < 0 || d >= s.devices) return CUDA_ERROR_INVALID_DEVICE;
  if (s.primary[static_cast<std::size_t>(d)]->refs == 0) return CUDA_ERROR_INVALID_CONTEXT;
  --s.primary[static_cast<std::size_t>(d)]->refs;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI ctx_get_current(CUcontext* ctx) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  *ctx = reinterpret_cast<CUcontext>(current);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI ctx_set_current(CUcontext ctx) {
  state_t& s = state();
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  auto* c = reinterpret_cast<context_st*>(ctx);
  if (c != nullptr) {
    bool known = false;
    for (const auto& p : s.primary) known = known || p.get() == c;
    if (!known) return CUDA_ERROR_INVALID_CONTEXT;
  }
  current = c;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI ctx_synchronize() {
  state_t& s = state();
  s.ctx_synchronizes.fetch_add(1);
  return enter_ctx(s);
}

CUresult CUDAAPI ctx_enable_peer_access(CUcontext peer, unsigned int flags) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  auto* p = reinterpret_cast<context_st*>(peer);
  if (p == nullptr || p == current || flags != 0) return CUDA_ERROR_INVALID_VALUE;
  if (!current->peers.insert(p).second) return CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED;
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_get_info(std::size_t* free, std::size_t* total) {
  state_t& s = state();
  s.mem_get_infos.fetch_add(1);
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  *total = capacity;
  *free = capacity - s.used[static_cast<std::size_t>(current->device)];
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_alloc(CUdeviceptr* ptr, std::size_t bytes) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  if (bytes == 0) return CUDA_ERROR_INVALID_VALUE;
  lock l(s.mutex);
  std::size_t& used = s.used[static_cast<std::size_t>(current->device)];
  if (bytes > capacity - used) return CUDA_ERROR_OUT_OF_MEMORY;
  void* p = std::aligned_alloc(512, (bytes + 511) / 512 * 512);
  if (p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  used += bytes;
  s.allocations[reinterpret_cast<std::uintptr_t>(p)] = {current->device, bytes};
  *ptr = reinterpret_cast<CUdeviceptr>(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_free(CUdeviceptr ptr) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  const auto it = s.allocations.find(static_cast<std::uintptr_t>(ptr));
  if (it == s.allocations.end()) return CUDA_ERROR_INVALID_VALUE;
  if (it->second.first != current->device) return CUDA_ERROR_INVALID_CONTEXT;  // stricter than CUDA
  s.used[static_cast<std::size_t>(it->second.first)] -= it->second.second;
  std::free(reinterpret_cast<void*>(ptr));
  s.allocations.erase(it);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_host_alloc(void** p, std::size_t bytes, unsigned int flags) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  if (bytes == 0 || (flags & ~0x7u) != 0) return CUDA_ERROR_INVALID_VALUE;
  lock l(s.mutex);
  *p = std::aligned_alloc(4096, (bytes + 4095) / 4096 * 4096);
  if (*p == nullptr) return CUDA_ERROR_OUT_OF_MEMORY;
  s.host.insert(*p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI mem_free_host(void* p) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  if (s.host.erase(p) == 0) return CUDA_ERROR_INVALID_VALUE;
  std::free(p);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI memcpy_async(CUdeviceptr dst, CUdeviceptr src, std::size_t bytes, CUstream h) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  if (stream_ctx(s, h) != current) return CUDA_ERROR_INVALID_HANDLE;  // a stream of the current context
  // The copy runs on the current device: mapped memory it was given no
  // access to faults (Note [Peers of mapped memory] in cuda_device_vmm.cpp).
  if (!accessible(s, dst, bytes, current->device) || !accessible(s, src, bytes, current->device)) {
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  std::memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

CUresult CUDAAPI memcpy_peer_async(CUdeviceptr dst, CUcontext dst_ctx, CUdeviceptr src, CUcontext src_ctx,
                                   std::size_t bytes, CUstream h) {
  state_t& s = state();
  if (CUresult r = enter_ctx(s); r != CUDA_SUCCESS) return r;
  lock l(s.mutex);
  if (stream_ctx(s, h) != current) return CUDA_ERROR_INVALID_HANDLE;
  const auto* d = reinterpret_cast<const context_st*>(dst_ctx);
  const auto* c = reinterpret_cast<const context_st*>(src_ctx);
  if (d == nullptr || c == nullptr) return CUDA_ERROR_INVALID_CONTEXT;
  // Each side is reached by its own device, peer access or not.
  if (!accessible(s, dst, bytes, d->device) || !accessible(s, src, bytes, c->device)) {
    return CUDA_ERROR_ILLEGAL_ADDRESS;
  }
  std::memcpy(reinterpret_cast<void*>(dst), reinterpret_cast<const void*>(src), bytes);
  return CUDA_SUCCESS;
}

struct entry {
  const char* name;
  int version;  // the lowest version at which it has this ABI
  void* fn;
};

#define TP_FAKE(name, version, fn) entry{name, version, reinterpret_cast<void*>(&fn)}

const std::vector<entry>& table() {
  static const std::vector<entry> t = {
      TP_FAKE("cuGetErrorName", 6000, get_error_name),
      TP_FAKE("cuGetErrorString", 6000, get_error_string),
      TP_FAKE("cuInit", 2000, init),
      TP_FAKE("cuDriverGetVersion", 2020, driver_get_version),
      TP_FAKE("cuDeviceGetCount", 2000, device_get_count),
      TP_FAKE("cuDeviceGet", 2000, device_get),
      TP_FAKE("cuDeviceGetName", 2000, device_get_name),
      TP_FAKE("cuDeviceGetAttribute", 2000, device_get_attribute),
      TP_FAKE("cuDeviceTotalMem", 3020, device_total_mem),
      TP_FAKE("cuDevicePrimaryCtxRetain", 7000, primary_ctx_retain),
      TP_FAKE("cuDevicePrimaryCtxRelease", 11000, primary_ctx_release),
      TP_FAKE("cuCtxGetCurrent", 4000, ctx_get_current),
      TP_FAKE("cuCtxSetCurrent", 4000, ctx_set_current),
      TP_FAKE("cuCtxSynchronize", 2000, ctx_synchronize),
      TP_FAKE("cuCtxEnablePeerAccess", 4000, ctx_enable_peer_access),
      TP_FAKE("cuMemGetInfo", 3020, mem_get_info),
      TP_FAKE("cuMemAlloc", 3020, mem_alloc),
      TP_FAKE("cuMemFree", 3020, mem_free),
      TP_FAKE("cuMemHostAlloc", 2020, mem_host_alloc),
      TP_FAKE("cuMemFreeHost", 2000, mem_free_host),
      TP_FAKE("cuMemcpyAsync", 4000, memcpy_async),
      TP_FAKE("cuMemcpyPeerAsync", 4000, memcpy_peer_async),
      TP_FAKE("cuStreamCreate", 2000, stream_create),
      TP_FAKE("cuStreamDestroy", 4000, stream_destroy),
      TP_FAKE("cuStreamSynchronize", 2000, stream_synchronize),
      TP_FAKE("cuStreamWaitEvent", 3020, stream_wait_event),
      TP_FAKE("cuEventCreate", 2000, event_create),
      TP_FAKE("cuEventDestroy", 4000, event_destroy),
      TP_FAKE("cuEventRecord", 2000, event_record),
      TP_FAKE("cuEventQuery", 2000, event_query),
      TP_FAKE("cuEventSynchronize", 2000, event_synchronize),
      TP_FAKE("cuEventElapsedTime", 2000, event_elapsed_time),
      TP_FAKE("cuMemGetAllocationGranularity", 10020, mem_get_allocation_granularity),
      TP_FAKE("cuMemAddressReserve", 10020, mem_address_reserve),
      TP_FAKE("cuMemAddressFree", 10020, mem_address_free),
      TP_FAKE("cuMemCreate", 10020, mem_create),
      TP_FAKE("cuMemRelease", 10020, mem_release),
      TP_FAKE("cuMemMap", 10020, mem_map),
      TP_FAKE("cuMemUnmap", 10020, mem_unmap),
      TP_FAKE("cuMemSetAccess", 10020, mem_set_access),
  };
  return t;
}

}  // namespace
}  // namespace tp_fake_cuda

using namespace tp_fake_cuda;  // the exports below look inside

extern "C" {

// The CUDA 12 entry point (PFN_cuGetProcAddress_v12000). A symbol asked at a
// version below the one its ABI appeared in is "version not sufficient", as a
// driver would say; the loader must ask at the versions its typedefs name.
__attribute__((visibility("default"))) CUresult cuGetProcAddress_v2(const char* symbol, void** pfn, int version,
                                                                   cuuint64_t flags,
                                                                   CUdriverProcAddressQueryResult* status) {
  *pfn = nullptr;
  if (flags != CU_GET_PROC_ADDRESS_LEGACY_STREAM && flags != CU_GET_PROC_ADDRESS_DEFAULT) return CUDA_ERROR_INVALID_VALUE;
  for (const entry& e : table()) {
    if (std::strcmp(e.name, symbol) != 0) continue;
    if (version < e.version) {
      if (status != nullptr) *status = CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT;
      return CUDA_SUCCESS;
    }
    *pfn = e.fn;
    if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SUCCESS;
    return CUDA_SUCCESS;
  }
  if (status != nullptr) *status = CU_GET_PROC_ADDRESS_SYMBOL_NOT_FOUND;
  return CUDA_SUCCESS;
}

/// Calls made through the entry points so far.
__attribute__((visibility("default"))) std::uint64_t tp_fake_cuda_calls() { return state().calls.load(); }

/// Calls so far of one of the entry points counted apart: cuCtxSynchronize,
/// cuStreamSynchronize or cuMemGetInfo (any other name: 0).
__attribute__((visibility("default"))) std::uint64_t tp_fake_cuda_count(const char* entry_point) {
  state_t& s = state();
  const std::string name = entry_point;
  if (name == "cuCtxSynchronize") return s.ctx_synchronizes.load();
  if (name == "cuStreamSynchronize") return s.stream_synchronizes.load();
  if (name == "cuMemGetInfo") return s.mem_get_infos.load();
  return 0;
}

/// The device of this thread's current context, or -1.
__attribute__((visibility("default"))) int tp_fake_cuda_current_device() {
  return current != nullptr ? current->device : -1;
}

/// Makes device d's primary context current on this thread (-1: none), as
/// PyTorch's runtime does when it switches devices.
__attribute__((visibility("default"))) void tp_fake_cuda_make_current(int d) {
  current = d < 0 ? nullptr : state().primary.at(static_cast<std::size_t>(d)).get();
}

/// Live device allocations, mappings, streams and events, and primary
/// context references, summed: 0 when everything was given back.
__attribute__((visibility("default"))) std::size_t tp_fake_cuda_live_objects() {
  state_t& s = state();
  lock l(s.mutex);
  std::size_t refs = 0;
  for (const auto& p : s.primary) refs += static_cast<std::size_t>(p->refs);
  return s.allocations.size() + s.host.size() + s.streams.size() + s.events.size() + s.handles.size() +
         s.mappings.size() + s.reservations.size() + refs;
}

}  // extern "C"
