// The production cuda_platform; see Note [Adapter platform] in
// cuda_platform.hpp. c10::cuda's functions live in libc10_cuda (PyTorch's
// shared CUDA runtime); nothing here calls the CUDA runtime itself, so
// tensorpager._C needs no CUDA runtime of its own (Note [Driver API only] in
// device/cuda/driver_api.hpp).

#include "hooks/c10_cuda_platform.hpp"

#include <atomic>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <c10/cuda/CUDAException.h>
#include <c10/cuda/CUDAFunctions.h>
#include <c10/cuda/CUDAStream.h>

#include "core/errors.hpp"
#include "device/cuda/cuda_device.hpp"
#include "device/cuda/cuda_driver.hpp"

namespace tp::hooks {
namespace {

class c10_cuda_platform final : public cuda_platform {
 public:
  int current_device() override { return c10::cuda::current_device(); }

  void set_device(int device) override { c10::cuda::set_device(static_cast<c10::DeviceIndex>(device)); }

  void restore_device(int device) override {
    C10_CUDA_CHECK(c10::cuda::MaybeSetDevice(static_cast<c10::DeviceIndex>(device)));
  }

  stream_id current_stream(int device) override {
    const cudaStream_t s = c10::cuda::getCurrentCUDAStream(static_cast<c10::DeviceIndex>(device)).stream();
    return stream_id{reinterpret_cast<std::uintptr_t>(s)};
  }

  int device_count() override { return c10::cuda::device_count(); }

  std::unique_ptr<device> open_device(int device) override { return cuda_device::open(driver(), device); }

  void enable_peer_access(device& accessor, device& owner) override {
    as_cuda(accessor).enable_peer_access(as_cuda(owner));
  }

  void copy_to_peer_async(device& src_device, void* dst, device& dst_device, const void* src, std::size_t bytes,
                          stream_id stream) override {
    as_cuda(src_device).copy_to_peer_async(dst, as_cuda(dst_device), src, bytes, stream);
  }

  std::uint64_t driver_calls() const override {
    std::lock_guard lock(mutex_);
    return (driver_ != nullptr ? driver_->calls() : 0) + failed_loads_;
  }

 private:
  /// The process's driver, loaded by the first open_device().
  std::shared_ptr<const cuda_driver> driver() {
    std::lock_guard lock(mutex_);
    if (driver_ == nullptr) {
      try {
        driver_ = cuda_driver::load();
      } catch (...) {
        ++failed_loads_;  // a load attempt is a CUDA call too
        throw;
      }
    }
    return driver_;
  }

  /// Every device this platform hands out is a cuda_device.
  static cuda_device& as_cuda(device& d) { return static_cast<cuda_device&>(d); }

  mutable std::mutex mutex_;  // guards driver_, failed_loads_
  std::shared_ptr<const cuda_driver> driver_;
  std::uint64_t failed_loads_ = 0;
};

}  // namespace

std::unique_ptr<cuda_platform> make_c10_cuda_platform() { return std::make_unique<c10_cuda_platform>(); }

}  // namespace tp::hooks
