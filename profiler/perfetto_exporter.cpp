#include "profiler/perfetto_exporter.hpp"

#include <algorithm>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "profiler/json_writer.hpp"
#include "profiler/saved_timeline.hpp"

namespace tp::profiler {
namespace {

constexpr int tensorpager_pid = 0;
constexpr int steps_tid = 0;

/// Writes the trace events of Note [Trace layout] in time order.
class trace_builder {
 public:
  trace_builder(const timeline& t, json_writer& w)
      : t_(t), w_(w), t0_(t.events.empty() ? 0 : t.events.front().t_ns) {
    for (const event& e : t.events) {
      if (e.kind == event_kind::step) continue;
      auto& streams = streams_[e.device];
      if (std::find(streams.begin(), streams.end(), e.stream) == streams.end()) streams.push_back(e.stream);
    }
  }

  void write() {
    metadata();
    for (const event& e : t_.events) on_event(e);
    const std::int64_t last = t_.events.empty() ? t0_ : t_.events.back().t_ns;
    for (const auto& [key, open] : open_) {
      begin_event("e", open.name, open.pid, open.tid, last);
      w_.member("cat", open.cat);
      w_.member("id", key.second);
      w_.key("args");
      w_.begin_object();
      w_.member("unfinished", true);
      w_.end_object();
      w_.end_object();
    }
    if (t_.dropped > 0) {
      begin_event("i", "events dropped: log full", tensorpager_pid, steps_tid, last);
      w_.member("s", "g");
      w_.key("args");
      w_.begin_object();
      w_.member("dropped_events", t_.dropped);
      w_.member("max_events", t_.max_events);
      w_.end_object();
      w_.end_object();
    }
  }

  std::uint64_t unmatched_ends() const { return unmatched_ends_; }

 private:
  struct device_state {
    std::int64_t allocated = -1, reserved = -1, host = -1, budget = -2;
    bool started = false;
  };
  struct open_slice {
    std::string name, cat;
    int pid = 0, tid = 0;
  };

  static int pid_of(std::int16_t device) { return device + 1; }

  int tid_of(const event& e) const {
    const auto& streams = streams_.at(e.device);
    return 1 + static_cast<int>(std::find(streams.begin(), streams.end(), e.stream) - streams.begin());
  }

  void begin_event(const char* ph, std::string_view name, int pid, int tid, std::int64_t t_ns) {
    w_.begin_object();
    w_.member("ph", ph);
    w_.member("name", name);
    w_.member("pid", pid);
    w_.member("tid", tid);
    w_.key("ts");
    w_.fixed(static_cast<double>(t_ns - t0_) / 1000.0, 3);
  }

  void name_metadata(const char* what, int pid, int tid, std::string_view name) {
    w_.begin_object();
    w_.member("ph", "M");
    w_.member("name", what);
    w_.member("pid", pid);
    w_.member("tid", tid);
    w_.key("args");
    w_.begin_object();
    w_.member("name", name);
    w_.end_object();
    w_.end_object();
  }

  void metadata() {
    name_metadata("process_name", tensorpager_pid, steps_tid, "tensorpager");
    name_metadata("thread_name", tensorpager_pid, steps_tid, "steps");
    for (const auto& [device, streams] : streams_) {
      const auto d = static_cast<std::size_t>(device);
      std::string name = d < t_.device_names.size() && !t_.device_names[d].empty() ? t_.device_names[d]
                                                                                   : "device " + std::to_string(device);
      name_metadata("process_name", pid_of(device), 0, name);
      for (std::size_t i = 0; i < streams.size(); ++i) {
        name_metadata("thread_name", pid_of(device), static_cast<int>(i + 1),
                      streams[i] == 0 ? std::string("default stream") : "stream " + std::to_string(streams[i]));
      }
    }
  }

  void counter(std::int16_t device, const char* name, std::int64_t t_ns, std::int64_t value) {
    begin_event("C", name, pid_of(device), 0, t_ns);
    w_.key("args");
    w_.begin_object();
    w_.member("bytes", value);
    w_.end_object();
    w_.end_object();
  }

  void update_counters(const event& e) {
    device_state& s = state_[e.device];
    if (!s.started) {
      s.started = true;
      for (const auto& init : t_.initial) {
        if (init.device == e.device && init.budget >= 0) {
          s.budget = init.budget;
          counter(e.device, "budget", e.t_ns, init.budget);
        }
      }
    }
    if (e.allocated_bytes >= 0 && e.allocated_bytes != s.allocated) {
      s.allocated = e.allocated_bytes;
      counter(e.device, "allocated", e.t_ns, s.allocated);
    }
    if (e.reserved_bytes >= 0 && e.reserved_bytes != s.reserved) {
      s.reserved = e.reserved_bytes;
      counter(e.device, "reserved", e.t_ns, s.reserved);
    }
    if (e.host_bytes >= 0 && e.host_bytes != s.host) {
      s.host = e.host_bytes;
      counter(e.device, "host (offloaded)", e.t_ns, s.host);
    }
    if (e.kind == event_kind::budget_change) {
      const std::int64_t b = static_cast<std::int64_t>(e.bytes);
      if (b != s.budget) {
        s.budget = b;
        counter(e.device, "budget", e.t_ns, b);
      }
    }
  }

