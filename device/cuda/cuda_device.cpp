// tp::cuda_device over the CUDA runtime (cudart_static) and the run-time
// resolved driver API. The error checks and the device guard live in
// driver_api.hpp.

#include "device/cuda/cuda_device.hpp"

#include <cuda.h>
#include <cuda_runtime_api.h>

#include <cstdio>
#include <new>
#include <type_traits>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "core/format_bytes.hpp"
#include "device/cuda/driver_api.hpp"

namespace tp {
namespace detail {
namespace {

static_assert(std::is_same_v<CUmemGenericAllocationHandle, unsigned long long> &&
                  sizeof(CUmemGenericAllocationHandle) == sizeof(std::uint64_t),
              "granules_ stores CUmemGenericAllocationHandle as std::uint64_t");
static_assert(sizeof(CUdeviceptr) == sizeof(std::uintptr_t), "CUdeviceptr must hold a pointer");
static_assert(sizeof(cudaStream_t) == sizeof(std::uintptr_t) &&
                  sizeof(cudaEvent_t) == sizeof(std::uintptr_t),
              "stream_id and event_id hold cudaStream_t and cudaEvent_t values");

cudaStream_t to_cuda(stream_id s) { return reinterpret_cast<cudaStream_t>(to_underlying(s)); }
cudaEvent_t to_cuda(event_id e) { return reinterpret_cast<cudaEvent_t>(to_underlying(e)); }
CUdeviceptr to_cu(std::uintptr_t address) { return static_cast<CUdeviceptr>(address); }

}  // namespace
}  // namespace detail

using detail::cuda_check;
using detail::device_guard;
using detail::to_cu;
using detail::to_cuda;

// --- opening -----------------------------------------------------------------

int cuda_device::device_count() noexcept {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    (void)cudaGetLastError();
    return 0;
  }
  return count;
}

std::unique_ptr<cuda_device> cuda_device::open(int ordinal) {
  int count = 0;
  if (const cudaError_t err = cudaGetDeviceCount(&count); err != cudaSuccess) {
    (void)cudaGetLastError();
    throw cuda_error(fmt::format("no CUDA device: cudaGetDeviceCount failed: {} ({})",
                                 cudaGetErrorString(err), cudaGetErrorName(err)));
  }
  if (count == 0) throw cuda_error("no CUDA device: cudaGetDeviceCount found 0 devices");
  if (ordinal < 0 || ordinal >= count) {
    throw invalid_argument(fmt::format(
        "cuda_device::open: ordinal {} is out of range; this process sees {} CUDA device(s), "
        "ordinals 0 to {}",
        ordinal, count, count - 1));
  }

  const device_guard guard(ordinal);
  cudaDeviceProp props{};
  TP_CUDA_CHECK(cudaGetDeviceProperties(&props, ordinal));
  std::string name(props.name);

  // Virtual memory management is optional: without it the device still serves
  // cudaMalloc, and the VMM members explain why they are unavailable.
  std::unique_ptr<const detail::driver_api> driver;
  std::size_t granularity = 0;
  std::string vmm_unavailable;
  try {
    driver = std::make_unique<const detail::driver_api>(detail::driver_api::load());
  } catch (const cuda_error& e) {
    vmm_unavailable = e.what();
  }
  if (driver) {
    granularity = driver->vmm_granularity(ordinal);
    if (granularity == 0) {
      vmm_unavailable = fmt::format(
          "CUDA device {} ({}) does not support virtual memory management "
          "(CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED is 0)",
          ordinal, name);
    }
  }
  return std::unique_ptr<cuda_device>(new cuda_device(
      ordinal, std::move(name), std::move(driver), granularity, std::move(vmm_unavailable)));
}

cuda_device::cuda_device(int ordinal, std::string name,
                         std::unique_ptr<const detail::driver_api> driver, std::size_t granularity,
                         std::string vmm_unavailable)
    : ordinal_(ordinal),
      name_(std::move(name)),
      driver_(std::move(driver)),
      granularity_(granularity),
      vmm_unavailable_(std::move(vmm_unavailable)) {}

