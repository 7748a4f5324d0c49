#pragma once
// tp::profiler::allocator_recorder: the allocator_observer that puts one
// caching allocator's events into an event log.

#include <cstdint>

#include "allocator/allocator_observer.hpp"
#include "profiler/event_log.hpp"

namespace tp::profiler {

/// Observes one allocator (caching_allocator::set_observer) and appends each
/// of its events to a writer of its own, stamped with the log's clock, the
/// device index, and for allocations the log's current context.
///
/// Thread-safety: on_event() runs with the observed allocator's lock held
/// (Note [Allocator events]), which is what makes its single writer safe
/// (Note [Single-producer writers]); so one recorder serves exactly one
/// allocator. Lifetime: the log must outlive the recorder, and the recorder
/// must be unregistered (set_observer(nullptr)) before it is destroyed.
class allocator_recorder final : public allocator_observer {
 public:
  /// Opens a writer of log's. Throws std::bad_alloc.
  allocator_recorder(event_log& log, std::int16_t device);

  void on_event(const allocator_event& e) noexcept override;

  event_log& log() const { return writer_.log(); }
  std::int16_t device() const { return device_; }

 private:
  event_log::writer& writer_;
  const std::int16_t device_;
};

}  // namespace tp::profiler
