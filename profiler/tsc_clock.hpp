#pragma once
// tp::profiler::tsc_clock: a tp::clock read from the CPU's time-stamp counter,
// for stamping events on the allocator's fast path.
//
// Note [Event clock]
// Every event is stamped inside the allocator, so the clock read is part of
// the allocation's cost. std::chrono::steady_clock goes through
// clock_gettime (about 20 to 30 ns in a VM); the time-stamp counter is one
// instruction (about 7 to 15 ns). Where the counter is invariant (constant
// rate, running in every power state, synchronised across cores: CPUID
// 0x80000007 EDX bit 8, which Linux also requires before it uses the TSC as
// its own clock), now_ns() maps it linearly onto steady_clock, calibrated
// once at construction. The map is monotone, and over a run it drifts from
// steady_clock by the calibration's error (a few parts in 10^5: about 10 ms
// an hour), which a memory timeline can afford. Elsewhere make_event_clock()
// returns steady_clock. The allocator stores the raw counter and the log
// converts it when read (ns_of()): the conversion, a third of a recorded
// event's cost, stays off the allocator's path (Note [Allocator log]).

#include <chrono>
#include <cstdint>
#include <memory>

#include "core/clock.hpp"
#include "core/cycle_counter.hpp"

namespace tp::profiler {

/// See Note [Event clock]. Thread-safety: now_ns() may be called from any
/// thread. Construct it only where available() is true.
class tsc_clock final : public tp::clock {
 public:
  /// Whether this CPU has an invariant time-stamp counter (x86-64 only).
  static bool available() noexcept;

  /// Calibrates against steady_clock by busy-waiting `calibration`.
  explicit tsc_clock(std::chrono::nanoseconds calibration = std::chrono::milliseconds(5));

  std::int64_t now_ns() const override { return read_ns(); }
  /// now_ns() without the virtual call, for callers that know the clock's
  /// type (event_log's writers: Note [Event clock]).
  std::int64_t read_ns() const noexcept { return ns_of(read_ticks()); }
  /// The time read_ns() would have given when the counter read `ticks`:
  /// callers on a hot path store read_ticks() and convert later. Pure.
  std::int64_t ns_of(std::uint64_t ticks) const noexcept {
    // Ticks before base_ticks_ cannot occur after construction on an
    // invariant counter; the signed difference keeps the map monotone anyway.
    const auto delta = static_cast<std::int64_t>(ticks - base_ticks_);
    return base_ns_ + static_cast<std::int64_t>(static_cast<double>(delta) * ns_per_tick_);
  }
  void wait_until(std::int64_t deadline_ns) override;

  /// Nanoseconds per counter tick, as calibrated.
  double ns_per_tick() const { return ns_per_tick_; }

  /// The raw counter (0 where TP_HAVE_TSC is 0).
  static std::uint64_t read_ticks() noexcept { return read_cycle_counter(); }

 private:
  std::uint64_t base_ticks_ = 0;
  std::int64_t base_ns_ = 0;
  double ns_per_tick_ = 1.0;
};

/// The clock events are stamped with: a tsc_clock where available(), else
/// steady_clock. Throws std::bad_alloc.
std::unique_ptr<tp::clock> make_event_clock();

}  // namespace tp::profiler
