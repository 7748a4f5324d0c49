#pragma once
// A caching allocator on a simulated device, recorded into an event log, all
// on one manual clock the test moves.

#include <gtest/gtest.h>

#include <cstddef>
#include <cstdint>

#include "allocator/caching_allocator.hpp"
#include "core/clock.hpp"
#include "device/simulated_device.hpp"
#include "profiler/allocator_recorder.hpp"
#include "profiler/event_log.hpp"

namespace tp::profiler::testing {

inline constexpr std::size_t KiB = std::size_t{1} << 10;
inline constexpr std::size_t MiB = std::size_t{1} << 20;
inline constexpr std::size_t GiB = std::size_t{1} << 30;

/// Owns everything; the recorder is attached for the rig's lifetime.
struct recorded_rig {
  explicit recorded_rig(std::size_t max_events = 1 << 16, std::size_t capacity = 1 * GiB)
      : dev(device_options(capacity), clk),
        alloc(dev),
        log(clk, log_options(max_events)),
        recorder(log.open_allocator_recorder(0)) {
    alloc.set_log(&recorder);
  }
  ~recorded_rig() { alloc.set_log(nullptr); }
  recorded_rig(const recorded_rig&) = delete;
  recorded_rig& operator=(const recorded_rig&) = delete;

  static simulated_device::options device_options(std::size_t capacity) {
    simulated_device::options o;
    o.capacity_bytes = capacity;
    return o;
  }
  static event_log::options log_options(std::size_t max_events) {
    event_log::options o;
    o.max_events = max_events;
    o.chunk_events = 64;  // many chunks, so chunk boundaries are exercised
    return o;
  }
  /// Moves the clock one microsecond, so every operation has its own time.
  void tick() { clk.advance(1000); }

  manual_clock clk;
  simulated_device dev;
  caching_allocator alloc;
  event_log log;
  allocator_recorder& recorder;  // owned by log
};

/// A runtime event as the runtime will record it (Note [Event fields]).
inline event runtime_event(event_kind k, std::uint64_t tensor, std::uint64_t bytes, std::uint64_t address = 0) {
  event e;
  e.kind = k;
  e.id = tensor;
  e.bytes = bytes;
  e.address = address;
  return e;
}

}  // namespace tp::profiler::testing
