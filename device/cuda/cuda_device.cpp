// tp::cuda_device over the driver API: opening, plain and page-locked memory,
// streams, events, copies. Virtual memory (reserve, map, unmap) is in
// cuda_device_vmm.cpp; the driver's table and the context guard in
// driver_api.hpp.
//
// Note [Free waits for the device]
// cudaFree waits for the device before it frees, and callers of deallocate
// (the caching allocator's empty_cache) rely on that: a segment whose blocks
// were freed on a stream may still be read by kernels queued there. The
// driver API promises no such wait for cuMemFree, cuMemUnmap or cuMemRelease,
// and freeing memory a queued kernel is about to touch is a fault, not a late
// free. So deallocate synchronizes the device's context first, giving it
// the contract of cudaFree. unmap does not: its caller waits for the streams
// that used the range, which drains less than the whole device (Note [Giving
// memory back waits] in allocator/caching_allocator.hpp). Both are slow
// paths (trimming, empty_cache, budget changes).

#include "device/cuda/cuda_device.hpp"

#include <cmath>
#include <cstdio>
#include <new>
#include <type_traits>
#include <utility>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "device/cuda/cuda_device_handles.hpp"
#include "device/cuda/driver_api.hpp"

namespace tp {

using detail::context_guard;
using detail::driver_api;
using detail::to_cu;
using detail::to_cu_event;
using detail::to_cu_stream;

// --- opening -----------------------------------------------------------------

int cuda_device::device_count() noexcept {
  try {
    return cuda_driver::load()->device_count();
  } catch (const std::exception&) {
    return 0;
  }
}

std::unique_ptr<cuda_device> cuda_device::open(int ordinal) { return open(cuda_driver::load(), ordinal); }

std::unique_ptr<cuda_device> cuda_device::open(std::shared_ptr<const cuda_driver> driver, int ordinal) {
  if (driver == nullptr) throw invalid_argument("cuda_device::open: no driver");
  const driver_api& api = driver->api();
  const int count = driver->device_count();
  if (count == 0) throw cuda_error("no CUDA device: cuDeviceGetCount found 0 devices");
  if (ordinal < 0 || ordinal >= count) {
    throw invalid_argument(fmt::format(
        "cuda_device::open: ordinal {} is out of range; this process sees {} CUDA device(s), ordinals 0 to {}",
        ordinal, count, count - 1));
  }
  auto h = std::make_unique<handles>();
  api.check(api.call<&driver_api::device_get>(&h->device, ordinal), "cuDeviceGet");
  char name[256] = {};
  api.check(api.call<&driver_api::device_get_name>(name, static_cast<int>(sizeof(name) - 1), h->device),
            "cuDeviceGetName");
  // The context PyTorch's runtime uses on this device (created here if it is
  // not yet, as the runtime would on its first call).
  api.check(api.call<&driver_api::primary_ctx_retain>(&h->context, h->device), "cuDevicePrimaryCtxRetain");
  try {
    std::size_t granularity = 0;
    std::string vmm_unavailable;
    if (!api.has_vmm()) {
      vmm_unavailable = fmt::format("the CUDA driver ({}, version {}) lacks the virtual memory management API",
                                    driver->library(), driver->version());
    } else {
      int supported = 0;
      api.check(api.call<&driver_api::device_get_attribute>(
                    &supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED, h->device),
                "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)");
      if (supported == 0) {
        vmm_unavailable = fmt::format(
            "CUDA device {} ({}) does not support virtual memory management "
            "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)",
            ordinal, name);
      } else {
        const CUmemAllocationProp prop = detail::pinned_device_memory(h->device);
        api.check(api.call<&driver_api::mem_get_allocation_granularity>(&granularity, &prop,
                                                                        CU_MEM_ALLOC_GRANULARITY_RECOMMENDED),
                  "cuMemGetAllocationGranularity(RECOMMENDED)");
        if (granularity == 0) throw cuda_error("cuMemGetAllocationGranularity(RECOMMENDED) returned 0");
      }
    }
    return std::unique_ptr<cuda_device>(new cuda_device(std::move(driver), ordinal, std::move(h), name,
                                                        granularity, std::move(vmm_unavailable)));
  } catch (...) {
    (void)api.call<&driver_api::primary_ctx_release>(h->device);
    throw;
  }
}

cuda_device::cuda_device(std::shared_ptr<const cuda_driver> driver, int ordinal, std::unique_ptr<handles> h,
                         std::string name, std::size_t granularity, std::string vmm_unavailable)
    : driver_(std::move(driver)),
      ordinal_(ordinal),
      handles_(std::move(h)),
      name_(std::move(name)),
      granularity_(granularity),
      vmm_unavailable_(std::move(vmm_unavailable)) {}

cuda_device::~cuda_device() {
  const driver_api& api = driver_->api();
  {
    const std::lock_guard lock(map_mutex_);
    if (!granules_.empty()) {
      std::fprintf(stderr,
                   "tensorpager: cuda_device %d destroyed with %zu granule(s) still mapped; releasing them\n",
                   ordinal_, granules_.size());
      const context_guard guard(api, handles_->context, std::nothrow);
      if (const CUresult r = api.call<&driver_api::ctx_synchronize>(); r != CUDA_SUCCESS) {
        api.log(r, "cuCtxSynchronize");
      }
      for (const auto& [address, handle] : granules_) {
        detail::unmap_and_release(api, to_cu(address), granularity_, handle, "destroying cuda_device");
      }
      granules_.clear();
    }
  }
  if (const CUresult r = api.call<&driver_api::primary_ctx_release>(handles_->device); r != CUDA_SUCCESS) {
    api.log(r, "cuDevicePrimaryCtxRelease");
  }
}

std::string cuda_device::name() const { return name_; }

// --- plain device memory -----------------------------------------------------

void* cuda_device::try_allocate(std::size_t bytes) {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  CUdeviceptr ptr = 0;
  const CUresult r = api.call<&driver_api::mem_alloc>(&ptr, bytes);
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
  api.check(r, "cuMemAlloc");
  return reinterpret_cast<void*>(ptr);
}

void cuda_device::deallocate(void* ptr, std::size_t /*bytes*/) noexcept {
  if (ptr == nullptr) return;
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context, std::nothrow);
  // Note [Free waits for the device].
  if (const CUresult r = api.call<&driver_api::ctx_synchronize>(); r != CUDA_SUCCESS) api.log(r, "cuCtxSynchronize");
  if (const CUresult r = api.call<&driver_api::mem_free>(to_cu(ptr)); r != CUDA_SUCCESS) api.log(r, "cuMemFree");
}

