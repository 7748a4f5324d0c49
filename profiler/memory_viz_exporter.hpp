#pragma once
// A memory snapshot in the format of torch.cuda.memory._snapshot(), pickled:
// opens in https://pytorch.org/memory_viz ("Active Memory Timeline",
// "Allocator State History") and reads with torch.cuda._memory_viz.
//
// Note [memory_viz snapshot]
// "segments" is the allocator's state at the last recorded event: the
// initial segments (timeline::initial) replayed through the events, with
// free ranges between blocks as "inactive" blocks, as the allocator merges
// them. "device_traces"[d] holds device d's alloc, free_requested,
// free_completed, segment_alloc, segment_free, segment_map, segment_unmap
// and oom actions in order (maps and unmaps as PyTorch records them for its
// expandable segments: one range each, which joins or splits the mapped
// ranges shown as segments), with
// addr, size, stream, time_us and frames; replaying them from empty
// allocators gives the allocator's totals at the last event. tensorpager's
// knowledge rides in fields memory_viz already reads: "category" (alloc
// entries: the block's category, with " (prefetched)" or " (recomputed)"
// for blocks the runtime brought back; other entries: "unknown", which the
// page needs to be present) and "frames" (one frame naming the label and the
// category; a freed block that the runtime evicted gets a second frame
// saying whether it went to host memory or was dropped for recompute).
// Segment types are inferred from size (2 MiB segments are the small pool's,
// Note [Size classes]). The saved timeline rides along under "tensorpager".

#include <string>

#include "profiler/timeline.hpp"

namespace tp::profiler {

/// t as a pickled snapshot dict (protocol 4, Note [Pickle opcodes]). Pure;
/// throws std::bad_alloc.
std::string to_memory_viz_pickle(const timeline& t);

}  // namespace tp::profiler
