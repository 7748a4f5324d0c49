#pragma once
// The state of the stand-in CUDA driver (fake_libcuda.cpp, which says what it
// models), shared by its three files: fake_libcuda.cpp (devices, contexts,
// memory, copies, the entry-point table), fake_libcuda_streams.cpp (streams,
// events) and fake_libcuda_vmm.cpp (virtual memory). Private to the
// tp_fake_libcuda library.

#include <cuda.h>

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <vector>

namespace tp_fake_cuda {

inline constexpr std::size_t capacity = std::size_t{1} << 30;
inline constexpr std::size_t granule = std::size_t{2} << 20;

struct context_st {
  int device = 0;
  int refs = 0;  // primary-context retains
  std::set<context_st*> peers;
};

struct stream_st {
  context_st* ctx = nullptr;
};

struct event_st {
  context_st* ctx = nullptr;
  bool timing = false;  // created without CU_EVENT_DISABLE_TIMING
};

struct state_t {
  std::mutex mutex;
  bool initialized = false;
  int devices = 2;
  std::vector<std::unique_ptr<context_st>> primary;
  std::vector<std::size_t> used;                      // bytes per device
  std::map<std::uintptr_t, std::pair<int, std::size_t>> allocations;  // address -> device, bytes
  std::set<void*> host;
  std::set<stream_st*> streams;
  std::set<event_st*> events;
  std::map<std::uintptr_t, std::size_t> reservations;  // base -> bytes
  std::map<CUmemGenericAllocationHandle, std::pair<int, std::size_t>> handles;  // -> device, bytes
  std::map<std::uintptr_t, std::pair<CUmemGenericAllocationHandle, std::size_t>> mappings;
  std::map<std::uintptr_t, std::set<int>> access;  // mapping address -> devices given read-write access
  CUmemGenericAllocationHandle next_handle = 1;
  std::atomic<std::uint64_t> calls{0};
  // Calls that make the host wait for the device or ask it for its free
  // memory, counted apart (tp_fake_cuda_count).
  std::atomic<std::uint64_t> ctx_synchronizes{0};
  std::atomic<std::uint64_t> stream_synchronizes{0};
  std::atomic<std::uint64_t> mem_get_infos{0};
};

inline state_t& state() {
  static auto* s = new state_t;  // leaked: the library is never unloaded
  return *s;
}

inline thread_local context_st* current = nullptr;

using lock = std::lock_guard<std::mutex>;

/// Counts the call; returns CUDA_SUCCESS when the driver is initialised.
inline CUresult enter(state_t& s) {
  s.calls.fetch_add(1);
  return s.initialized ? CUDA_SUCCESS : CUDA_ERROR_NOT_INITIALIZED;
}

/// enter() plus a current context.
inline CUresult enter_ctx(state_t& s) {
  if (CUresult r = enter(s); r != CUDA_SUCCESS) return r;
  return current != nullptr ? CUDA_SUCCESS : CUDA_ERROR_INVALID_CONTEXT;
}

/// The context a stream handle runs in: 0 is the current context's default stream.
inline context_st* stream_ctx(state_t& s, CUstream h) {
  if (h == nullptr) return current;
  auto* st = reinterpret_cast<stream_st*>(h);
  return s.streams.count(st) ? st->ctx : nullptr;
}

// --- streams and events (fake_libcuda_streams.cpp) ---------------------------------

CUresult CUDAAPI stream_create(CUstream* h, unsigned int flags);
CUresult CUDAAPI stream_destroy(CUstream h);
CUresult CUDAAPI stream_synchronize(CUstream h);
CUresult CUDAAPI stream_wait_event(CUstream h, CUevent e, unsigned int flags);
CUresult CUDAAPI event_create(CUevent* e, unsigned int flags);
CUresult CUDAAPI event_destroy(CUevent e);
CUresult CUDAAPI event_record(CUevent e, CUstream h);
CUresult CUDAAPI event_query(CUevent e);
CUresult CUDAAPI event_synchronize(CUevent e);
CUresult CUDAAPI event_elapsed_time(float* ms, CUevent start, CUevent end);

// --- virtual memory (fake_libcuda_vmm.cpp) -----------------------------------------

/// Whether device d may touch [address, address + bytes): true outside
/// mapped memory (cuMemAlloc'd, host), and inside it only where
/// cuMemSetAccess gave d access. Requires: s.mutex held.
bool accessible(const state_t& s, std::uintptr_t address, std::size_t bytes, int d);

CUresult CUDAAPI mem_get_allocation_granularity(std::size_t* g, const CUmemAllocationProp* prop,
                                                CUmemAllocationGranularity_flags flags);
CUresult CUDAAPI mem_address_reserve(CUdeviceptr* base, std::size_t bytes, std::size_t alignment, CUdeviceptr addr,
                                     unsigned long long flags);
CUresult CUDAAPI mem_address_free(CUdeviceptr base, std::size_t bytes);
CUresult CUDAAPI mem_create(CUmemGenericAllocationHandle* h, std::size_t bytes, const CUmemAllocationProp* prop,
                            unsigned long long flags);
CUresult CUDAAPI mem_release(CUmemGenericAllocationHandle h);
CUresult CUDAAPI mem_map(CUdeviceptr ptr, std::size_t bytes, std::size_t offset, CUmemGenericAllocationHandle h,
                         unsigned long long flags);
CUresult CUDAAPI mem_set_access(CUdeviceptr ptr, std::size_t bytes, const CUmemAccessDesc* desc, std::size_t count);
CUresult CUDAAPI mem_unmap(CUdeviceptr ptr, std::size_t bytes);

}  // namespace tp_fake_cuda
