#include "profiler/memory_viz_exporter.hpp"

#include <algorithm>
#include <iterator>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator/size_policy.hpp"
#include "profiler/block_notes.hpp"
#include "profiler/pickle_writer.hpp"
#include "profiler/saved_timeline.hpp"

namespace tp::profiler {
namespace {

bool in_device_trace(event_kind k) {
  return k == event_kind::alloc || k == event_kind::free_requested || k == event_kind::free_completed ||
         k == event_kind::segment_alloc || k == event_kind::segment_free || k == event_kind::segment_map ||
         k == event_kind::segment_unmap || k == event_kind::oom;
}

/// The allocator's segments and blocks, replayed (Note [memory_viz snapshot]).
struct replayed_device {
  struct block {
    std::uint64_t size = 0, requested = 0;
    bool pending_free = false;
    std::size_t alloc_index = SIZE_MAX;  // SIZE_MAX: allocated before recording
  };
  struct segment {
    std::uint64_t size = 0, stream = 0;
    pool_kind pool = pool_kind::large;
    bool expandable = false;
    std::uint64_t base = 0;  // expandable: the reservation (0: not known, from a snapshot)
  };
  std::map<std::uint64_t, segment> segments;
  std::map<std::uint64_t, block> blocks;

  void apply(const event& e, std::size_t index) {
    switch (e.kind) {
      case event_kind::segment_alloc:
        segments[e.address] = segment{e.bytes, e.stream,
                                      e.bytes == size_policy::small_buffer ? pool_kind::small : pool_kind::large};
        break;
      case event_kind::segment_free: segments.erase(e.address); break;
      case event_kind::segment_map: map(e); break;
      case event_kind::segment_unmap: unmap(e); break;
      case event_kind::alloc:
        blocks[e.address] = block{e.bytes, static_cast<std::uint64_t>(std::max<std::int64_t>(e.detail, 0)), false,
                                  index};
        break;
      case event_kind::free_requested:
        if (const auto it = blocks.find(e.address); it != blocks.end()) it->second.pending_free = true;
        break;
      case event_kind::free_completed: blocks.erase(e.address); break;
      default: break;
    }
  }

  // An expandable segment shows each mapped range as a segment (Note
  // [Expandable segments] in caching_allocator.hpp): a mapping joins the
  // ranges of the same reservation it touches.
  static bool joins(const segment& s, const segment& m) {
    return s.expandable && s.stream == m.stream && s.pool == m.pool && (s.base == 0 || s.base == m.base);
  }
  void map(const event& e) {
    segment m{e.bytes, e.stream, e.id == 1 ? pool_kind::large : pool_kind::small, true,
              static_cast<std::uint64_t>(e.detail)};
    std::uint64_t address = e.address;
    if (auto next = segments.find(address + m.size); next != segments.end() && joins(next->second, m)) {
      m.size += next->second.size;
      segments.erase(next);
    }
    if (auto it = segments.lower_bound(address); it != segments.begin()) {
      auto prev = std::prev(it);
      if (prev->first + prev->second.size == address && joins(prev->second, m)) {
        prev->second.size += m.size;
        return;
      }
    }
    segments[address] = m;
  }
  void unmap(const event& e) {
    auto it = segments.upper_bound(e.address);
    if (it == segments.begin()) return;
    --it;
    const std::uint64_t begin = it->first, end = begin + it->second.size;
    if (e.address + e.bytes > end) return;  // not a range replayed here
    segment s = it->second;
    segments.erase(it);
    if (e.address > begin) segments[begin] = segment{e.address - begin, s.stream, s.pool, true, s.base};
    if (e.address + e.bytes < end) {
      segments[e.address + e.bytes] = segment{end - e.address - e.bytes, s.stream, s.pool, true, s.base};
    }
  }
};

class snapshot_writer {
 public:
  snapshot_writer(const timeline& t, pickle_writer& w) : t_(t), w_(w), notes_(t) {
    for (const event& e : t.events) {
      if (in_device_trace(e.kind) && e.device >= 0) devices_ = std::max(devices_, e.device + 1);
    }
    for (const auto& s : t.initial) {
      if (s.device >= 0) devices_ = std::max(devices_, s.device + 1);
      replayed_device& r = state_[s.device];
      for (const segment_snapshot& seg : s.segments) {
        r.segments[seg.address] = {seg.total_size, to_underlying(seg.stream), seg.pool, seg.expandable, 0};
        for (const block_snapshot& b : seg.blocks) {
          if (b.state == block_state::inactive) continue;
          r.blocks[b.address] = {b.size, b.requested_size, b.state == block_state::active_pending_free, SIZE_MAX};
        }
      }
    }
    for (std::size_t i = 0; i < t.events.size(); ++i) state_[t.events[i].device].apply(t.events[i], i);
    marker_pending_ = needs_unknown_marker();
  }

  void write() {
    w_.begin_object();
    w_.key("segments");
    w_.begin_array();
    for (const auto& [device, r] : state_) segments(device, r);
    w_.end_array();
    w_.key("device_traces");
    w_.begin_array();
    for (int d = 0; d < devices_; ++d) trace(static_cast<std::int16_t>(d));
    w_.end_array();
    w_.key(saved_timeline_key);
    write_saved_timeline(w_, t_);
    w_.end_object();
  }

