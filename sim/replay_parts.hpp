#pragma once
// Two small parts of the simulator's replay (simulator.cpp): the host's
// clock and the guard that holds an operator's pins.

#include <atomic>
#include <cstdint>
#include <exception>
#include <vector>

#include "core/clock.hpp"
#include "runtime/runtime.hpp"

namespace tp::sim::detail {

// The host's clock (Note [Simulated time]): a manual clock that also sums
// the time the host spent blocked (every wait_until that moved it).
class host_clock final : public clock {
 public:
  std::int64_t now_ns() const override { return inner_.now_ns(); }
  void wait_until(std::int64_t deadline_ns) override {
    const std::int64_t now = inner_.now_ns();
    if (deadline_ns > now) waited_ns_.fetch_add(deadline_ns - now);
    inner_.advance_to(deadline_ns);
  }
  void advance(std::int64_t delta_ns) { inner_.advance(delta_ns); }
  std::int64_t waited_ns() const { return waited_ns_.load(); }

 private:
  manual_clock inner_;
  std::atomic<std::int64_t> waited_ns_{0};
};

// Unpins what an operator pinned when it has run, or when it throws.
class pin_guard {
 public:
  explicit pin_guard(memory_runtime& rt) : rt_(rt) {}
  ~pin_guard() {
    for (tensor_id id : pinned_) {
      try {
        rt_.unpin(id);
      } catch (...) {
        std::terminate();  // unpin of a tensor this guard pinned cannot fail: a simulator bug
      }
    }
  }
  pin_guard(const pin_guard&) = delete;
  pin_guard& operator=(const pin_guard&) = delete;
  void pin(tensor_id id) {
    rt_.pin(id);
    pinned_.push_back(id);
  }
  const std::vector<tensor_id>& pinned() const { return pinned_; }

 private:
  memory_runtime& rt_;
  std::vector<tensor_id> pinned_;
};

}  // namespace tp::sim::detail
