#include "runtime/copy_timer.hpp"

#include "core/errors.hpp"

namespace tp {

void copy_timer::collect(copy_cost_model& model) {
  std::size_t kept = 0;
  for (std::size_t i = 0; i < in_flight_.size(); ++i) {
    const timed_copy c = in_flight_[i];
    std::optional<std::int64_t> ns;
    try {
      if (enabled_ && !dev_.query_event(c.end)) {
        in_flight_[kept++] = c;
        continue;
      }
      // The end's record completed, so the start's (earlier on the same stream) has.
      if (enabled_) ns = dev_.elapsed_ns(c.start, c.end);
    } catch (const error&) {
      ns.reset();  // Note [Timing copies]: a device that fails to time is not asked again
    }
    if (ns) {
      model.observe(c.direction, c.bytes, *ns);
    } else {
      enabled_ = false;
    }
    events_.give(c.start);
    events_.give(c.end);
  }
  in_flight_.resize(kept);
}

}  // namespace tp
