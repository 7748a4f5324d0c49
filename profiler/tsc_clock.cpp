#include "profiler/tsc_clock.hpp"

#include <thread>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <cpuid.h>
#include <x86intrin.h>
#define TP_HAVE_TSC 1
#else
#define TP_HAVE_TSC 0
#endif

namespace tp::profiler {
namespace {

std::uint64_t read_ticks() noexcept {
#if TP_HAVE_TSC
  return __rdtsc();
#else
  return 0;
#endif
}

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
    const std::uint64_t t0 = read_ticks();
    const std::int64_t ns = steady_ns();
    const std::uint64_t t1 = read_ticks();
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

std::int64_t tsc_clock::now_ns() const {
  // Ticks before base_ticks_ cannot occur after construction on an
  // invariant counter; the signed difference keeps the map monotone anyway.
  const auto delta = static_cast<std::int64_t>(read_ticks() - base_ticks_);
  return base_ns_ + static_cast<std::int64_t>(static_cast<double>(delta) * ns_per_tick_);
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
