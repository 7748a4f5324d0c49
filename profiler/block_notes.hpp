#pragma once
// tp::profiler::block_notes: what a recording says about each block beyond
// its alloc event: tags, where its contents came from, what it held before an
// eviction, and why the runtime freed it. The analysis (text and HTML) and the
// memory_viz exporter read the same notes, so they label a block the same way.
//
// Note [What a block holds]
// An alloc event carries the category of the context in force (Note
// [Categories are inferred] in timeline_analysis.hpp). Three things correct it:
//  - a tag: what the hooks learned the block holds, true for its whole life;
//  - a restore: a block that a prefetch or a recompute fills holds the tensor
//    that was evicted, so it takes the category and label that tensor's block
//    had at its eviction (matched by the tensor id of the eviction and the
//    prefetch or recompute events). Without this, an activation brought back
//    during backward would count as a gradient, the context then in force;
//  - blocks live when recording began have no alloc event: they are keyed by
//    device and address, start as "unknown", and take tags and restores like
//    the others. Their age is unknown: they existed before the recording.

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <unordered_map>
#include <utility>

#include "profiler/timeline.hpp"

namespace tp::profiler {

/// Where a live block's contents came from.
enum class block_origin : std::uint8_t { allocated, prefetched, recomputed };

/// What later events say about one block (Note [What a block holds]).
struct block_note {
  std::optional<profiler::category> category;  ///< empty: the alloc event's
  label_id label = 0;                            ///< 0: the alloc event's
  block_origin origin = block_origin::allocated;
};

/// The notes of one recording, all devices. Built in one pass; read-only after.
class block_notes {
 public:
  explicit block_notes(const timeline& t);

  /// The note of the block that the alloc event t.events[index] made; nullptr
  /// when no later event says anything about it.
  const block_note* for_alloc(std::size_t index) const;
  /// The note of a block live when recording began; nullptr when nothing.
  const block_note* for_initial(std::int16_t device, std::uint64_t address) const;
  /// Why the runtime freed the block of the free_requested event
  /// t.events[index] ("offloaded to host (tensor 7)"); nullptr when it was not
  /// an eviction.
  const std::string* why_freed(std::size_t index) const;

 private:
  struct key_hash {
    std::size_t operator()(const std::pair<std::int16_t, std::uint64_t>& k) const noexcept {
      return std::hash<std::uint64_t>{}(k.second ^ (static_cast<std::uint64_t>(static_cast<std::uint16_t>(k.first)) << 48));
    }
  };
  std::unordered_map<std::size_t, block_note> by_alloc_;
  std::unordered_map<std::pair<std::int16_t, std::uint64_t>, block_note, key_hash> initial_;
  std::unordered_map<std::size_t, std::string> why_freed_;
};

/// "prefetched", "recomputed", or "" for allocated. Pure.
std::string_view to_string(block_origin o) noexcept;

}  // namespace tp::profiler
