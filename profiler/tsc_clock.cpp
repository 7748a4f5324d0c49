#include "profiler/tsc_clock.hpp"

#include <thread>

#if TP_HAVE_TSC
#include <cpuid.h>
#endif

namespace tp::profiler {
namespace {

std::int64_t steady_ns() noexcept {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

/// A (ticks, ns) pair read as close together as possible: the ns reading
/// bracketed by two tick readings, keeping the tightest of a few tries.
std::pair<std::uint64_t, std::int64_t> paired_reading() noexcept {
  std::uint64_t best_width = UINT64_MAX;
  std::pair<std::uint64_t, std::int64_t> best{};
  for (int i = 0; i < 5; ++i) {
    const std::uint64_t t0 = tsc_clock::read_ticks();
    const std::int64_t ns = steady_ns();
    const std::uint64_t t1 = tsc_clock::read_ticks();
    if (t1 - t0 < best_width) {
      best_width = t1 - t0;
      best = {t0 + (t1 - t0) / 2, ns};
    }
  }
  return best;
}

}  // namespace

bool tsc_clock::available() noexcept {
#if TP_HAVE_TSC
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (__get_cpuid(0x80000000u, &a, &b, &c, &d) == 0 || a < 0x80000007u) return false;
  if (__get_cpuid(0x80000007u, &a, &b, &c, &d) == 0) return false;
  return (d & (1u << 8)) != 0;
#else
  return false;
#endif
}

tsc_clock::tsc_clock(std::chrono::nanoseconds calibration) {
  const auto [ticks0, ns0] = paired_reading();
  const std::int64_t until = ns0 + calibration.count();
  while (steady_ns() < until) {
  }
  const auto [ticks1, ns1] = paired_reading();
  base_ticks_ = ticks1;
  base_ns_ = ns1;
  if (ticks1 > ticks0 && ns1 > ns0) {
    ns_per_tick_ = static_cast<double>(ns1 - ns0) / static_cast<double>(ticks1 - ticks0);
  }
}

void tsc_clock::wait_until(std::int64_t deadline_ns) {
  const std::int64_t delta = deadline_ns - now_ns();
  if (delta > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(delta));
}

std::unique_ptr<tp::clock> make_event_clock() {
  if (tsc_clock::available()) return std::make_unique<tsc_clock>();
  return std::make_unique<steady_clock>();
}

}  // namespace tp::profiler
