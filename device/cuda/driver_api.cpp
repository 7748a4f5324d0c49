// Error texts and the context guard of the driver API; see Note [Driver API
// only] in driver_api.hpp. Loading the table is cuda_driver.cpp's job.

#include "device/cuda/driver_api.hpp"

#include <cstdio>
#include <string>

#include <fmt/format.h>

#include "core/errors.hpp"

namespace tp::detail {
namespace {

void names_of(const driver_api& api, CUresult result, const char*& name, const char*& text) noexcept {
  name = nullptr;
  text = nullptr;
  // Not counted: describing an error is not a use of the device.
  if (api.get_error_name == nullptr || api.get_error_name(result, &name) != CUDA_SUCCESS) name = nullptr;
  if (api.get_error_string == nullptr || api.get_error_string(result, &text) != CUDA_SUCCESS) text = nullptr;
}

}  // namespace

bool driver_api::has_vmm() const noexcept {
  return mem_address_reserve != nullptr && mem_address_free != nullptr && mem_create != nullptr &&
         mem_release != nullptr && mem_map != nullptr && mem_unmap != nullptr && mem_set_access != nullptr &&
         mem_get_allocation_granularity != nullptr;
}

std::string driver_api::describe(CUresult result, const char* call) const {
  const char* name = nullptr;
  const char* text = nullptr;
  names_of(*this, result, name, text);
  if (name == nullptr) return fmt::format("{} failed: CUresult {}", call, static_cast<int>(result));
  return fmt::format("{} failed: {} ({})", call, name, text != nullptr ? text : "no description");
}

void driver_api::log(CUresult result, const char* call) const noexcept {
  const char* name = nullptr;
  const char* text = nullptr;
  names_of(*this, result, name, text);
  if (name == nullptr) {
    std::fprintf(stderr, "tensorpager: %s failed: CUresult %d\n", call, static_cast<int>(result));
  } else {
    std::fprintf(stderr, "tensorpager: %s failed: %s (%s)\n", call, name, text != nullptr ? text : "no description");
  }
}

void driver_api::check(CUresult result, const char* call) const {
  if (result != CUDA_SUCCESS) throw cuda_error(describe(result, call));
}

context_guard::context_guard(const driver_api& api, CUcontext context) : api_(api) {
  api.check(api.call<&driver_api::ctx_get_current>(&previous_), "cuCtxGetCurrent");
  if (previous_ == context) return;
  api.check(api.call<&driver_api::ctx_set_current>(context), "cuCtxSetCurrent");
  restore_ = true;
}

context_guard::context_guard(const driver_api& api, CUcontext context, std::nothrow_t) noexcept : api_(api) {
  if (const CUresult r = api.call<&driver_api::ctx_get_current>(&previous_); r != CUDA_SUCCESS) {
    api.log(r, "cuCtxGetCurrent");
    previous_ = nullptr;
  }
  if (previous_ == context) return;
  if (const CUresult r = api.call<&driver_api::ctx_set_current>(context); r != CUDA_SUCCESS) {
    api.log(r, "cuCtxSetCurrent");
    return;
  }
  restore_ = true;
}

context_guard::~context_guard() {
  if (!restore_) return;
  if (const CUresult r = api_.call<&driver_api::ctx_set_current>(previous_); r != CUDA_SUCCESS) {
    api_.log(r, "cuCtxSetCurrent (restoring the caller's context)");
  }
}

CUmemAllocationProp pinned_device_memory(CUdevice device) noexcept {
  CUmemAllocationProp prop{};
  prop.type = CU_MEM_ALLOCATION_TYPE_PINNED;
  prop.location.type = CU_MEM_LOCATION_TYPE_DEVICE;
  prop.location.id = device;
  return prop;
}

}  // namespace tp::detail