cuda_device::~cuda_device() {
  const std::lock_guard lock(map_mutex_);
  if (granules_.empty()) return;
  std::fprintf(stderr,
               "tensorpager: cuda_device %d destroyed with %zu granule(s) still mapped; "
               "releasing them\n",
               ordinal_, granules_.size());
  const device_guard guard(ordinal_, std::nothrow);
  (void)TP_CUDA_WARN(cudaDeviceSynchronize());
  for (const auto& [address, handle] : granules_) {
    driver_->unmap_and_release(to_cu(address), granularity_, handle, "destroying cuda_device");
  }
  granules_.clear();
}

std::string cuda_device::name() const { return name_; }

// --- plain device memory -----------------------------------------------------

void* cuda_device::try_allocate(std::size_t bytes) {
  const device_guard guard(ordinal_);
  void* ptr = nullptr;
  const cudaError_t err = cudaMalloc(&ptr, bytes);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  cuda_check(err, "cudaMalloc");
  return ptr;
}

void cuda_device::deallocate(void* ptr, std::size_t /*bytes*/) noexcept {
  if (ptr == nullptr) return;
  const device_guard guard(ordinal_, std::nothrow);
  (void)TP_CUDA_WARN(cudaFree(ptr));
}

// --- virtual memory ------------------------------------------------------------
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
// Note [Unmap waits for the device]
// cudaFree waits for the device to be idle, so callers of deallocate may free
// memory that queued kernels still use. cuMemUnmap/cuMemRelease promise no
// such wait, and unmapping memory a kernel is about to touch is a fault, not a
// late free. unmap therefore synchronizes the device first, giving it the
// same contract as deallocate. It is a slow path (trimming, empty_cache).

std::size_t cuda_device::granularity() const {
  if (granularity_ == 0) throw cuda_error(vmm_unavailable_);
  return granularity_;
}

void cuda_device::check_vmm_range(const void* ptr, std::size_t bytes, const char* caller) const {
  const std::size_t g = granularity();
  const auto address = reinterpret_cast<std::uintptr_t>(ptr);
  if (bytes == 0 || bytes % g != 0 || address % g != 0) {
    throw invalid_argument(fmt::format(
        "cuda_device::{}: address {} and size {} bytes must be non-zero multiples of the "
        "granularity, {} bytes ({})",
        caller, ptr, bytes, g, format_bytes(g)));
  }
}

void* cuda_device::reserve(std::size_t bytes) {
  const std::size_t g = granularity();
  if (bytes == 0 || bytes % g != 0) {
    throw invalid_argument(fmt::format(
        "cuda_device::reserve: {} bytes is not a positive multiple of the granularity, {} bytes",
        bytes, g));
  }
  const device_guard guard(ordinal_);
  CUdeviceptr base = 0;
  const CUresult r = driver_->mem_address_reserve(&base, bytes, g, 0, 0);
  if (r != CUDA_SUCCESS) {
    throw cuda_error(driver_->describe(
        r, fmt::format("cuMemAddressReserve({})", format_bytes(bytes)).c_str()));
  }
  return reinterpret_cast<void*>(base);
}

void cuda_device::release(void* base, std::size_t bytes) noexcept {
  if (base == nullptr || driver_ == nullptr) return;
  const auto begin = reinterpret_cast<std::uintptr_t>(base);
  const device_guard guard(ordinal_, std::nothrow);
  {
    const std::lock_guard lock(map_mutex_);
    const auto first = granules_.lower_bound(begin);
    if (first != granules_.end() && first->first < begin + bytes) {
      std::fprintf(stderr,
                   "tensorpager: cuda_device::release(%p, %zu) with granules still mapped; "
                   "unmapping them first\n",
                   base, bytes);
      (void)TP_CUDA_WARN(cudaDeviceSynchronize());
      unmap_granules_locked(begin, begin + bytes);
    }
  }
  const CUresult r = driver_->mem_address_free(to_cu(begin), bytes);
  if (r != CUDA_SUCCESS) driver_->log(r, "cuMemAddressFree");
}

