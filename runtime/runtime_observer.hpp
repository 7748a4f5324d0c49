#pragma once
// What the runtime tells an observer (the profiler's runtime_recorder) as it
// moves tensors: the runtime's half of a memory timeline, as
// allocator_observer.hpp is the allocator's.
//
// Note [Runtime events]
// Each kind marks one state change of a tracked tensor, at the point where
// memory_runtime or transfer_engine makes it:
//   eviction         reclaim() or a proactive offload chose the tensor as a
//                    victim: detail 1 when it was dropped (to recompute),
//                    0 when its offload started (after that offload_begin)
//   offload_begin    a device -> host copy started (transfer_engine)
//   offload_end      it completed and the device storage was released, or
//                    it ended early: taken back (ensure_resident while
//                    offloading) or untracked; detail 1 for those, 0 when
//                    the tensor is now on the host
//   prefetch_begin   a host -> device copy started into new device storage
//   prefetch_end     the tensor is resident again (or was untracked in
//                    flight: detail 1)
//   recompute_begin  / recompute_end around storage_binding::recompute()
//   stall            ensure_resident recomputed the tensor (detail: the
//                    host time the recompute took, on the runtime's clock),
//                    or found its copy not yet arrived: the compute stream
//                    waits for it, the host does not, and the event comes
//                    once a later poll sees the copy done, with detail the
//                    time from the access to that poll (Note [Late copies]
//                    in runtime.hpp)
//   step             memory_runtime::step(); detail is the step's index
// Every begin has its end (recompute_end has detail 1 when recompute()
// threw). address is the device block the event concerns (0 where there is
// none: a dropped tensor before recompute_end, step); stream is the stream that did the work (the offload or prefetch
// stream, the tensor's compute stream for recompute and stall). host_bytes
// is what the pinned host pool has handed out after the event, or -1 where
// the event does not change it. Events come with the runtime's lock held,
// in the order the runtime made the changes.

#include <cstddef>
#include <cstdint>

#include "device/device.hpp"
#include "runtime/managed_tensor.hpp"

namespace tp {

enum class runtime_event_kind : std::uint8_t {
  eviction,
  offload_begin,
  offload_end,
  prefetch_begin,
  prefetch_end,
  recompute_begin,
  recompute_end,
  stall,
  step,
};

/// "eviction", "offload_begin", ...: as the profiler's event kinds. Pure.
constexpr const char* to_string(runtime_event_kind k) noexcept {
  switch (k) {
    case runtime_event_kind::eviction: return "eviction";
    case runtime_event_kind::offload_begin: return "offload_begin";
    case runtime_event_kind::offload_end: return "offload_end";
    case runtime_event_kind::prefetch_begin: return "prefetch_begin";
    case runtime_event_kind::prefetch_end: return "prefetch_end";
    case runtime_event_kind::recompute_begin: return "recompute_begin";
    case runtime_event_kind::recompute_end: return "recompute_end";
    case runtime_event_kind::stall: return "stall";
    case runtime_event_kind::step: return "step";
  }
  return "unknown";
}

/// One event of Note [Runtime events]. A plain value.
struct runtime_event {
  runtime_event_kind kind = runtime_event_kind::step;
  tensor_id tensor{};       ///< 0 for step
  std::uintptr_t address = 0;
  std::size_t bytes = 0;    ///< the tensor's bytes; 0 for stall and step
  stream_id stream{};
  std::int64_t detail = 0;
  std::int64_t host_bytes = -1;
};

/// Receives the runtime's events (memory_runtime::set_observer). Called with
/// the runtime's lock held, on the thread that caused the event: it must be
/// cheap, must not throw, and must not call the runtime or allocate through
/// the runtime's allocator (which could re-enter reclaim()). Not owned.
class runtime_observer {
 public:
  virtual ~runtime_observer() = default;
  virtual void on_event(const runtime_event& e) noexcept = 0;
};

}  // namespace tp
