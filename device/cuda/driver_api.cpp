// Runtime error checks, the device guard, and run-time resolution of the
// driver API; see Note [No link against libcuda] in driver_api.hpp.

#include "device/cuda/driver_api.hpp"

#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "core/errors.hpp"

namespace tp::detail {

void cuda_check(cudaError_t err, const char* call) {
  if (err == cudaSuccess) return;
  (void)cudaGetLastError();
  throw cuda_error(
      fmt::format("{} failed: {} ({})", call, cudaGetErrorName(err), cudaGetErrorString(err)));
}

bool cuda_warn(cudaError_t err, const char* call) noexcept {
  if (err == cudaSuccess) return true;
  (void)cudaGetLastError();
  std::fprintf(stderr, "tensorpager: %s failed: %s (%s)\n", call, cudaGetErrorName(err),
               cudaGetErrorString(err));
  return false;
}

device_guard::device_guard(int ordinal) {
  TP_CUDA_CHECK(cudaGetDevice(&previous_));
  TP_CUDA_CHECK(cudaSetDevice(ordinal));
  restore_ = previous_ != ordinal;
}

device_guard::device_guard(int ordinal, std::nothrow_t) noexcept {
  if (!TP_CUDA_WARN(cudaGetDevice(&previous_))) previous_ = ordinal;
  (void)TP_CUDA_WARN(cudaSetDevice(ordinal));
  restore_ = previous_ != ordinal;
}

device_guard::~device_guard() {
  if (restore_) (void)TP_CUDA_WARN(cudaSetDevice(previous_));
}

CUmemAllocationProp pinned_device_memory(int ordinal) noexcept {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = ordinal;
  return prop;
}

namespace {

/// Looks symbol up at the CUDA version its typedef was written for and stores
/// it in out. Throws tp::cuda_error when the driver lacks it.
template <class Fn>
void resolve(Fn& out, const char* symbol, unsigned int cuda_version) {
  void* fn = nullptr;
  cudaDriverEntryPointQueryResult status = cudaDriverEntryPointSymbolNotFound;
  const cudaError_t err =
      cudaGetDriverEntryPointByVersion(symbol, &fn, cuda_version, cudaEnableDefault, &status);
  if (err != cudaSuccess || status != cudaDriverEntryPointSuccess || fn == nullptr) {
    (void)cudaGetLastError();  // leave no stale error for the next runtime check
    const char* why = err != cudaSuccess ? cudaGetErrorString(err)
                      : status == cudaDriverEntryPointVersionNotSufficent
                          ? "the driver's version is not sufficient"
                          : "symbol not found";
    throw cuda_error(fmt::format(
        "cudaGetDriverEntryPointByVersion(\"{}\", version {}) failed: {}; tensorpager needs a "
        "driver that provides the CUDA virtual memory management API",
        symbol, cuda_version, why));
  }
  // Converting an object pointer to a function pointer is conditionally
  // supported; POSIX (dlsym) and every CUDA platform guarantee it.
  out = reinterpret_cast<Fn>(fn);
}

}  // namespace

driver_api driver_api::load() {
  driver_api api;
  resolve(api.get_error_name, "cuGetErrorName", 6000);
  resolve(api.get_error_string, "cuGetErrorString", 6000);
  resolve(api.device_get, "cuDeviceGet", 2000);
  resolve(api.device_get_attribute, "cuDeviceGetAttribute", 2000);
  resolve(api.mem_address_reserve, "cuMemAddressReserve", 10020);
  resolve(api.mem_address_free, "cuMemAddressFree", 10020);
  resolve(api.mem_create, "cuMemCreate", 10020);
  resolve(api.mem_release, "cuMemRelease", 10020);
  resolve(api.mem_map, "cuMemMap", 10020);
  resolve(api.mem_unmap, "cuMemUnmap", 10020);
  resolve(api.mem_set_access, "cuMemSetAccess", 10020);
  resolve(api.mem_get_allocation_granularity, "cuMemGetAllocationGranularity", 10020);
  return api;
}

namespace {

void names_of(const driver_api& api, CUresult result, const char*& name,
              const char*& text) noexcept {
  name = nullptr;
  text = nullptr;
  if (api.get_error_name == nullptr || api.get_error_name(result, &name) != CUDA_SUCCESS) {
    name = nullptr;
  }
  if (api.get_error_string == nullptr || api.get_error_string(result, &text) != CUDA_SUCCESS) {
    text = nullptr;
  }
}

}  // namespace

std::size_t driver_api::vmm_granularity(int ordinal) const {
  CUdevice device{};
  int supported = 0;
  CUresult r = device_get(&device, ordinal);
  if (r == CUDA_SUCCESS) {
    r = device_get_attribute(&supported, CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED,
                             device);
  }
  if (r != CUDA_SUCCESS) {
    throw cuda_error(
        describe(r, "cuDeviceGetAttribute(VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED)"));
  }
  if (supported == 0) return 0;
  std::size_t granularity = 0;
  const CUmemAllocationProp prop = pinned_device_memory(ordinal);
  r = mem_get_allocation_granularity(&granularity, &prop, CU_MEM_ALLOC_GRANULARITY_RECOMMENDED);
  if (r != CUDA_SUCCESS || granularity == 0) {
    throw cuda_error(describe(r, "cuMemGetAllocationGranularity(RECOMMENDED)"));
  }
  return granularity;
}

void driver_api::unmap_and_release(CUdeviceptr address, std::size_t bytes,
                                   CUmemGenericAllocationHandle handle,
                                   const char* context) const noexcept {
  if (const CUresult r = mem_unmap(address, bytes); r != CUDA_SUCCESS) {
    log(r, "cuMemUnmap");
    std::fprintf(stderr, "tensorpager:   while %s, at %#llx\n", context, address);
  }
  if (const CUresult r = mem_release(handle); r != CUDA_SUCCESS) {
    log(r, "cuMemRelease");
    std::fprintf(stderr, "tensorpager:   while %s, at %#llx\n", context, address);
  }
}

std::string driver_api::describe(CUresult result, const char* call) const {
  const char* name = nullptr;
  const char* text = nullptr;
  names_of(*this, result, name, text);
  if (name == nullptr) {
    return fmt::format("{} failed: CUresult {}", call, static_cast<int>(result));
  }
  return fmt::format("{} failed: {} ({})", call, name, text != nullptr ? text : "no description");
}

void driver_api::log(CUresult result, const char* call) const noexcept {
  const char* name = nullptr;
  const char* text = nullptr;
  names_of(*this, result, name, text);
  if (name == nullptr) {
    std::fprintf(stderr, "tensorpager: %s failed: CUresult %d\n", call, static_cast<int>(result));
  } else {
    std::fprintf(stderr, "tensorpager: %s failed: %s (%s)\n", call, name,
                 text != nullptr ? text : "no description");
  }
}

}  // namespace tp::detail