// --- page-locked host memory ---------------------------------------------------

void* cuda_device::try_allocate_host(std::size_t bytes) {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  void* ptr = nullptr;
  const CUresult r = api.call<&driver_api::mem_host_alloc>(&ptr, bytes, static_cast<unsigned>(CU_MEMHOSTALLOC_PORTABLE));
  if (r == CUDA_ERROR_OUT_OF_MEMORY) return nullptr;
  api.check(r, "cuMemHostAlloc");
  return ptr;
}

void cuda_device::deallocate_host(void* ptr, std::size_t /*bytes*/) noexcept {
  if (ptr == nullptr) return;
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context, std::nothrow);
  if (const CUresult r = api.call<&driver_api::mem_free_host>(ptr); r != CUDA_SUCCESS) api.log(r, "cuMemFreeHost");
}

// --- streams and events --------------------------------------------------------

stream_id cuda_device::create_stream() {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  CUstream stream = nullptr;
  api.check(api.call<&driver_api::stream_create>(&stream, static_cast<unsigned>(CU_STREAM_NON_BLOCKING)),
            "cuStreamCreate");
  return stream_id{reinterpret_cast<std::uintptr_t>(stream)};
}

void cuda_device::destroy_stream(stream_id stream) noexcept {
  if (stream == default_stream) return;
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context, std::nothrow);
  if (const CUresult r = api.call<&driver_api::stream_destroy>(to_cu_stream(stream)); r != CUDA_SUCCESS) {
    api.log(r, "cuStreamDestroy");
  }
}

bool cuda_device::is_stream(stream_id /*stream*/) const { return true; }

