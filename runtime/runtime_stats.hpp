#pragma once
// The runtime's counters (tp.stats() gains these through the glue).

#include <cstddef>
#include <cstdint>

namespace tp {

/// A snapshot; a value.
struct runtime_stats {
  // --- what moved ---------------------------------------------------------
  std::size_t offloaded_bytes = 0;   ///< offloads completed (device storage released)
  std::size_t prefetched_bytes = 0;  ///< restores by copy (on demand or ahead)
  std::uint64_t offloads = 0;        ///< offloads started
  std::uint64_t prefetches = 0;
  std::uint64_t cancelled_offloads = 0;  ///< needed again while offloading
  std::uint64_t proactive_offloads = 0;  ///< started ahead of a predicted peak or by a plan
  std::uint64_t planned_evictions = 0;   ///< swaps and drops a step plan started
  std::uint64_t drops = 0;
  std::uint64_t recomputes = 0;
  std::size_t recomputed_bytes = 0;  ///< storages brought back by recompute, summed
  std::uint64_t evictions = 0;  ///< victims chosen by the policy (swap or drop)
  std::uint64_t host_fallbacks = 0;  ///< swaps refused by the host pool
  std::uint64_t shared_skips = 0;    ///< victims skipped: storage held elsewhere (can_release)
  std::uint64_t recompute_limited = 0;  ///< drops turned into swaps: Note [Recompute limit]
  // --- what it cost -------------------------------------------------------
  /// Accesses that found their copy not yet arrived, or that recomputed.
  std::uint64_t stalls = 0;
  /// Of those, copies not arrived when the host asked: the compute stream
  /// waits for them, the host does not (Note [Prefetch ordering]).
  std::uint64_t late_copies = 0;
  std::uint64_t cancelled_prefetches = 0;  ///< prefetches taken back unused by a reclaim
  std::int64_t stall_ns = 0;     ///< host time on the runtime's clock (recomputes)
  std::int64_t policy_ns = 0;    ///< wall time in eviction_policy::choose and plan_step
  std::int64_t plan_ns = 0;      ///< of which plan_step (once per step)
  std::uint64_t policy_calls = 0;
  std::uint64_t reclaims = 0;
  std::size_t reclaimed_bytes = 0;
  // --- where the bytes are now ---------------------------------------------
  std::size_t tracked = 0;
  std::size_t resident_bytes = 0;  ///< resident, offloading or prefetching
  std::size_t on_host_bytes = 0;   ///< offloading, on_host or prefetching
  std::size_t dropped_bytes = 0;
  std::size_t evictable_bytes = 0;  ///< resident candidates nothing else holds (can_release)
  std::size_t held_bytes = 0;       ///< resident candidates the program still holds elsewhere
  std::size_t prefetch_distance = 0;
  // Note [A step is an iteration]
  // stats().steps counts training iterations, not boundaries: an iteration is
  // counted at the first tensor it tracks (what a session's end brings back
  // is an access, and starts none). Boundaries come between iterations
  // (a Python block sees one at the next iteration's first forward, a C++
  // budget_scope at each step() its program calls), so counting them left the
  // last iteration out where no boundary follows it, and every reader added one.
  // A boundary with no tensor tracked since the previous one counts nothing.
  std::uint64_t steps = 0;
  /// Note [Resident floor]: the most held at once that no eviction could
  /// give back, over the last completed step and the one in progress.
  std::size_t floor_bytes = 0;
};

}  // namespace tp
