#pragma once
// Time as a dependency: components read time through tp::clock so that tests
// and the trace simulator can run on a clock they control (tcmalloc's habit).

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

namespace tp {

/// A source of monotonic time in nanoseconds. Implementations are thread-safe.
class clock {
 public:
  virtual ~clock() = default;
  /// Current time. Never decreases.
  virtual std::int64_t now_ns() const = 0;
  /// Blocks the caller until now_ns() >= deadline_ns. On a manual clock this
  /// moves time forward instead (the host "waited").
  virtual void wait_until(std::int64_t deadline_ns) = 0;
};

/// Wall time from std::chrono::steady_clock.
class steady_clock final : public clock {
 public:
  std::int64_t now_ns() const override {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(
               std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  void wait_until(std::int64_t deadline_ns) override {
    const std::int64_t delta = deadline_ns - now_ns();
    if (delta > 0) std::this_thread::sleep_for(std::chrono::nanoseconds(delta));
  }
};

/// Time that moves only when told to: by advance(), or by wait_until(), which
/// jumps to the deadline. Used by tests and by the trace simulator.
class manual_clock final : public clock {
 public:
  explicit manual_clock(std::int64_t start_ns = 0) : now_(start_ns) {}
  std::int64_t now_ns() const override { return now_.load(std::memory_order_acquire); }
  void wait_until(std::int64_t deadline_ns) override { advance_to(deadline_ns); }
  /// Moves time forward by delta_ns (>= 0).
  void advance(std::int64_t delta_ns) { now_.fetch_add(std::max<std::int64_t>(delta_ns, 0)); }
  /// Moves time forward to t_ns; earlier times are ignored.
  void advance_to(std::int64_t t_ns) {
    std::int64_t cur = now_.load(std::memory_order_acquire);
    while (cur < t_ns && !now_.compare_exchange_weak(cur, t_ns)) {
    }
  }

 private:
  std::atomic<std::int64_t> now_;
};

}  // namespace tp
