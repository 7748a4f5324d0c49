#include "profiler/runtime_recorder.hpp"

namespace tp::profiler {

event_kind to_event_kind(runtime_event_kind k) noexcept {
  switch (k) {
    case runtime_event_kind::eviction: return event_kind::eviction;
    case runtime_event_kind::offload_begin: return event_kind::offload_begin;
    case runtime_event_kind::offload_end: return event_kind::offload_end;
    case runtime_event_kind::prefetch_begin: return event_kind::prefetch_begin;
    case runtime_event_kind::prefetch_end: return event_kind::prefetch_end;
    case runtime_event_kind::recompute_begin: return event_kind::recompute_begin;
    case runtime_event_kind::recompute_end: return event_kind::recompute_end;
    case runtime_event_kind::stall: return event_kind::stall;
    case runtime_event_kind::step: return event_kind::step;
  }
  return event_kind::step;
}

void runtime_recorder::on_event(const runtime_event& e) noexcept {
  event ev;
  ev.kind = to_event_kind(e.kind);
  ev.device = device_;
  ev.id = to_underlying(e.tensor);
  ev.address = e.address;
  ev.bytes = e.bytes;
  ev.stream = to_underlying(e.stream);
  ev.detail = e.detail;
  ev.host_bytes = e.host_bytes;
  log_.record(ev);
}

}  // namespace tp::profiler
