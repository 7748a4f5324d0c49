#pragma once
// segment_listener: told when a caching_allocator takes memory from its
// device or gives it back. The CUDA adapter turns these into PyTorch's
// SEGMENT_ALLOC / SEGMENT_FREE trace entries, on which NCCL's buffer
// registration relies (hooks/cuda_adapter_streams.cpp).

#include <cstddef>
#include <cstdint>

#include "device/device.hpp"

namespace tp {

/// Receives a caching_allocator's segment changes.
///
/// Thread-safety: called with the allocator's lock held, on the thread that
/// allocates or frees: a listener must not call back into that allocator,
/// nor wait for anything the allocator's callers may hold (PyTorch's rule for
/// its trace trackers: not the Python GIL). Lifetime: must outlive its
/// registration (caching_allocator::set_segment_listener).
class segment_listener {
 public:
  virtual ~segment_listener() = default;
  /// A new segment [address, address + bytes) for `stream` came from the
  /// device (device::try_allocate).
  virtual void on_segment_alloc(std::uintptr_t address, std::size_t bytes, stream_id stream) noexcept = 0;
  /// A segment of `stream` is about to return to the device
  /// (device::deallocate).
  virtual void on_segment_free(std::uintptr_t address, std::size_t bytes, stream_id stream) noexcept = 0;
};

}  // namespace tp
