#include "profiler/saved_timeline.hpp"

namespace tp::profiler {

void write_saved_timeline(structured_writer& w, const timeline& t) {
  w.begin_object();
  w.member("format", saved_timeline_format);
  w.member("version", saved_timeline_version);
  w.key("event_fields");
  w.begin_array();
  for (const char* f : {"t_ns", "kind", "category", "device", "stream", "address", "bytes", "id", "detail",
                        "allocated_bytes", "reserved_bytes", "host_bytes", "label"}) {
    w.value(f);
  }
  w.end_array();
  w.key("kinds");
  w.begin_array();
  for (std::size_t k = 0; k < event_kind_count; ++k) w.value(to_string(static_cast<event_kind>(k)));
  w.end_array();
  w.key("categories");
  w.begin_array();
  for (std::size_t c = 0; c < category_count; ++c) w.value(to_string(static_cast<category>(c)));
  w.end_array();
  w.key("events");
  w.begin_array();
  for (const event& e : t.events) {
    w.begin_array();
    w.value(e.t_ns);
    w.value(static_cast<unsigned>(e.kind));
    w.value(static_cast<unsigned>(e.category));
    w.value(static_cast<int>(e.device));
    w.value(e.stream);
    w.value(e.address);
    w.value(e.bytes);
    w.value(e.id);
    w.value(e.detail);
    w.value(e.allocated_bytes);
    w.value(e.reserved_bytes);
    w.value(e.host_bytes);
    w.value(e.label);
    w.end_array();
  }
  w.end_array();
  w.key("labels");
  w.begin_array();
  for (const auto& l : t.labels) w.value(l);
  w.end_array();
  w.key("devices");
  w.begin_array();
  for (const auto& d : t.device_names) w.value(d);
  w.end_array();
  w.member("dropped", t.dropped);
  w.member("max_events", t.max_events);
  w.key("initial");
  w.begin_array();
  for (const initial_device_state& s : t.initial) {
    w.begin_object();
    w.member("device", static_cast<int>(s.device));
    w.member("budget", s.budget);
    w.key("segments");
    w.begin_array();
    for (const segment_snapshot& seg : s.segments) {
      w.begin_object();
      w.member("address", static_cast<std::uint64_t>(seg.address));
      w.member("total_size", static_cast<std::uint64_t>(seg.total_size));
      w.member("stream", static_cast<std::uint64_t>(to_underlying(seg.stream)));
      w.member("segment_type", to_string(seg.pool));
      w.key("blocks");
      w.begin_array();
      for (const block_snapshot& b : seg.blocks) {
        w.begin_object();
        w.member("address", static_cast<std::uint64_t>(b.address));
        w.member("size", static_cast<std::uint64_t>(b.size));
        w.member("requested_size", static_cast<std::uint64_t>(b.requested_size));
        w.member("state", to_string(b.state));
        w.end_object();
      }
      w.end_array();
      w.end_object();
    }
    w.end_array();
    w.end_object();
  }
  w.end_array();
  w.end_object();
}

}  // namespace tp::profiler
