#include "profiler/memory_viz_exporter.hpp"

#include <algorithm>
#include <map>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "allocator/size_policy.hpp"
#include "profiler/pickle_writer.hpp"
#include "profiler/saved_timeline.hpp"

namespace tp::profiler {
namespace {

bool in_device_trace(event_kind k) {
  return k == event_kind::alloc || k == event_kind::free_requested || k == event_kind::free_completed ||
         k == event_kind::segment_alloc || k == event_kind::segment_free || k == event_kind::oom;
}

using block_key = std::pair<std::int16_t, std::uint64_t>;  // device, address

/// What later events say about each alloc and free_requested event (by index
/// into timeline::events): tags and runtime events that came after the alloc.
struct annotations {
  struct alloc_note {
    profiler::category category = category::unknown;
    label_id label = 0;
    const char* origin = nullptr;  // "prefetched", "recomputed"
  };
  std::unordered_map<std::size_t, alloc_note> allocs;
  std::unordered_map<std::size_t, std::string> frees;  // why the runtime freed it

  explicit annotations(const timeline& t) {
    std::map<block_key, std::size_t> live;
    std::map<block_key, std::string> evicted;
    for (std::size_t i = 0; i < t.events.size(); ++i) {
      const event& e = t.events[i];
      const block_key key{e.device, e.address};
      switch (e.kind) {
        case event_kind::alloc:
          live[key] = i;
          allocs[i] = alloc_note{e.category, e.label, nullptr};
          break;
        case event_kind::free_requested:
          live.erase(key);
          if (const auto it = evicted.find(key); it != evicted.end()) {
            frees[i] = std::move(it->second);
            evicted.erase(it);
          }
          break;
        case event_kind::tag:
          if (const auto it = live.find(key); it != live.end()) {
            allocs[it->second].category = e.category;
            if (e.label != 0) allocs[it->second].label = e.label;
          }
          break;
        case event_kind::prefetch_begin:
        case event_kind::prefetch_end:
        case event_kind::recompute_end:
          if (const auto it = live.find(key); e.address != 0 && it != live.end()) {
            allocs[it->second].origin = e.kind == event_kind::recompute_end ? "recomputed" : "prefetched";
          }
          break;
        case event_kind::eviction:
          if (e.address != 0) {
            evicted[key] = (e.detail == 1 ? "dropped for recompute (tensor " : "offloaded to host (tensor ") +
                           std::to_string(e.id) + ")";
          }
          break;
        default:
          break;
      }
    }
  }
};

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
        r.segments[seg.address] = {seg.total_size, to_underlying(seg.stream), seg.pool};
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
  std::string category_name(std::size_t alloc_index) const {
    const auto it = notes_.allocs.find(alloc_index);
    if (it == notes_.allocs.end()) return "unknown";
    std::string name(to_string(it->second.category));
    if (it->second.origin != nullptr) name += std::string(" (") + it->second.origin + ")";
    return name;
  }

  void frame(std::string_view filename, std::string_view name) {
    w_.begin_object();
    w_.member("filename", filename);
    w_.member("line", 0);
    w_.member("name", name);
    w_.end_object();
  }

  void frames(std::size_t alloc_index, const std::string* why_freed) {
    w_.key("frames");
    w_.begin_array();
    if (const auto it = notes_.allocs.find(alloc_index); it != notes_.allocs.end()) {
      const std::string& label = t_.label_text(it->second.label);
      frame("tensorpager " + category_name(alloc_index), label.empty() ? "<no label>" : label);
    }
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
      w_.member("is_expandable", false);
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
        frames(b.alloc_index, nullptr);
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
      std::string category = e.kind == event_kind::alloc ? category_name(i) : "unknown";
      if (marker_pending_) {
        category = "unknown";  // memory_viz needs "unknown" among the categories once any entry has one
        marker_pending_ = false;
      }
      w_.member("category", category);
      if (e.kind == event_kind::alloc) {
        frames(i, nullptr);
      } else {
        const auto it = notes_.frees.find(i);  // only free_requested events have notes
        w_.key("frames");
        w_.begin_array();
        if (it != notes_.frees.end()) frame("tensorpager runtime", it->second);
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
      if (e.kind != event_kind::alloc || category_name(i) == "unknown") return false;
    }
    return true;
  }

  const timeline& t_;
  pickle_writer& w_;
  annotations notes_;
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
