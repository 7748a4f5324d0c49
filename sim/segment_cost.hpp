#pragma once
// What re-creating a storage costs when recompute works per module segment,
// as the live runtime's does, rather than per operator.
//
// Note [Segment recompute in the simulator]
// The live runtime recomputes per module segment (Note [Segments] in
// python/tensorpager/_tracker.py): a dropped storage is re-created by
// rerunning the forward of the segment call that made it, from the
// segment's inputs, up to the storage (it stops at its tensor), so one
// re-creation costs that forward up to and including the producer. The
// simulator replays the producing operator alone (Note [Recomputable
// storages] in recompute_plan.hpp). With sim_options::segment_depth N > 0 it
// charges a re-creation what the live runtime with segment_depth N would:
// the forward operators of the same segment call before the producer run
// again as recompute time, and the runtime's policy is told that cost.
// A segment call is a run of consecutive forward operators whose module
// labels share their first N dotted names (conv1, layer1, ... at depth 1 of
// torchvision's ResNet); an operator with a shorter label, none, or in the
// backward is in no segment and keeps its operator cost.
// The rerun computes what its call made before the storage on the way, so
// the producer's inputs made in the same call are neither made resident nor
// re-created (each would cost a rerun of its own: the recorded Transformer at
// depth 1, whose encoder is one call, re-created 85 storages a step at 0.5
// so, 11.5x, where 38 now do, 6.5x; docs/simulator.md); its inputs from
// outside the call are, as at depth 0. (The policy is still told each
// storage's own cost, and DTR's score still adds the evicted neighbours,
// those of the same call included: an over-estimate there.)
// Only time is modelled: the rerun's intermediate tensors, and the segment's
// inputs that a live rerun needs resident, take no memory here; which
// storages may be dropped stays Note [Recomputable storages] (the live
// runtime also keeps what operators outside every segment made). Traces
// without module labels (DTR's logs) are unaffected.

#include <cstddef>
#include <cstdint>
#include <vector>

#include "sim/trace.hpp"

namespace tp::sim {

/// Per op (indexed like trace::ops): the recorded time of the forward ops of
/// the same segment call at `depth` that ran before it; 0 for an op in no
/// segment, and everywhere when depth is 0. Pure; Requires: t validated.
std::vector<std::int64_t> segment_prefix_ns(const trace& t, std::size_t depth);

/// The segment call each op belongs to, numbered from 0 in trace order; no_call
/// for an op in no segment, and everywhere when depth is 0. Two ops share a
/// number exactly when a rerun of one's segment call runs the other too
/// (when it comes first). Pure; Requires: t validated.
inline constexpr std::size_t no_call = SIZE_MAX;
std::vector<std::size_t> segment_call_of(const trace& t, std::size_t depth);

}  // namespace tp::sim
