#pragma once
// A plan for the next step, made from the step just recorded: which tensor
// leaves the device when, by swap or by drop, and when a swapped one comes
// back, so that the step fits the budget at the least added time (Capuchin,
// Peng et al., ASPLOS 2020; Libra's greedy choice between swap and
// recompute). The runtime carries it out (Note [Carrying out a plan] in
// runtime_plan.cpp); the hybrid policy makes it.
//
// Note [Step plan]
// The recorded step is a sequence of events (track, access, untrack of
// tracked tensors) with their times. What the device holds after event i is
// modelled as floor + the bytes of tracked tensors live and present at i,
// where the floor is what the device held besides resident tracked tensors
// when the allocator last asked for memory (step_record::
// pressure_floor_bytes: weights, gradients, temporaries, the cache's
// fragments), or the planning input's unmanaged bytes before any pressure.
// The planner sweeps the events in order. At an event where the model passes
// the budget it removes, one at a time, the tensor that costs the least per
// byte among those live there, not used there, and able to be away there:
//   - a tensor never used again in the step: free to drop (recomputable) or
//     to swap out (nothing comes back);
//   - swap: its offload starts after its previous use, its prefetch ends by
//     its next use, each direction a channel of the copy bandwidth shared by
//     every planned copy (a fluid model in time buckets, Note [Planning
//     margins] in step_planner.cpp), each copy as long as the copies of its
//     direction and size measured (Note [Copy cost model]). It helps at i only if the offload ends
//     before the operator at i allocates and the prefetch starts after i; the
//     copies then hide under compute, and it is priced at 2% of its round
//     trip. It is away from the first event after its offload ends to the
//     event at which its prefetch starts;
//   - drop: away from i to its next use, where it is recomputed: its recompute
//     time, plus that of each parent not there then (dropped by the plan, or
//     freed by the step: the rerun re-creates it, recursively), plus one
//     copy for a parent the plan swapped away. A tensor that the operator
//     at i reads is not dropped there (it is pinned).
// Ties go to the larger tensor. When nothing can be removed at an event the
// plan does not fit there (fits = false) and the sweep goes on: the run-time
// reclaim covers what the plan cannot. The sweep is O(events x live tensors
// at the events over budget).

#include <cstddef>
#include <cstdint>
#include <optional>
#include <vector>

#include "runtime/access_recorder.hpp"
#include "runtime/copy_cost_model.hpp"
#include "runtime/managed_tensor.hpp"

namespace tp {

/// One absence of a tensor from the device, in event positions of the
/// recorded step (the runtime matches them against the current step's).
struct planned_eviction {
  std::size_t ordinal = 0;
  eviction_action action = eviction_action::swap;
  /// Leave once the event at this position has been recorded (and the tensor
  /// is not pinned): for a swap, right after its previous use; for a drop,
  /// just before the event where memory runs out.
  std::size_t leave_at = 0;
  /// Swap: start the prefetch once the event at this position has been
  /// recorded. Drop: unused.
  std::size_t prefetch_at = 0;
  /// Its next use (recomputed or awaited there), or the number of events when
  /// it is not used again.
  std::size_t back_at = 0;
};

/// The outcome of Note [Step plan]. A value.
struct step_plan {
  std::vector<planned_eviction> evictions;  ///< by leave_at
  std::vector<std::size_t> prefetch_order;  ///< indices into evictions, by prefetch_at
  std::size_t planned_peak_bytes = 0;       ///< the model's peak under the plan
  std::size_t floor_bytes = 0;              ///< the floor it planned with
  std::int64_t added_time_ns = 0;           ///< recompute + copy time not hidden
  std::size_t swapped_bytes = 0;
  std::size_t dropped_bytes = 0;
  bool fits = true;  ///< planned_peak_bytes <= budget (true without a budget)
  bool empty() const { return evictions.empty(); }
};

/// The planner's inputs besides the recorded step.
struct step_planner_inputs {
  std::optional<std::size_t> budget_bytes;  ///< none: an empty plan
  /// Held besides tracked tensors when no pressure was recorded.
  std::size_t unmanaged_bytes = 0;
  /// Note [Copy cost model]: offloads priced to_host, prefetches to_device.
  copy_cost_model copies{};
};

/// Pure: Note [Step plan] over one recorded step.
step_plan make_step_plan(const step_record& recorded, const step_planner_inputs& in);

}  // namespace tp
