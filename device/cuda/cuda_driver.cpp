// Loading the CUDA driver at run time; see Note [Driver API only] in
// driver_api.hpp.

#include "device/cuda/cuda_driver.hpp"

#include <dlfcn.h>

#include <string>
#include <utility>

#include <fmt/format.h>

#include "core/errors.hpp"
#include "device/cuda/driver_api.hpp"

namespace tp {
namespace {

using detail::driver_api;

/// cuGetProcAddress as the driver offers it: the CUDA 12 signature
/// (cuGetProcAddress_v2, which reports why a symbol is missing), or the
/// CUDA 11.3 one on older drivers.
struct proc_lookup {
  PFN_cuGetProcAddress_v12000 v2 = nullptr;
  PFN_cuGetProcAddress_v11030 v1 = nullptr;

  /// The entry point `symbol` at ABI version `version`, or nullptr with the
  /// reason in why.
  void* find(const char* symbol, int version, std::string& why) const {
    void* fn = nullptr;
    CUresult r = CUDA_SUCCESS;
    CUdriverProcAddressQueryResult status = CU_GET_PROC_ADDRESS_SUCCESS;
    if (v2 != nullptr) {
      r = v2(symbol, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM, &status);
    } else {
      r = v1(symbol, &fn, version, CU_GET_PROC_ADDRESS_LEGACY_STREAM);
    }
    if (r == CUDA_SUCCESS && fn != nullptr) return fn;
    why = r != CUDA_SUCCESS ? fmt::format("cuGetProcAddress returned CUresult {}", static_cast<int>(r))
          : status == CU_GET_PROC_ADDRESS_VERSION_NOT_SUFFICIENT
              ? fmt::format("the driver has it, but not at the ABI of CUDA version {}", version)
              : std::string("the driver does not provide it");
    return nullptr;
  }
};

/// Stores the entry point in out, or throws tp::cuda_error naming it.
template <class Fn>
void require(const proc_lookup& lookup, Fn& out, const char* symbol, int version, const std::string& library) {
  std::string why;
  void* fn = lookup.find(symbol, version, why);
  if (fn == nullptr) {
    throw cuda_error(fmt::format("no CUDA device: the CUDA driver ({}) lacks {} (version {}): {}", library,
                                 symbol, version, why));
  }
  // Converting an object pointer to a function pointer is conditionally
  // supported; POSIX (dlsym) and every CUDA platform guarantee it.
  out = reinterpret_cast<Fn>(fn);
}

/// Stores the entry point in out, or leaves it null.
template <class Fn>
void optional(const proc_lookup& lookup, Fn& out, const char* symbol, int version) {
  std::string why;
  out = reinterpret_cast<Fn>(lookup.find(symbol, version, why));
}

void resolve(const proc_lookup& l, driver_api& api, const std::string& lib) {
  // The version of each symbol is the one its PFN_..._v<version> typedef
  // names (Note [Driver API only]).
  require(l, api.get_error_name, "cuGetErrorName", 6000, lib);
  require(l, api.get_error_string, "cuGetErrorString", 6000, lib);
  require(l, api.init, "cuInit", 2000, lib);
  require(l, api.driver_get_version, "cuDriverGetVersion", 2020, lib);
  require(l, api.device_get_count, "cuDeviceGetCount", 2000, lib);
  require(l, api.device_get, "cuDeviceGet", 2000, lib);
  require(l, api.device_get_name, "cuDeviceGetName", 2000, lib);
  require(l, api.device_get_attribute, "cuDeviceGetAttribute", 2000, lib);
  require(l, api.device_total_mem, "cuDeviceTotalMem", 3020, lib);
  require(l, api.primary_ctx_retain, "cuDevicePrimaryCtxRetain", 7000, lib);
  require(l, api.primary_ctx_release, "cuDevicePrimaryCtxRelease", 11000, lib);
  require(l, api.ctx_get_current, "cuCtxGetCurrent", 4000, lib);
  require(l, api.ctx_set_current, "cuCtxSetCurrent", 4000, lib);
  require(l, api.ctx_synchronize, "cuCtxSynchronize", 2000, lib);
  require(l, api.ctx_enable_peer_access, "cuCtxEnablePeerAccess", 4000, lib);
  require(l, api.mem_get_info, "cuMemGetInfo", 3020, lib);
  require(l, api.mem_alloc, "cuMemAlloc", 3020, lib);
  require(l, api.mem_free, "cuMemFree", 3020, lib);
  require(l, api.mem_host_alloc, "cuMemHostAlloc", 2020, lib);
  require(l, api.mem_free_host, "cuMemFreeHost", 2000, lib);
  require(l, api.memcpy_async, "cuMemcpyAsync", 4000, lib);
  require(l, api.memcpy_peer_async, "cuMemcpyPeerAsync", 4000, lib);
  require(l, api.stream_create, "cuStreamCreate", 2000, lib);
  require(l, api.stream_destroy, "cuStreamDestroy", 4000, lib);
  require(l, api.stream_synchronize, "cuStreamSynchronize", 2000, lib);
  require(l, api.stream_wait_event, "cuStreamWaitEvent", 3020, lib);
  require(l, api.event_create, "cuEventCreate", 2000, lib);
  require(l, api.event_destroy, "cuEventDestroy", 4000, lib);
  require(l, api.event_record, "cuEventRecord", 2000, lib);
  require(l, api.event_query, "cuEventQuery", 2000, lib);
  require(l, api.event_synchronize, "cuEventSynchronize", 2000, lib);
  // The same ABI at both versions; CUDA 12.8's _v2 first, where the driver has it.
  optional(l, api.event_elapsed_time, "cuEventElapsedTime", 12080);
  if (api.event_elapsed_time == nullptr) optional(l, api.event_elapsed_time, "cuEventElapsedTime", 2000);
  optional(l, api.mem_address_reserve, "cuMemAddressReserve", 10020);
  optional(l, api.mem_address_free, "cuMemAddressFree", 10020);
  optional(l, api.mem_create, "cuMemCreate", 10020);
  optional(l, api.mem_release, "cuMemRelease", 10020);
  optional(l, api.mem_map, "cuMemMap", 10020);
  optional(l, api.mem_unmap, "cuMemUnmap", 10020);
  optional(l, api.mem_set_access, "cuMemSetAccess", 10020);
  optional(l, api.mem_get_allocation_granularity, "cuMemGetAllocationGranularity", 10020);
}

}  // namespace

std::shared_ptr<const cuda_driver> cuda_driver::load(const std::string& library) {
  // RTLD_LOCAL: tensorpager looks symbols up itself and exports none of them.
  // Where PyTorch's runtime has loaded the driver already, this is the same
  // handle, hence the same driver state and primary contexts.
  void* handle = dlopen(library.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (handle == nullptr) {
    const char* why = dlerror();
    throw cuda_error(fmt::format("no CUDA device: the CUDA driver library {} could not be loaded ({}); is an "
                                 "NVIDIA driver installed?",
                                 library, why != nullptr ? why : "unknown reason"));
  }
  proc_lookup lookup;
  lookup.v2 = reinterpret_cast<PFN_cuGetProcAddress_v12000>(dlsym(handle, "cuGetProcAddress_v2"));
  if (lookup.v2 == nullptr) {
    lookup.v1 = reinterpret_cast<PFN_cuGetProcAddress_v11030>(dlsym(handle, "cuGetProcAddress"));
  }
  if (lookup.v2 == nullptr && lookup.v1 == nullptr) {
    throw cuda_error(fmt::format("no CUDA device: {} has no cuGetProcAddress; tensorpager needs a driver for "
                                 "CUDA 11.3 or newer",
                                 library));
  }
  auto api = std::make_unique<driver_api>();
  resolve(lookup, *api, library);
  if (const CUresult r = api->call<&driver_api::init>(0u); r != CUDA_SUCCESS) {
    throw cuda_error("no CUDA device: " + api->describe(r, "cuInit"));
  }
  // The handle is not closed: see Lifetime in cuda_driver.hpp.
  return std::shared_ptr<const cuda_driver>(new cuda_driver(library, std::move(api)));
}

cuda_driver::cuda_driver(std::string library, std::unique_ptr<detail::driver_api> api)
    : library_(std::move(library)), api_(std::move(api)) {}

cuda_driver::~cuda_driver() = default;

int cuda_driver::device_count() const {
  int count = 0;
  api_->check(api_->call<&driver_api::device_get_count>(&count), "cuDeviceGetCount");
  return count;
}

int cuda_driver::version() const {
  int version = 0;
  api_->check(api_->call<&driver_api::driver_get_version>(&version), "cuDriverGetVersion");
  return version;
}

std::uint64_t cuda_driver::calls() const noexcept { return api_->calls.load(std::memory_order_relaxed); }

}  // namespace tp
