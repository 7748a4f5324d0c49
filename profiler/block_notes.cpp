#include "profiler/block_notes.hpp"

#include <map>

namespace tp::profiler {
namespace {

using block_key = std::pair<std::int16_t, std::uint64_t>;  // device, address

/// A live block: the index of its alloc event, or none for a block of the
/// initial state.
struct live_entry {
  std::optional<std::size_t> alloc;
  profiler::category category = category::unknown;  ///< the alloc event's
  label_id label = 0;
};

}  // namespace

block_notes::block_notes(const timeline& t) {
  std::map<block_key, live_entry> live;
  for (const auto& s : t.initial) {
    for (const auto& seg : s.segments) {
      for (const auto& b : seg.blocks) {
        if (b.state == block_state::active_allocated) live[{s.device, b.address}] = live_entry{};
      }
    }
  }
  auto note_of = [&](const block_key& key, const live_entry& entry) -> block_note& {
    return entry.alloc ? by_alloc_[*entry.alloc] : initial_[key];
  };
  // What each evicted tensor's block held, by tensor id; a restore takes it.
  std::unordered_map<std::uint64_t, block_note> evicted;
  std::map<block_key, std::string> pending_why;
  for (std::size_t i = 0; i < t.events.size(); ++i) {
    const event& e = t.events[i];
    const block_key key{e.device, e.address};
    switch (e.kind) {
      case event_kind::alloc:
        live[key] = live_entry{i, e.category, e.label};
        continue;
      case event_kind::free_requested:
        live.erase(key);
        if (const auto it = pending_why.find(key); it != pending_why.end()) {
          why_freed_[i] = std::move(it->second);
          pending_why.erase(it);
        }
        continue;
      default:
        break;
    }
    if (e.address == 0) continue;
    const auto it = live.find(key);
    if (it == live.end()) continue;
    block_note& n = note_of(key, it->second);
    switch (e.kind) {
      case event_kind::tag:
        n.category = e.category;
        if (e.label != 0) n.label = e.label;
        break;
      case event_kind::eviction: {
        block_note held = n;
        if (!held.category) held.category = it->second.category;
        if (held.label == 0) held.label = it->second.label;
        held.origin = block_origin::allocated;
        evicted[e.id] = held;
        pending_why[key] = (e.detail == 1 ? "dropped for recompute (tensor " : "offloaded to host (tensor ") +
                           std::to_string(e.id) + ")";
        break;
      }
      case event_kind::prefetch_begin:
      case event_kind::prefetch_end:
      case event_kind::recompute_end:
        n.origin = e.kind == event_kind::recompute_end ? block_origin::recomputed : block_origin::prefetched;
        if (const auto was = evicted.find(e.id); was != evicted.end()) {
          // A tag on the restored block (a later event) still wins over this.
          if (!n.category || *n.category == category::unknown) n.category = was->second.category;
          if (n.label == 0) n.label = was->second.label;
        }
        break;
      default:
        break;
    }
  }
}

const block_note* block_notes::for_alloc(std::size_t index) const {
  const auto it = by_alloc_.find(index);
  return it == by_alloc_.end() ? nullptr : &it->second;
}

const block_note* block_notes::for_initial(std::int16_t device, std::uint64_t address) const {
  const auto it = initial_.find({device, address});
  return it == initial_.end() ? nullptr : &it->second;
}

const std::string* block_notes::why_freed(std::size_t index) const {
  const auto it = why_freed_.find(index);
  return it == why_freed_.end() ? nullptr : &it->second;
}

std::string_view to_string(block_origin o) noexcept {
  switch (o) {
    case block_origin::prefetched: return "prefetched";
    case block_origin::recomputed: return "recomputed";
    case block_origin::allocated: break;
  }
  return "";
}

}  // namespace tp::profiler
