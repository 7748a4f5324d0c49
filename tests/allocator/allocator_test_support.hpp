#pragma once
// Shared fixture pieces for allocator tests: a simulated device on a manual
// clock, and small helpers to read statistics.

#include <gtest/gtest.h>

#include <cstdint>
#include <memory>
#include <optional>

#include "allocator/caching_allocator.hpp"
#include "core/clock.hpp"
#include "device/simulated_device.hpp"

namespace tp::testing {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

/// A simulated device with the given capacity, on a clock the test owns.
struct simulated_rig {
  explicit simulated_rig(std::size_t capacity = 1 * GiB)
      : dev(make_options(capacity), clk) {}
  static simulated_device::options make_options(std::size_t capacity) {
    simulated_device::options o;
    o.capacity_bytes = capacity;
    return o;
  }
  manual_clock clk;
  simulated_device dev;
};

/// Options with expandable segments (Note [Expandable segments]) on, or off.
inline caching_allocator::options expandable(std::optional<std::size_t> budget = std::nullopt, bool on = true) {
  caching_allocator::options o;
  o.budget = budget;
  o.expandable_segments = on;
  return o;
}

inline std::int64_t allocated(const caching_allocator& a) { return a.stats().allocated_bytes.all().current; }
inline std::int64_t reserved(const caching_allocator& a) { return a.stats().reserved_bytes.all().current; }

/// A reclaimer with nothing left to evict: counts its calls, frees nothing.
class idle_reclaimer final : public reclaimer {
 public:
  std::size_t reclaim(std::size_t, stream_id) override {
    ++calls;
    return 0;
  }
  int calls = 0;
};

}  // namespace tp::testing
