#pragma once
// Perfetto / Chrome trace-event JSON for a timeline: opens in
// https://ui.perfetto.dev and chrome://tracing.
//
// Note [Trace layout]
// Process 0 ("tensorpager") holds the step slices (thread "steps": complete
// events from one step boundary to the next) and, when the log was full, an
// instant saying how many events were dropped. Each device is process
// device + 1 ("cuda:0", "cpu (simulated)"), with:
//   counter tracks  "allocated", "reserved", "budget" (0: none) and
//                   "host (offloaded)", in bytes, one sample per change;
//   async slices    offload, prefetch and recompute, begin to end, matched
//                   by tensor id, on the thread of the stream that ran them;
//                   a begin with no end (still running when the log was
//                   read) ends at the last timestamp with args.unfinished;
//   instants        oom, reclaim, stall, eviction, segment_alloc,
//                   segment_free, segment_map, segment_unmap and device
//                   sync, on their stream's thread.
// Timestamps are microseconds from the first event (the format's unit), with
// three decimals so nothing below a microsecond is lost; otherData.t0_ns is
// the first event's clock reading. Every track's timestamps are
// nondecreasing. The saved timeline (Note [Saved timeline]) rides along
// under "tensorpager".

#include <string>

#include "profiler/timeline.hpp"

namespace tp::profiler {

/// The trace of t as a JSON document. Pure; throws std::bad_alloc.
std::string to_perfetto_json(const timeline& t);

}  // namespace tp::profiler