void cuda_device::synchronize(stream_id stream) {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  api.check(api.call<&driver_api::stream_synchronize>(to_cu_stream(stream)), "cuStreamSynchronize");
}

void cuda_device::synchronize_device() {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  api.check(api.call<&driver_api::ctx_synchronize>(), "cuCtxSynchronize");
}

event_id cuda_device::create_event() {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  CUevent event = nullptr;
  api.check(api.call<&driver_api::event_create>(&event, static_cast<unsigned>(CU_EVENT_DISABLE_TIMING)),
            "cuEventCreate");
  return event_id{reinterpret_cast<std::uintptr_t>(event)};
}

void cuda_device::destroy_event(event_id event) noexcept {
  if (to_underlying(event) == 0) return;
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context, std::nothrow);
  if (const CUresult r = api.call<&driver_api::event_destroy>(to_cu_event(event)); r != CUDA_SUCCESS) {
    api.log(r, "cuEventDestroy");
  }
}

void cuda_device::record_event(event_id event, stream_id stream) {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  api.check(api.call<&driver_api::event_record>(to_cu_event(event), to_cu_stream(stream)), "cuEventRecord");
}

bool cuda_device::query_event(event_id event) {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  const CUresult r = api.call<&driver_api::event_query>(to_cu_event(event));
  if (r == CUDA_ERROR_NOT_READY) return false;
  api.check(r, "cuEventQuery");
  return true;
}

void cuda_device::synchronize_event(event_id event) {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  api.check(api.call<&driver_api::event_synchronize>(to_cu_event(event)), "cuEventSynchronize");
}

void cuda_device::stream_wait_event(stream_id stream, event_id event) {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  api.check(api.call<&driver_api::stream_wait_event>(to_cu_stream(stream), to_cu_event(event), 0u),
            "cuStreamWaitEvent");
}

event_id cuda_device::create_timing_event() {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  CUevent event = nullptr;
  api.check(api.call<&driver_api::event_create>(&event, static_cast<unsigned>(CU_EVENT_DEFAULT)), "cuEventCreate");
  return event_id{reinterpret_cast<std::uintptr_t>(event)};
}

std::optional<std::int64_t> cuda_device::elapsed_ns(event_id start, event_id end) {
  const driver_api& api = driver_->api();
  if (api.event_elapsed_time == nullptr) return std::nullopt;
  const context_guard guard(api, handles_->context);
  float ms = 0;
  api.check(api.call<&driver_api::event_elapsed_time>(&ms, to_cu_event(start), to_cu_event(end)),
            "cuEventElapsedTime");
  return static_cast<std::int64_t>(std::llround(static_cast<double>(ms) * 1e6));
}

// --- copies and information ----------------------------------------------------

void cuda_device::copy_async(void* dst, const void* src, std::size_t bytes, stream_id stream) {
  if (bytes == 0) return;
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  api.check(api.call<&driver_api::memcpy_async>(to_cu(dst), to_cu(src), bytes, to_cu_stream(stream)),
            "cuMemcpyAsync");
}

memory_info cuda_device::memory() const {
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  memory_info info;
  api.check(api.call<&driver_api::mem_get_info>(&info.free_bytes, &info.total_bytes), "cuMemGetInfo");
  return info;
}

void cuda_device::enable_peer_access(cuda_device& peer) {
  {
    const driver_api& api = driver_->api();
    const context_guard guard(api, handles_->context);
    const CUresult r = api.call<&driver_api::ctx_enable_peer_access>(peer.handles_->context, 0u);
    if (r != CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED) api.check(r, "cuCtxEnablePeerAccess");
  }
  peer.grant_access(ordinal_);  // Note [Peers of mapped memory] in cuda_device_vmm.cpp
}

void cuda_device::copy_to_peer_async(void* dst, const cuda_device& dst_device, const void* src, std::size_t bytes,
                                     stream_id stream) {
  if (bytes == 0) return;
  const driver_api& api = driver_->api();
  const context_guard guard(api, handles_->context);
  api.check(api.call<&driver_api::memcpy_peer_async>(to_cu(dst), dst_device.handles_->context, to_cu(src),
                                                     handles_->context, bytes, to_cu_stream(stream)),
            "cuMemcpyPeerAsync");
}

}  // namespace tp
