#pragma once
// cuda_platform: every CUDA call cuda_adapter makes, behind one small
// interface, so that the adapter runs over fake devices on a machine without
// a GPU (tests/hooks/cuda_adapter_review_test.cpp) and so that the calls can
// be counted (nothing may call CUDA before the first allocation).
// Includes no torch and no CUDA header.
//
// Note [Adapter platform]
// The adapter needs two kinds of CUDA service: PyTorch's per-thread state
// (current device, current stream, how many devices PyTorch sees) and the
// devices themselves (tp::device: memory, streams, events, copies). Both go
// through here. The production platform (c10_cuda_platform.cpp) answers the
// first from c10::cuda, which shares PyTorch's CUDA runtime, and opens
// tp::cuda_device over one process-wide tp::cuda_driver for the second; it
// loads that driver on the first open_device(), never before (Note [No CUDA
// call before the first allocation] in cuda_adapter.cpp). A test platform
// answers both from simulated devices.

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <exception>
#include <memory>

#include "device/device.hpp"

namespace tp::hooks {

/// What cuda_adapter asks of CUDA. Devices are numbered as PyTorch numbers
/// them (after CUDA_VISIBLE_DEVICES).
///
/// Thread-safety: every member may be called from any thread. "This thread"
/// means the caller's: the current device and stream are per thread.
class cuda_platform {
 public:
  virtual ~cuda_platform() = default;

  /// PyTorch's current device on this thread (c10::cuda::current_device()).
  /// Requires: PyTorch has initialised CUDA (it does before any allocation).
  virtual int current_device() = 0;
  /// Makes `device` PyTorch's current device on this thread
  /// (c10::cuda::SetDevice). Callers skip it when it is current already.
  virtual void set_device(int device) = 0;
  /// Makes `device` current again after work on another, as PyTorch's device
  /// guards do (c10::cuda::MaybeSetDevice): on a device that has no primary
  /// context yet it only records the choice and creates none (a context
  /// costs about 0.5 GB of that GPU's memory).
  virtual void restore_device(int device) = 0;
  /// PyTorch's current stream of `device` on this thread.
  virtual stream_id current_stream(int device) = 0;
  /// How many devices PyTorch sees. Requires: PyTorch has initialised CUDA
  /// (calling it earlier would initialise the driver).
  virtual int device_count() = 0;
  /// Opens `device`. Throws tp::cuda_error "no CUDA device: ..." when there is
  /// no driver or no such device. The device lives as long as the caller
  /// keeps it.
  virtual std::unique_ptr<device> open_device(int device) = 0;
  /// Lets kernels on `accessor` use memory of `owner` (both from
  /// open_device). Enabling it twice is not an error.
  virtual void enable_peer_access(device& accessor, device& owner) = 0;
  /// Enqueues on `stream` (a stream of `src_device`) a copy from src, memory
  /// of src_device, to dst, memory of dst_device, that needs no peer access
  /// (cudaMemcpyPeerAsync).
  virtual void copy_to_peer_async(device& src_device, void* dst, device& dst_device, const void* src,
                                  std::size_t bytes, stream_id stream) = 0;
  /// CUDA driver calls made so far (0 before the first open_device()), for
  /// the checks that nothing called CUDA.
  virtual std::uint64_t driver_calls() const = 0;
};

/// Makes a device PyTorch's current one for a scope and restores the
/// caller's afterwards; does nothing but read the current device when it is
/// current already (the allocation fast path). Not movable: it restores on
/// the thread that made it.
class platform_device_guard {
 public:
  platform_device_guard(cuda_platform& platform, int device) : platform_(platform) {
    previous_ = platform.current_device();
    if (previous_ != device) {
      platform.set_device(device);
      restore_ = true;
    }
  }
  ~platform_device_guard() {
    if (!restore_) return;
    try {
      platform_.restore_device(previous_);
    } catch (const std::exception& e) {
      std::fprintf(stderr, "tensorpager: restoring CUDA device %d failed: %s\n", previous_, e.what());
    }
  }
  platform_device_guard(const platform_device_guard&) = delete;
  platform_device_guard& operator=(const platform_device_guard&) = delete;

 private:
  cuda_platform& platform_;
  int previous_ = 0;
  bool restore_ = false;
};

}  // namespace tp::hooks
