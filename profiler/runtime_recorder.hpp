#pragma once
// tp::profiler::runtime_recorder: the runtime_observer that puts one
// memory_runtime's events into an event log, beside its allocator's.

#include <cstdint>

#include "profiler/event_log.hpp"
#include "runtime/runtime_observer.hpp"

namespace tp::profiler {

/// Observes one runtime (memory_runtime::set_observer) and records each of
/// its events (Note [Runtime events]) as the event_kind of the same name
/// (Note [Event fields]: tensor id, device block, bytes, stream, detail,
/// host bytes), stamped with the log's clock and the device index. A stall
/// is stamped at its end and carries its length, as the exporters expect.
///
/// Thread-safety: on_event() runs with the runtime's lock held and goes
/// through event_log::record(), which serialises with every other producer,
/// so one recorder may serve several runtimes. Lifetime: the log must
/// outlive the recorder, and the recorder must be unregistered
/// (set_observer(nullptr)) before it is destroyed.
class runtime_recorder final : public runtime_observer {
 public:
  runtime_recorder(event_log& log, std::int16_t device) : log_(log), device_(device) {}

  void on_event(const runtime_event& e) noexcept override;

  event_log& log() const { return log_; }
  std::int16_t device() const { return device_; }

 private:
  event_log& log_;
  const std::int16_t device_;
};

/// The profiler's kind for a runtime event kind. Pure.
event_kind to_event_kind(runtime_event_kind k) noexcept;

}  // namespace tp::profiler