bool cuda_device::try_map(void* ptr, std::size_t bytes) {
  check_vmm_range(ptr, bytes, "try_map");
  const std::size_t g = granularity_;
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  const std::uintptr_t end = begin + bytes;
  const device_guard guard(ordinal_);
  const std::lock_guard lock(map_mutex_);

  if (const auto it = granules_.lower_bound(begin); it != granules_.end() && it->first < end) {
    throw invalid_argument(fmt::format(
        "cuda_device::try_map({}, {} bytes): the granule at {:#x} is already mapped", ptr, bytes,
        it->first));
  }

  // What this call has mapped so far, rolled back on any failure.
  std::vector<std::pair<std::uintptr_t, CUmemGenericAllocationHandle>> mapped;
  mapped.reserve(bytes / g);
  const auto roll_back = [&]() noexcept {
    for (const auto& [address, handle] : mapped) {
      granules_.erase(address);
      driver_->unmap_and_release(to_cu(address), g, handle, "rolling back try_map");
    }
  };

  const CUmemAllocationProp prop = detail::pinned_device_memory(ordinal_);
  CUresult failure = CUDA_SUCCESS;
  const char* failed_call = nullptr;
  try {
    for (std::uintptr_t address = begin; address < end; address += g) {
      CUmemGenericAllocationHandle handle{};
      if (const CUresult r = driver_->mem_create(&handle, g, &prop, 0); r != CUDA_SUCCESS) {
        failure = r;
        failed_call = "cuMemCreate";
        break;
      }
      if (const CUresult r = driver_->mem_map(to_cu(address), g, 0, handle, 0);
          r != CUDA_SUCCESS) {
        (void)driver_->mem_release(handle);
        failure = r;
        failed_call = "cuMemMap";
        break;
      }
      mapped.emplace_back(address, handle);
      granules_.emplace(address, handle);  // may throw: caught below
    }
    if (failure == CUDA_SUCCESS) {
      CUmemAccessDesc access{};
      access.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
      access.location.id = ordinal_;
      access.flags = CU_MEM_ACCESS_FLAGS_PROT_READWRITE;
      if (const CUresult r = driver_->mem_set_access(to_cu(begin), bytes, &access, 1);
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
  throw cuda_error(driver_->describe(
      failure, fmt::format("{} (try_map of {} at {})", failed_call, format_bytes(bytes), ptr)
                   .c_str()));
}

void cuda_device::unmap(void* ptr, std::size_t bytes) noexcept {
  const auto begin = reinterpret_cast<std::uintptr_t>(ptr);
  if (driver_ == nullptr || granularity_ == 0 || begin % granularity_ != 0 ||
      bytes % granularity_ != 0) {
    std::fprintf(stderr,
                 "tensorpager: cuda_device::unmap(%p, %zu): not a granule-aligned range of a "
                 "virtual-memory-capable device; nothing unmapped\n",
                 ptr, bytes);
    return;
  }
  const device_guard guard(ordinal_, std::nothrow);
  (void)TP_CUDA_WARN(cudaDeviceSynchronize());  // Note [Unmap waits for the device]
  const std::lock_guard lock(map_mutex_);
  unmap_granules_locked(begin, begin + bytes);
}

void cuda_device::unmap_granules_locked(std::uintptr_t begin, std::uintptr_t end) noexcept {
  std::size_t found = 0;
  auto it = granules_.lower_bound(begin);
  while (it != granules_.end() && it->first < end) {
    driver_->unmap_and_release(to_cu(it->first), granularity_, it->second, "unmapping");
    it = granules_.erase(it);
    ++found;
  }
  if (const std::size_t expected = (end - begin) / granularity_; found != expected) {
    std::fprintf(stderr,
                 "tensorpager: cuda_device::unmap: %zu of the %zu granule(s) at %#zx were not "
                 "mapped\n",
                 expected - found, expected, static_cast<std::size_t>(begin));
  }
}

// --- page-locked host memory ---------------------------------------------------

void* cuda_device::try_allocate_host(std::size_t bytes) {
  const device_guard guard(ordinal_);
  void* ptr = nullptr;
  const cudaError_t err = cudaHostAlloc(&ptr, bytes, cudaHostAllocDefault);
  if (err == cudaErrorMemoryAllocation) {
    (void)cudaGetLastError();
    return nullptr;
  }
  cuda_check(err, "cudaHostAlloc");
  return ptr;
}

void cuda_device::deallocate_host(void* ptr, std::size_t /*bytes*/) noexcept {
  if (ptr == nullptr) return;
  const device_guard guard(ordinal_, std::nothrow);
  (void)TP_CUDA_WARN(cudaFreeHost(ptr));
}

// --- streams and events --------------------------------------------------------

stream_id cuda_device::create_stream() {
  const device_guard guard(ordinal_);
  cudaStream_t stream = nullptr;
  TP_CUDA_CHECK(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking));
  return stream_id{reinterpret_cast<std::uintptr_t>(stream)};
}

void cuda_device::destroy_stream(stream_id stream) noexcept {
  if (stream == default_stream) return;
  const device_guard guard(ordinal_, std::nothrow);
  (void)TP_CUDA_WARN(cudaStreamDestroy(to_cuda(stream)));
}

bool cuda_device::is_stream(stream_id /*stream*/) const { return true; }

void cuda_device::synchronize(stream_id stream) {
  const device_guard guard(ordinal_);
  TP_CUDA_CHECK(cudaStreamSynchronize(to_cuda(stream)));
}

event_id cuda_device::create_event() {
  const device_guard guard(ordinal_);
  cudaEvent_t event = nullptr;
  TP_CUDA_CHECK(cudaEventCreateWithFlags(&event, cudaEventDisableTiming));
  return event_id{reinterpret_cast<std::uintptr_t>(event)};
}

void cuda_device::destroy_event(event_id event) noexcept {
  if (to_underlying(event) == 0) return;
  const device_guard guard(ordinal_, std::nothrow);
  (void)TP_CUDA_WARN(cudaEventDestroy(to_cuda(event)));
}

void cuda_device::record_event(event_id event, stream_id stream) {
  const device_guard guard(ordinal_);
  TP_CUDA_CHECK(cudaEventRecord(to_cuda(event), to_cuda(stream)));
}

bool cuda_device::query_event(event_id event) {
  const device_guard guard(ordinal_);
  const cudaError_t err = cudaEventQuery(to_cuda(event));
  if (err == cudaErrorNotReady) {
    (void)cudaGetLastError();
    return false;
  }
  cuda_check(err, "cudaEventQuery");
  return true;
}

void cuda_device::synchronize_event(event_id event) {
  const device_guard guard(ordinal_);
  TP_CUDA_CHECK(cudaEventSynchronize(to_cuda(event)));
}

void cuda_device::stream_wait_event(stream_id stream, event_id event) {
  const device_guard guard(ordinal_);
  TP_CUDA_CHECK(cudaStreamWaitEvent(to_cuda(stream), to_cuda(event), 0));
}

// --- copies and information ----------------------------------------------------

void cuda_device::copy_async(void* dst, const void* src, std::size_t bytes, stream_id stream) {
  if (bytes == 0) return;
  const device_guard guard(ordinal_);
  TP_CUDA_CHECK(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, to_cuda(stream)));
}

memory_info cuda_device::memory() const {
  const device_guard guard(ordinal_);
  memory_info info;
  TP_CUDA_CHECK(cudaMemGetInfo(&info.free_bytes, &info.total_bytes));
  return info;
}

}  // namespace tp
