#pragma once
// tp::profiler::timeline: everything one recording holds, as plain values.
// event_log::snapshot() produces it; every exporter reads it; the Python
// converter (tensorpager.viz) rebuilds it from a saved file.

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "allocator/snapshot.hpp"
#include "profiler/event.hpp"

namespace tp::profiler {

/// One device's allocator when recording began, so that a replay of the
/// events starts from the right state.
struct initial_device_state {
  std::int16_t device = 0;
  std::vector<segment_snapshot> segments;
  std::int64_t budget = -1;  ///< bytes; -1: none
};

/// One recording. A plain value: copy it, build it in a test.
struct timeline {
  /// Sorted by t_ns; ties keep the order the log stored them in.
  std::vector<event> events;
  /// labels[id] is the text of label_id id; labels[0] is "".
  std::vector<std::string> labels{std::string()};
  /// Events the log did not keep because it was full (it keeps the first
  /// max_events; see Note [Bounded log]).
  std::uint64_t dropped = 0;
  /// The cap the log ran with; 0 when unknown.
  std::uint64_t max_events = 0;
  /// The allocator's state when recording began, per device (may be empty:
  /// recording began with empty allocators).
  std::vector<initial_device_state> initial;
  /// A short name for each device index that has events ("cpu (simulated)",
  /// "cuda:0"); may be shorter than the number of devices.
  std::vector<std::string> device_names;

  /// The text of a label, "" for an id out of range.
  const std::string& label_text(label_id id) const {
    static const std::string empty;
    return id < labels.size() ? labels[id] : empty;
  }
};

}  // namespace tp::profiler
