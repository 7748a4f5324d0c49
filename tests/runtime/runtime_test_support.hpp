#pragma once
// Runtime test pieces: a rig (manual clock, simulated device, caching
// allocator, pinned host pool) and fake_binding, a storage_binding that owns
// real device memory from the caching allocator and fills it with a pattern
// derived from a seed, so every round trip can be checked byte for byte.

#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <cstring>
#include <vector>

#include "allocator/caching_allocator.hpp"
#include "allocator/pinned_host_pool.hpp"
#include "core/clock.hpp"
#include "device/simulated_device.hpp"
#include "runtime/managed_tensor.hpp"

namespace tp::testing {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;

struct runtime_rig {
  struct config {
    std::size_t capacity = std::size_t{1} << 30;
    double bandwidth = 0.0;
    std::int64_t latency_ns = 0;
    std::optional<std::size_t> budget{};
    std::optional<std::size_t> host_budget{};
    bool expandable = false;  ///< the allocator's expandable segments
  };
  runtime_rig() : runtime_rig(config{}) {}
  explicit runtime_rig(config c)
      : dev(device_options(c), clk),
        alloc(dev, {.budget = c.budget, .max_split_size = SIZE_MAX, .expandable_segments = c.expandable}),
        host(dev, {.host_budget = c.host_budget}),
        compute(dev.create_stream()) {}
  static simulated_device::options device_options(const config& c) {
    simulated_device::options o;
    o.capacity_bytes = c.capacity;
    o.bandwidth_bytes_per_s = c.bandwidth;
    o.latency_ns = c.latency_ns;
    return o;
  }
  manual_clock clk;
  simulated_device dev;
  caching_allocator alloc;
  pinned_host_pool host;
  stream_id compute;
};

/// Owns device memory from the caching allocator; contents are a pattern of
/// `seed`. recompute() re-creates the same pattern, as a rerun with the RNG
/// restored re-creates the same values.
class fake_binding final : public storage_binding {
 public:
  fake_binding(runtime_rig& rig, std::size_t bytes, std::uint64_t seed)
      : rig_(rig), bytes_(bytes), seed_(seed) {
    ptr_ = rig_.alloc.allocate(bytes_, rig_.compute);
    fill();
  }
  ~fake_binding() override {
    if (ptr_ != nullptr) rig_.alloc.deallocate(ptr_);
  }
  fake_binding(const fake_binding&) = delete;
  fake_binding& operator=(const fake_binding&) = delete;

  void* device_ptr() const override { return ptr_; }
  void release_device() noexcept override {
    rig_.alloc.deallocate(ptr_);
    ptr_ = nullptr;
    ++releases;
  }
  void* allocate_device(std::size_t bytes, stream_id stream) override {
    EXPECT_EQ(ptr_.load(), nullptr);
    ptr_ = rig_.alloc.allocate(bytes, stream);
    return ptr_;
  }
  bool can_release() const noexcept override { return !shared; }
  bool can_recompute() const noexcept override { return !stale; }
  void recompute() override {
    ptr_ = rig_.alloc.allocate(bytes_, rig_.compute);
    fill();
    rig_.clk.advance(recompute_ns);
    ++recomputes;
  }

  /// Word j of the pattern (bytes 8j..8j+7).
  std::uint64_t word(std::size_t j) const {
    std::uint64_t x = seed_ * 0x9E3779B97F4A7C15ULL + j * 0xBF58476D1CE4E5B9ULL;
    return x ^ (x >> 29);
  }
  /// Waits for the compute stream (restores are ordered before later work on
  /// it), then compares every byte. Requires device storage.
  bool verify() const {
    rig_.dev.synchronize(rig_.compute);
    if (ptr_ == nullptr) return false;
    const auto* p = static_cast<const std::byte*>(ptr_.load());
    for (std::size_t j = 0; j * 8 < bytes_; ++j) {
      const std::uint64_t w = word(j);
      if (std::memcmp(p + j * 8, &w, std::min<std::size_t>(8, bytes_ - j * 8)) != 0) return false;
    }
    return true;
  }
  std::size_t bytes() const { return bytes_; }
  int releases = 0;
  /// Host time a recompute() takes on rig.clk.
  std::int64_t recompute_ns = 0;
  int recomputes = 0;
  bool shared = false;  ///< can_release() answers !shared, as a storage torch still holds
  bool stale = false;   ///< can_recompute() answers !stale, as a storage changed in place since

 private:
  // The "kernel" that produced the tensor has finished: the simulated device's
  // memory is host memory, written directly.
  void fill() {
    auto* p = static_cast<std::byte*>(ptr_.load());
    for (std::size_t j = 0; j * 8 < bytes_; ++j) {
      const std::uint64_t w = word(j);
      std::memcpy(p + j * 8, &w, std::min<std::size_t>(8, bytes_ - j * 8));
    }
  }
  runtime_rig& rig_;
  std::size_t bytes_;
  std::uint64_t seed_;
  // Atomic: a test may watch it from another thread than the one the
  // runtime releases it on (RuntimeThreads).
  std::atomic<void*> ptr_{nullptr};
};

}  // namespace tp::testing