  void instant(const event& e, std::string_view name) {
    begin_event("i", name, pid_of(e.device), tid_of(e), e.t_ns);
    w_.member("s", "t");
    w_.key("args");
    w_.begin_object();
    switch (e.kind) {
      case event_kind::oom: w_.member("requested_bytes", e.bytes); break;
      case event_kind::reclaim:
        w_.member("asked_bytes", e.bytes);
        w_.member("freed_bytes", e.detail);
        break;
      case event_kind::device_sync:
        w_.member("bytes_given_back", e.bytes);
        w_.member("whole_device", e.detail == 1);
        break;
      case event_kind::stall:
        w_.member("duration_ns", e.detail);
        w_.member("tensor", e.id);
        break;
      case event_kind::eviction:
        w_.member("tensor", e.id);
        w_.member("bytes", e.bytes);
        w_.member("dropped", e.detail == 1);
        break;
      default:
        w_.member("bytes", e.bytes);
        w_.member("address", e.address);
    }
    if (e.label != 0) w_.member("label", t_.label_text(e.label));
    w_.end_object();
    w_.end_object();
  }

  void async(const event& e, const char* name, bool begin) {
    const std::string cat = std::string("tensorpager.") + name;
    const auto key = std::make_pair(std::string(name), e.id);
    if (!begin) {
      const auto it = open_.find(key);
      if (it == open_.end()) {
        ++unmatched_ends_;
        return;
      }
      begin_event("e", name, it->second.pid, it->second.tid, e.t_ns);
      open_.erase(it);
    } else {
      open_[key] = open_slice{name, cat, pid_of(e.device), tid_of(e)};
      begin_event("b", name, pid_of(e.device), tid_of(e), e.t_ns);
    }
    w_.member("cat", cat);
    w_.member("id", e.id);
    w_.key("args");
    w_.begin_object();
    w_.member("tensor", e.id);
    w_.member("bytes", e.bytes);
    if (e.label != 0) w_.member("label", t_.label_text(e.label));
    w_.end_object();
    w_.end_object();
  }

  void on_event(const event& e) {
    if (e.kind == event_kind::step) {
      const std::int64_t from = last_step_ns_.value_or(t0_);
      begin_event("X", "step " + std::to_string(e.detail), tensorpager_pid, steps_tid, from);
      w_.key("dur");
      w_.fixed(static_cast<double>(e.t_ns - from) / 1000.0, 3);
      w_.end_object();
      last_step_ns_ = e.t_ns;
      return;
    }
    update_counters(e);
    switch (e.kind) {
      case event_kind::segment_alloc: instant(e, "segment_alloc"); break;
      case event_kind::segment_free: instant(e, "segment_free"); break;
      case event_kind::segment_map: instant(e, "segment_map"); break;
      case event_kind::segment_unmap: instant(e, "segment_unmap"); break;
      case event_kind::oom: instant(e, "out of memory"); break;
      case event_kind::reclaim: instant(e, "reclaim"); break;
      case event_kind::device_sync: instant(e, "device sync"); break;
      case event_kind::stall: instant(e, "stall"); break;
      case event_kind::eviction: instant(e, "eviction"); break;
      case event_kind::offload_begin: async(e, "offload", true); break;
      case event_kind::offload_end: async(e, "offload", false); break;
      case event_kind::prefetch_begin: async(e, "prefetch", true); break;
      case event_kind::prefetch_end: async(e, "prefetch", false); break;
      case event_kind::recompute_begin: async(e, "recompute", true); break;
      case event_kind::recompute_end: async(e, "recompute", false); break;
      default: break;
    }
  }

  const timeline& t_;
  json_writer& w_;
  const std::int64_t t0_;
  std::map<std::int16_t, std::vector<std::uint64_t>> streams_;
  std::map<std::int16_t, device_state> state_;
  std::map<std::pair<std::string, std::uint64_t>, open_slice> open_;
  std::optional<std::int64_t> last_step_ns_;
  std::uint64_t unmatched_ends_ = 0;
};

}  // namespace

std::string to_perfetto_json(const timeline& t) {
  std::string out;
  out.reserve(256 + t.events.size() * 120);
  json_writer w(out);
  w.begin_object();
  w.member("displayTimeUnit", "ms");
  w.key("traceEvents");
  w.begin_array();
  trace_builder b(t, w);
  b.write();
  w.end_array();
  w.key("otherData");
  w.begin_object();
  w.member("producer", "tensorpager");
  w.member("t0_ns", t.events.empty() ? std::int64_t{0} : t.events.front().t_ns);
  w.member("events", static_cast<std::uint64_t>(t.events.size()));
  w.member("dropped_events", t.dropped);
  w.member("max_events", t.max_events);
  w.member("unmatched_ends", b.unmatched_ends());
  w.member("note", "counters in bytes; budget 0 means no budget; categories are inferred (docs/timelines.md)");
  w.end_object();
  w.key(saved_timeline_key);
  write_saved_timeline(w, t);
  w.end_object();
  return out;
}

}  // namespace tp::profiler
