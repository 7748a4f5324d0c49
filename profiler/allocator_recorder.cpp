#include "profiler/allocator_recorder.hpp"

namespace tp::profiler {
namespace {

event_kind kind_of(allocator_event_kind k) noexcept {
  switch (k) {
    case allocator_event_kind::alloc: return event_kind::alloc;
    case allocator_event_kind::free_requested: return event_kind::free_requested;
    case allocator_event_kind::free_completed: return event_kind::free_completed;
    case allocator_event_kind::segment_alloc: return event_kind::segment_alloc;
    case allocator_event_kind::segment_free: return event_kind::segment_free;
    case allocator_event_kind::oom: return event_kind::oom;
    case allocator_event_kind::budget_change: return event_kind::budget_change;
    case allocator_event_kind::reclaim: return event_kind::reclaim;
    case allocator_event_kind::free: return event_kind::free_requested;  // Note [Folded frees]
  }
  return event_kind::alloc;
}

}  // namespace

allocator_recorder::allocator_recorder(event_log& log, std::int16_t device)
    : writer_(log.open_writer()), device_(device) {}

void allocator_recorder::on_event(const allocator_event& e) noexcept {
  event_log& log = writer_.log();
  event ev;
  ev.t_ns = log.now_ns();
  ev.kind = kind_of(e.kind);
  ev.device = device_;
  ev.stream = to_underlying(e.stream);
  ev.address = e.address;
  ev.bytes = e.bytes;
  ev.detail = e.kind == allocator_event_kind::free ? folded_free : static_cast<std::int64_t>(e.detail);
  ev.allocated_bytes = e.allocated_bytes;
  ev.reserved_bytes = e.reserved_bytes;
  if (ev.kind == event_kind::alloc) {
    const alloc_context c = log.context();
    ev.category = c.category;
    ev.label = c.label;
  }
  writer_.append(ev);
}

}  // namespace tp::profiler