 private:
  /// The note and base category of a block: by its alloc event's index, or,
  /// for a block live when recording began (alloc_index SIZE_MAX), by its
  /// device and address (Note [What a block holds]).
  struct described {
    profiler::category category = category::unknown;
    label_id label = 0;
    block_origin origin = block_origin::allocated;
    bool before_recording = false;
  };
  described describe(std::size_t alloc_index, std::int16_t device, std::uint64_t address) const {
    described d;
    const block_note* n = nullptr;
    if (alloc_index == SIZE_MAX) {
      d.before_recording = true;
      n = notes_.for_initial(device, address);
    } else {
      d.category = t_.events[alloc_index].category;
      d.label = t_.events[alloc_index].label;
      n = notes_.for_alloc(alloc_index);
    }
    if (n != nullptr) {
      if (n->category) d.category = *n->category;
      if (n->label != 0) d.label = n->label;
      d.origin = n->origin;
    }
    return d;
  }

  static std::string category_name(const described& d) {
    std::string name(to_string(d.category));
    if (d.origin != block_origin::allocated) name += fmt_origin(d.origin);
    return name;
  }
  static std::string fmt_origin(block_origin o) { return std::string(" (") + std::string(to_string(o)) + ")"; }

  void frame(std::string_view filename, std::string_view name) {
    w_.begin_object();
    w_.member("filename", filename);
    w_.member("line", 0);
    w_.member("name", name);
    w_.end_object();
  }

  void frames(const described& d, const std::string* why_freed) {
    w_.key("frames");
    w_.begin_array();
    std::string label = t_.label_text(d.label);
    if (label.empty()) label = "<no label>";
    if (d.before_recording) label += " (allocated before recording began)";
    frame("tensorpager " + category_name(d), label);
    if (why_freed != nullptr) frame("tensorpager runtime", *why_freed);
    w_.end_array();
  }

  void segments(std::int16_t device, const replayed_device& r) {
    for (const auto& [address, seg] : r.segments) {
      const std::uint64_t end = address + seg.size;
      std::uint64_t allocated = 0, active = 0, requested = 0;
      auto first = r.blocks.lower_bound(address);
      for (auto it = first; it != r.blocks.end() && it->first < end; ++it) {
        active += it->second.size;
        if (!it->second.pending_free) {
          allocated += it->second.size;
          requested += it->second.requested;
        }
      }
      w_.begin_object();
      w_.member("device", static_cast<int>(device));
      w_.member("address", address);
      w_.member("total_size", seg.size);
      w_.member("allocated_size", allocated);
      w_.member("active_size", active);
      w_.member("requested_size", requested);
      w_.member("stream", seg.stream);
      w_.member("segment_type", to_string(seg.pool));
      w_.member("is_expandable", seg.expandable);
      w_.key("frames");
      w_.begin_array();
      w_.end_array();
      w_.key("blocks");
      w_.begin_array();
      std::uint64_t cursor = address;
      for (auto it = first; it != r.blocks.end() && it->first < end; ++it) {
        if (it->first > cursor) inactive_block(cursor, it->first - cursor);
        const auto& b = it->second;
        w_.begin_object();
        w_.member("address", it->first);
        w_.member("size", b.size);
        w_.member("requested_size", b.pending_free ? b.size : b.requested);
        w_.member("state", b.pending_free ? "active_pending_free" : "active_allocated");
        frames(describe(b.alloc_index, device, it->first), nullptr);
        w_.end_object();
        cursor = it->first + b.size;
      }
      if (cursor < end) inactive_block(cursor, end - cursor);
      w_.end_array();
      w_.end_object();
    }
  }

  void inactive_block(std::uint64_t address, std::uint64_t size) {
    w_.begin_object();
    w_.member("address", address);
    w_.member("size", size);
    w_.member("requested_size", std::uint64_t{0});
    w_.member("state", "inactive");
    w_.key("frames");
    w_.begin_array();
    w_.end_array();
    w_.end_object();
  }

  void trace(std::int16_t device) {
    w_.begin_array();
    for (std::size_t i = 0; i < t_.events.size(); ++i) {
      const event& e = t_.events[i];
      if (e.device != device || !in_device_trace(e.kind)) continue;
      w_.begin_object();
      w_.member("action", to_string(e.kind));
      w_.member("addr", e.address);
      w_.member("size", e.bytes);
      w_.member("stream", e.stream);
      w_.member("time_us", e.t_ns / 1000);
      if (e.kind == event_kind::oom) w_.member("device_free", std::uint64_t{0});  // not known to the allocator
      std::string category = e.kind == event_kind::alloc ? category_name(describe(i, device, e.address)) : "unknown";
      if (marker_pending_) {
        category = "unknown";  // memory_viz needs "unknown" among the categories once any entry has one
        marker_pending_ = false;
      }
      w_.member("category", category);
      if (e.kind == event_kind::alloc) {
        frames(describe(i, device, e.address), nullptr);
      } else {
        w_.key("frames");
        w_.begin_array();
        if (const std::string* why = notes_.why_freed(i)) frame("tensorpager runtime", *why);
        w_.end_array();
      }
      w_.end_object();
    }
    w_.end_array();
  }

  /// Whether no trace entry of any device would say "unknown" on its own.
  bool needs_unknown_marker() const {
    for (std::size_t i = 0; i < t_.events.size(); ++i) {
      const event& e = t_.events[i];
      if (!in_device_trace(e.kind)) continue;
      if (e.kind != event_kind::alloc || category_name(describe(i, e.device, e.address)) == "unknown") return false;
    }
    return true;
  }

  const timeline& t_;
  pickle_writer& w_;
  block_notes notes_;
  int devices_ = 0;
  bool marker_pending_ = false;
  std::map<std::int16_t, replayed_device> state_;
};

}  // namespace

std::string to_memory_viz_pickle(const timeline& t) {
  std::string out;
  out.reserve(256 + t.events.size() * 160);
  pickle_writer w(out);
  snapshot_writer(t, w).write();
  w.finish();
  return out;
}

}  // namespace tp::profiler
