#pragma once
// Buffers of a simulated device for its tests (simulated_device_test.cpp,
// simulated_device_checks_test.cpp, simulated_device_threads_test.cpp): they
// are host memory, so the tests read and write them directly.

#include <cstddef>
#include <cstring>

#include "device/simulated_device.hpp"

namespace tp::testing {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;

inline std::byte* alloc(tp::simulated_device& dev, std::size_t bytes, unsigned char fill) {
  auto* p = static_cast<std::byte*>(dev.try_allocate(bytes));
  if (p != nullptr) std::memset(p, fill, bytes);
  return p;
}

inline std::byte* alloc_host(tp::simulated_device& dev, std::size_t bytes, unsigned char fill) {
  auto* p = static_cast<std::byte*>(dev.try_allocate_host(bytes));
  if (p != nullptr) std::memset(p, fill, bytes);
  return p;
}

inline bool all_equal(const std::byte* p, std::size_t bytes, unsigned char value) {
  for (std::size_t i = 0; i < bytes; ++i)
    if (p[i] != static_cast<std::byte>(value)) return false;
  return true;
}

}  // namespace tp::testing
