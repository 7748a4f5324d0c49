#pragma once
// tp::read_cycle_counter(): the CPU's time-stamp counter, one instruction.
// What the allocator stamps its events with while a timeline records (Note
// [Allocator log] in allocator/allocator_log.hpp); the profiler's
// tsc_clock says whether the counter is usable as a clock and converts its
// ticks to nanoseconds (Note [Event clock] in profiler/tsc_clock.hpp).

#include <cstdint>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <x86intrin.h>
#define TP_HAVE_TSC 1
#else
#define TP_HAVE_TSC 0
#endif

namespace tp {

/// The raw counter; 0 where TP_HAVE_TSC is 0.
inline std::uint64_t read_cycle_counter() noexcept {
#if TP_HAVE_TSC
  return __rdtsc();
#else
  return 0;
#endif
}

}  // namespace tp
