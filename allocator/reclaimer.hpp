#pragma once
// The allocator's way to ask for memory back before it gives up.

#include <cstddef>
#include <string>

#include "device/device.hpp"

namespace tp {

/// Something that can free device memory held through the allocator: the
/// runtime implements it by evicting (offloading or dropping) tensors.
///
/// Called from the thread whose allocation failed, with the allocator's lock
/// NOT held, so reclaim() may call deallocate() on the same allocator. It
/// must not allocate from that allocator. The allocator does not own it;
/// register and unregister it while no allocation is in flight.
class reclaimer {
 public:
  virtual ~reclaimer() = default;
  /// Tries to free at least `bytes` of device memory for an allocation on
  /// `stream`. Returns the bytes actually freed (0 when it could not help).
  virtual std::size_t reclaim(std::size_t bytes, stream_id stream) = 0;
  /// A short account of what it holds ("evictable 1.00 GiB, offloaded 2.00
  /// GiB"), appended to out-of-memory messages. Empty when it has nothing.
  virtual std::string describe() const { return {}; }
};

}  // namespace tp
