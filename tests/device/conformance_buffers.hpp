#pragma once
// Buffers for the device conformance suite (device_conformance.cpp and
// device_conformance_copies.cpp): page-locked host memory and plain device
// memory of one device, freed on scope exit.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <random>

#include "device/device.hpp"

namespace tp::testing::conformance {

constexpr std::size_t MiB = std::size_t{1} << 20;

// Page-locked host memory of one device, freed on scope exit. Callers
// synchronize before a buffer a copy uses goes out of scope.
class host_buffer {
 public:
  host_buffer(tp::device& dev, std::size_t bytes)
      : dev_(dev), bytes_(bytes), ptr_(static_cast<std::byte*>(dev.try_allocate_host(bytes))) {}
  ~host_buffer() {
    if (ptr_ != nullptr) dev_.deallocate_host(ptr_, bytes_);
  }
  host_buffer(const host_buffer&) = delete;
  host_buffer& operator=(const host_buffer&) = delete;

  std::byte* get() const { return ptr_; }
  std::size_t size() const { return bytes_; }
  void fill_random(std::uint64_t seed) {
    std::mt19937_64 rng(seed);
    for (std::size_t i = 0; i < bytes_; ++i) ptr_[i] = static_cast<std::byte>(rng());
  }
  void fill(unsigned char value) { std::memset(ptr_, value, bytes_); }
  bool same_as(const host_buffer& other) const {
    return bytes_ == other.bytes_ && std::memcmp(ptr_, other.ptr_, bytes_) == 0;
  }

 private:
  tp::device& dev_;
  std::size_t bytes_;
  std::byte* ptr_;
};

// Plain device memory, freed on scope exit.
class device_buffer {
 public:
  device_buffer(tp::device& dev, std::size_t bytes)
      : dev_(dev), bytes_(bytes), ptr_(dev.try_allocate(bytes)) {}
  ~device_buffer() {
    if (ptr_ != nullptr) dev_.deallocate(ptr_, bytes_);
  }
  device_buffer(const device_buffer&) = delete;
  device_buffer& operator=(const device_buffer&) = delete;

  void* get() const { return ptr_; }

 private:
  tp::device& dev_;
  std::size_t bytes_;
  void* ptr_;
};

inline std::uintptr_t address(const void* p) { return reinterpret_cast<std::uintptr_t>(p); }

}  // namespace tp::testing::conformance
