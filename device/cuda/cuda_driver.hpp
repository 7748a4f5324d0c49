#pragma once
// tp::cuda_driver: the CUDA driver library, loaded at run time. Includes no
// CUDA header (see Note [Driver API only] in driver_api.hpp).

#include <cstdint>
#include <memory>
#include <string>

namespace tp {

namespace detail {
struct driver_api;
}

/// The CUDA driver (libcuda.so.1), opened with dlopen, its entry points
/// resolved through cuGetProcAddress, and cuInit(0) called. Every CUDA call
/// tensorpager makes goes through one of these, which counts them.
///
/// Thread-safety: every member may be called from any thread.
/// Lifetime: shared by the devices opened over it (cuda_device::open); the
/// library stays loaded for the life of the process (never dlclosed: PyTorch
/// holds the same handle).
/// Fork: loading initialises the driver, after which a forked child cannot
/// use CUDA; so nothing loads a driver before the first device is opened
/// (hooks/ defers it to the first allocation, as PyTorch defers its own).
class cuda_driver {
 public:
  /// Loads `library`. Throws tp::cuda_error starting "no CUDA device:" when
  /// the library cannot be opened, lacks cuGetProcAddress or an entry point
  /// tensorpager needs, or cuInit fails (no device, driver too old).
  static std::shared_ptr<const cuda_driver> load(const std::string& library = "libcuda.so.1");

  ~cuda_driver();
  cuda_driver(const cuda_driver&) = delete;
  cuda_driver& operator=(const cuda_driver&) = delete;

  /// Devices visible to this process (cuDeviceGetCount, after
  /// CUDA_VISIBLE_DEVICES). Throws tp::cuda_error.
  int device_count() const;
  /// The driver's CUDA version, 1000 * major + 10 * minor (cuDriverGetVersion).
  int version() const;
  /// Driver calls made through this loader so far, cuInit included.
  std::uint64_t calls() const noexcept;
  /// The library name or path it was loaded from.
  const std::string& library() const noexcept { return library_; }

  /// The entry points, for device/cuda's own files (the type is private to
  /// them; see driver_api.hpp).
  const detail::driver_api& api() const noexcept { return *api_; }

 private:
  cuda_driver(std::string library, std::unique_ptr<detail::driver_api> api);

  std::string library_;
  std::unique_ptr<detail::driver_api> api_;
};

}  // namespace tp
