#pragma once
// copy_timer: times the transfer engine's copies on the device and teaches
// the copy cost model what they took (Note [Copy cost model] in
// copy_cost_model.hpp).
//
// Note [Timing copies]
// A copy's time must come from the device, not the host: on CUDA the host
// enqueues a copy long before the copy stream reaches it (behind the compute
// it waits for and the copies before it), and learns of its end only when it
// next polls. So the timer records an event that keeps time on the copy's
// stream just before the copy, after the waits the copy needs (the copy
// starts when that record completes), and one just after it, and reads the
// device's time between them once the second has completed (collect, from
// the engine's poll). Copies of both directions share the link, so a copy
// that overlaps one the other way is timed as it ran: slower. At most
// max_in_flight copies are timed at once, the others not (a sample is
// enough, and each timed copy costs two records). A device that keeps no
// time (device::elapsed_ns nullopt: the CPU adapter's simulated device) or
// fails to read it is not asked again, and the model keeps its seed.

#include <cstddef>
#include <vector>

#include "device/device.hpp"
#include "device/event_pool.hpp"
#include "runtime/copy_cost_model.hpp"

namespace tp {

/// Thread-safety: none; the transfer engine calls it under the runtime's
/// lock. Lifetime: dev must outlive it; its events are destroyed with it,
/// records still pending included (they complete unobserved).
class copy_timer {
 public:
  static constexpr std::size_t max_in_flight = 16;

  explicit copy_timer(device& dev) : dev_(dev), events_(dev, /*timing=*/true) {}

  /// Runs copy(), which enqueues one copy of bytes in direction d on
  /// stream, between two timing records when a slot is free (Note [Timing
  /// copies]). Throws what copy() and device::record_event throw, timing
  /// nothing then.
  template <class Copy>
  void time(stream_id stream, copy_direction d, std::size_t bytes, Copy&& copy) {
    if (!enabled_ || in_flight_.size() >= max_in_flight) {
      copy();
      return;
    }
    const event_id start = events_.take();
    const event_id end = events_.take();
    try {
      dev_.record_event(start, stream);
      copy();
      dev_.record_event(end, stream);
    } catch (...) {
      events_.give(start);
      events_.give(end);
      throw;
    }
    in_flight_.push_back({start, end, d, bytes});
  }

  /// Teaches model every timed copy that has completed. Never throws for a
  /// device that cannot time: timing is turned off instead.
  void collect(copy_cost_model& model);

  /// Copies timed and not yet collected.
  std::size_t in_flight() const { return in_flight_.size(); }
  /// False once the device kept no time for a copy.
  bool enabled() const { return enabled_; }

 private:
  struct timed_copy {
    event_id start;
    event_id end;
    copy_direction direction;
    std::size_t bytes;
  };

  device& dev_;
  event_pool events_;
  std::vector<timed_copy> in_flight_;
  bool enabled_ = true;
};

}  // namespace tp
