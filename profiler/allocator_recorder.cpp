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
    : writer_(log.open_writer(/*stamp_ticks=*/true)), device_(device) {}

void allocator_recorder::on_event(const allocator_event& e) noexcept {
  // Filled in place: this runs inside every allocation (Note [Event clock]).
  event* ev = writer_.claim();
  if (ev == nullptr) return;
  const event_log& log = writer_.log();
  ev->t_ns = writer_.stamp();  // ticks, converted by snapshot()
  ev->stream = to_underlying(e.stream);
  ev->address = e.address;
  ev->bytes = e.bytes;
  ev->id = 0;
  ev->detail = e.kind == allocator_event_kind::free ? folded_free : static_cast<std::int64_t>(e.detail);
  ev->allocated_bytes = e.allocated_bytes;
  ev->reserved_bytes = e.reserved_bytes;
  ev->host_bytes = -1;
  ev->kind = kind_of(e.kind);
  ev->device = device_;
  if (e.kind == allocator_event_kind::alloc) {
    const alloc_context c = log.context();
    ev->category = c.category;
    ev->label = c.label;
  } else {
    ev->category = category::unknown;
    ev->label = 0;
  }
  writer_.publish();
}

}  // namespace tp::profiler
