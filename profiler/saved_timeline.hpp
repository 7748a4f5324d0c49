#pragma once
// The saved form of a timeline, embedded in every .json and .pickle that
// tensorpager writes, so that `python -m tensorpager.viz` can turn one file
// into any other format without the process that recorded it.
//
// Note [Saved timeline]
// Under the key "tensorpager" (top level of the Perfetto JSON object and of
// the memory_viz snapshot dict; both viewers ignore keys they do not know):
//
//   {"format": "tensorpager.timeline", "version": 1,
//    "event_fields": ["t_ns", "kind", "category", "device", "stream", "address", "bytes", "id",
//                     "detail", "allocated_bytes", "reserved_bytes", "host_bytes", "label"],
//    "kinds": [names of event_kind by value], "categories": [names of category by value],
//    "events": [[one int per field], ...],      (sorted by t_ns)
//    "labels": ["", ...], "devices": ["cpu (simulated)", ...],
//    "dropped": n, "max_events": n,
//    "initial": [{"device": d, "budget": b,
//                 "segments": [{"address", "total_size", "stream", "segment_type",
//                               "blocks": [{"address", "size", "requested_size", "state"}]}]}]}
//
// Readers map kind and category through the tables, not through this
// version's enum values, and reject other formats or a newer version.
// hooks/profiler_bindings.cpp reads it back (timeline_from_saved) and
// tests/python checks the round trip.

#include "profiler/structured_writer.hpp"
#include "profiler/timeline.hpp"

namespace tp::profiler {

inline constexpr int saved_timeline_version = 1;
inline constexpr const char* saved_timeline_format = "tensorpager.timeline";
inline constexpr const char* saved_timeline_key = "tensorpager";

/// Writes t as one object in the form of Note [Saved timeline].
void write_saved_timeline(structured_writer& w, const timeline& t);

}  // namespace tp::profiler
